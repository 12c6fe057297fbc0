"""``--ray [ADDRESS]`` on every study command: alone a Ray started here, ``auto`` or an
address a running cluster, absent no Ray at all."""

from __future__ import annotations

import pytest

from posenc.cli import build_parser
from posenc.cli.ray_flag import ray_cluster
from posenc.study.ray_units import RayCluster

COMMANDS = {"compare": ["--out", "x"], "tasks": ["--out", "x"], "arena": ["--out", "x"],
            "extend": ["m"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("flag, cluster", [
    ([], None), (["--ray"], RayCluster(None)), (["--ray", "auto"], RayCluster("auto")),
    (["--ray", "ray://head:10001"], RayCluster("ray://head:10001"))])
def test_the_ray_flag_names_the_cluster(command, flag, cluster):
    args = build_parser().parse_args([command, *COMMANDS[command], *flag])
    assert ray_cluster(args) == cluster
