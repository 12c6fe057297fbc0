"""Index layouts between per-distance tables and (query, key) pairs, shared by the relative
encodings: the relative shift (:mod:`.relative_shift`), clipped distances
(:mod:`.clipped_pairs`) and row-group tables over a causal block (:mod:`.causal_pairs`)."""
