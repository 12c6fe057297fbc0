"""The atlas: one figure per idea about positional encodings, drawn from the library's own
functions (``posenc atlas``), with the numbers in atlas.json and index.html / index.md."""

from .atlas import PANELS, atlas_files, write_atlas

__all__ = ["PANELS", "atlas_files", "write_atlas"]
