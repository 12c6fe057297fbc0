"""``--ray [ADDRESS]``: the flag that runs a study's units on a Ray cluster (``compare``,
``tasks``, ``arena``, ``extend``; :mod:`posenc.study.ray_units`).

``--ray`` alone starts a Ray on this machine for the one command; ``--ray auto`` joins the
cluster this machine belongs to (``ray start``); ``--ray ray://HOST:10001`` reaches a remote
one through Ray Client; a head's ``HOST:PORT`` works too. Without the flag the units run as
they always have (in this process, or in local worker processes).
"""

from __future__ import annotations

import argparse

from ..study.ray_units import RAY_INSTALL, RayCluster

#: what ``--ray`` without an address stands for
LOCAL = "local"


def add_ray_flag(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--ray [ADDRESS]`` (stored as ``args.ray``)."""
    p.add_argument("--ray", nargs="?", const=LOCAL, default=None, metavar="ADDRESS",
                   help="run the units as Ray tasks, one GPU each on CUDA, else one CPU: "
                        "alone, on a Ray started here; 'auto', on the cluster this machine "
                        "joined with `ray start`; 'ray://HOST:10001', on a remote one "
                        f"(needs `{RAY_INSTALL}`; results land in --out here)")


def ray_cluster(args: argparse.Namespace) -> RayCluster | None:
    """The cluster ``--ray`` asked for, or None without the flag."""
    value = getattr(args, "ray", None)
    if value is None:
        return None
    return RayCluster(None if value == LOCAL else value)
