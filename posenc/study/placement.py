"""Where each unit of a study ran, when it ran on a cluster: results.json's ``placement``
(unit name -> node IP and id, device, wall seconds of its task) and the report's table.

Placement is metadata, kept apart from what a unit measured: the same unit gives the same
numbers whichever node ran it, and a study run in one process records none.
"""

from __future__ import annotations

from typing import Any

from .tables import markdown_table

PLACEMENT = "placement"


def unit_name(unit: Any) -> str:
    """A unit's (:class:`~posenc.study.Unit`) name in ``placement``: its key's parts
    joined by ``/``."""
    return "/".join(str(part) for part in unit.key)


def record_placement(results: dict, unit: Any, where: dict) -> None:
    """File where ``unit`` ran under ``results["placement"]``."""
    results.setdefault(PLACEMENT, {})[unit_name(unit)] = dict(where)


def placement_markdown(results: dict) -> str:
    """The report's section on where units ran ("" when none ran on a cluster): a line per
    node (units, seconds) and a row per unit."""
    placed = results.get(PLACEMENT) or {}
    if not placed:
        return ""
    nodes: dict[str, list[float]] = {}
    for where in placed.values():
        nodes.setdefault(_node(where), []).append(float(where.get("wall_s") or 0.0))
    per_node = "\n".join(markdown_table(["node", "units", "task seconds"],
                              [[n, str(len(s)), f"{sum(s):.1f}"] for n, s in nodes.items()]))
    rows = [[name, _node(w), str(w.get("device", "")), f"{float(w.get('wall_s') or 0):.2f}"]
            for name, w in placed.items()]
    per_unit = "\n".join(markdown_table(["unit", "node", "device", "task seconds"], rows))
    return ("\n\n## Where the units ran\n\nUnits run as Ray tasks (`--ray`); a unit's numbers "
            "do not depend on its node. Units of one task (a run's scalings) share its "
            "seconds.\n\n" + per_node + "\n\n" + per_unit + "\n")


def _node(where: dict) -> str:
    return f"{where.get('node_ip', '?')} ({str(where.get('node_id', '?'))[:8]})"
