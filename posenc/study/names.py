"""How messages name the caller's options: one table for the Python API and the command line.

A library message that tells the user what to change names the option as the caller gave it:
``overwrite=True`` from Python, ``--overwrite`` from a command. Each option is spelled here
once; the library takes a ``names`` mapping (:data:`API_NAMES` by default) and the commands
pass :data:`CLI_NAMES`. No library message spells a flag itself.
"""

from __future__ import annotations

from types import MappingProxyType

#: option -> (its spelling in the Python API, its flag on the command line)
SPELLINGS: dict[str, tuple[str, str]] = {
    "overwrite": ("overwrite=True", "--overwrite"),
    "out": ("out_dir", "--out"),
    "run_dir": ("run_dir", "--out"),
    "lengths": ("lengths", "--lengths"),
    "save": ("save", "--save"),
    "finetune_steps": ("finetune_steps", "--finetune-steps"),
}

#: how the Python API names each option (the default of every ``names`` argument)
API_NAMES = MappingProxyType({k: api for k, (api, _) in SPELLINGS.items()})
#: how the commands name each option (``posenc compare --out``, ...)
CLI_NAMES = MappingProxyType({k: cli for k, (_, cli) in SPELLINGS.items()})
