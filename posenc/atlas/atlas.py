"""``write_atlas``: draw every panel into a directory with atlas.json and the index pages.

Panels are functions ``out_dir -> Panel``, listed in :data:`PANELS` in reading order; with a
trained run, :mod:`posenc.atlas.run_extras` adds that model's learned biases and attention
maps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runio import atomic_write
from .absolute import absolute_trajectories_panel, sinusoidal_panel
from .biases import alibi_panel, distance_biases_panel, t5_buckets_panel
from .cope import cope_panel
from .figure import Panel, as_json
from .pages import write_html, write_markdown
from .path import path_panel
from .plans import layer_plan_panel, window_mask_panel
from .relative import logn_panel, relative_clipping_panel
from .rope_decay import rope_decay_panel
from .rope_scalings import rope_scaling_scores_panel, rope_scaling_wavelengths_panel
from .rotary_axes import mrope_panel, p_rope_panel
from .stick_breaking import stick_breaking_panel

PANELS: dict[str, Callable[[Path], Panel]] = {
    "sinusoidal": sinusoidal_panel,
    "rope_decay": rope_decay_panel,
    "rope_scaling_wavelengths": rope_scaling_wavelengths_panel,
    "rope_scaling_scores": rope_scaling_scores_panel,
    "p_rope": p_rope_panel,
    "mrope_grid": mrope_panel,
    "alibi": alibi_panel,
    "t5_buckets": t5_buckets_panel,
    "distance_biases": distance_biases_panel,
    "relative_clipping": relative_clipping_panel,
    "absolute_trajectories": absolute_trajectories_panel,
    "logn": logn_panel,
    "cope_positions": cope_panel,
    "path_transform": path_panel,
    "window_mask": window_mask_panel,
    "layer_plan": layer_plan_panel,
    "stick_breaking": stick_breaking_panel,
}
#: what write_atlas writes besides the panels' PNGs
PAGE_FILES = ("atlas.json", "index.html", "index.md")
#: the figures of a run (``run_dir``)
RUN_IMAGES = ("run_learned_terms.png", "run_attention.png")


def atlas_files() -> list[str]:
    """Every file name write_atlas may write (each panel draws ``<panel>.png``)."""
    return [*PAGE_FILES, *(f"{name}.png" for name in PANELS), *RUN_IMAGES]


def write_atlas(out_dir: str | Path, run_dir: str | Path | None = None,
                progress: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Draw the atlas into ``out_dir`` (created if needed; files of an earlier atlas there
    are replaced or, for the run figures of an earlier ``--run``, removed; nothing else is
    touched).

    ``run_dir``: a ``posenc train`` run (or ``runs/<encoding>/seed<k>`` inside a ``posenc compare``
    directory) whose learned biases and attention maps are added. ``progress`` is called
    with each panel's name before it is drawn (e.g. ``print``).

    Returns ``{"panels": [names], "images": [file names], "json": path, "html": path,
    "markdown": path}``.
    """
    out_dir = Path(out_dir)
    loaded = None
    if run_dir is not None:
        from .run_extras import load_atlas_run
        loaded = load_atlas_run(run_dir)          # fail on a bad run before drawing anything
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in RUN_IMAGES:                    # a previous atlas's run figures
        (out_dir / stale).unlink(missing_ok=True)
    panels = []
    for name, draw in PANELS.items():
        if progress:
            progress(name)
        panels.append(draw(out_dir))
    if loaded is not None:
        from .run_extras import run_panels
        panels += run_panels(loaded, out_dir, progress)
    doc = {p.name: as_json(p.data) for p in panels}
    json_path = out_dir / "atlas.json"
    atomic_write(json_path, (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8"))
    run_label = str(run_dir) if run_dir is not None else None
    return {"panels": [p.name for p in panels],
            "images": [image for p in panels for image in p.images],
            "json": json_path,
            "html": write_html(out_dir, panels, run_label),
            "markdown": write_markdown(out_dir, panels, run_label)}
