"""Native kernels and the index layouts the encodings build on: the bottom layer of posenc.

- :mod:`.rotary`: rotating query/key pairs (RoPE's hot path), a C kernel with a plain-torch
  reference; :mod:`.pairs`: passes between distance tables and causal pair blocks;
  :mod:`.build`: compiling and loading the C sources (``csrc/*.c``, shipped with the package).
- :mod:`.layouts`: how per-distance tables become per-pair terms (relative shift, clipped and
  causal pair layouts).

Nothing here imports the rest of posenc.
"""
