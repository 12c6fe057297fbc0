"""Kazemnejad et al. (2023), "The Impact of Positional Encoding on Length Generalization in
Transformers", NeurIPS 2023: on their synthetic tasks (decoder-only models trained on short
instances, tested on longer ones) NoPE and T5's relative bias generalise best, ALiBi, RoPE and
absolute (sinusoidal) encodings worse.

Their ordering as pairs, read by the task study's verdicts (:mod:`posenc.lab.tasks.verdicts`)
on exact match and by the comparison's papers section (:mod:`posenc.lab.claims.papers`) on
perplexity ratios.
"""

#: each pair reads "the first generalises better than the second"
KAZEMNEJAD_PAIRS = (("nope", "rope"), ("nope", "alibi"), ("nope", "sinusoidal"),
                    ("t5", "rope"), ("t5", "alibi"), ("t5", "sinusoidal"))
