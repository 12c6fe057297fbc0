"""Studies on a two-node Ray cluster started on this machine (one CPU per node): a compare
smoke run and a tiny task study equal the local executor's leaf by leaf (timings and
placement aside) and both nodes ran units; a driver killed mid-study resumes to the same
results; a node removed while units run changes nothing but where they ran. No Ray process
outlives the module."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from posenc.errors import UserError
from posenc.lab.compare.presets import preset
from posenc.lab.compare.study import run_compare
from posenc.lab.tasks.study import TaskStudyConfig, run_task_study
from posenc.study import Unit
from posenc.study.ray_units import RayCluster, RayUnits
from tests.helpers import process_tree, running, wait_for
from tests.hf.helpers import without
from tests.lab.helpers import TINY

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

#: what differs between two runs of the same study: time, placement, how it was computed
VOLATILE = {"seconds", "train_tokens_per_s", "timing", "placement", "execution", "trained"}
STORE_BYTES = 100 * 2**20
#: the tiny task study with units long enough to be running when a node goes
SLOWER = TaskStudyConfig.from_dict({**TINY.to_dict(), "seq2seq_task": None,
                                   "train": {**TINY.to_dict()["train"], "steps": 100}})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    """A head and one worker node of one CPU each; the driver (this process) connected."""
    before = process_tree(os.getpid())
    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": STORE_BYTES,
        "_system_config": {"health_check_period_ms": 500,
                           "health_check_failure_threshold": 4}})
    nodes.add_node(num_cpus=1, object_store_memory=STORE_BYTES)
    try:
        ray.init(address=nodes.address, logging_level=logging.WARNING, log_to_driver=False)
        nodes.wait_for_nodes()
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        survivors = {p for p in process_tree(os.getpid()) - before if running(p)}
        assert not survivors, f"Ray processes outlived the cluster: {survivors}"


def _nodes_that_ran(results: dict) -> set[str]:
    return {w["node_id"] for w in results["placement"].values()}


def _saved(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def _smoke():
    return preset("smoke", device="cpu")


@pytest.fixture(scope="module")
def compared_here(tmp_path_factory):
    return run_compare(_smoke(), tmp_path_factory.mktemp("here") / "cmp", progress=False,
                       atlas=False)


@pytest.fixture(scope="module")
def tasks_here(tmp_path_factory):
    return run_task_study(tmp_path_factory.mktemp("here") / "tasks", TINY, progress=False)


def test_compare_smoke_on_two_nodes_equals_the_local_run(cluster, compared_here, tmp_path):
    there = run_compare(_smoke(), tmp_path / "cmp", progress=False, atlas=False,
                        cluster=RayCluster(cluster.address))
    assert without(there.results, VOLATILE) == without(compared_here.results, VOLATILE)
    assert len(_nodes_that_ran(there.results)) == 2
    assert set(there.results["placement"]) == {
        f"run/{r['encoding']}/{r['inference_scaling']}/0" for r in there.results["runs"]}
    weights = "runs/rope/seed0/checkpoints/step-00000020/model.safetensors"
    came_back = load_file(tmp_path / "cmp" / weights)          # the run's files came back
    trained_here = load_file(compared_here.out_dir / weights)
    assert came_back.keys() == trained_here.keys()
    assert all(torch.equal(came_back[k], trained_here[k]) for k in came_back)
    assert "## Where the units ran" in (tmp_path / "cmp" / "report.md").read_text()


def test_a_task_study_on_two_nodes_equals_the_local_run(cluster, tasks_here, tmp_path):
    there = run_task_study(tmp_path / "tasks", TINY, progress=False,
                           cluster=RayCluster(cluster.address))
    assert without(there, VOLATILE) == without(tasks_here, VOLATILE)
    assert len(_nodes_that_ran(there)) == 2 and len(there["placement"]) == len(there["runs"])


def _refuse(calls: str) -> None:
    """A unit that fails for the user's reason (counting its calls in the file ``calls``)."""
    with open(calls, "a") as f:
        f.write("x")
    raise UserError("d_model must be divisible by n_heads, got 30 and 4")


def test_a_unit_failing_for_its_own_reason_is_reported_once(cluster, tmp_path):
    calls, unit = tmp_path / "calls", Unit(("bad",), "a bad config")
    units = RayUnits(None, [unit], RayCluster(cluster.address),
                     lambda u: (u.key, _refuse, (str(calls),)))
    with pytest.raises(UserError, match="^d_model must be divisible"):
        units.run(unit, lambda n: None)
    units.close(abort=True)
    assert calls.read_text() == "x"                          # not retried


def test_a_stopped_driver_resumes_to_the_same_results(cluster, compared_here, tmp_path):
    """``posenc compare --ray`` stopped by SIGTERM after its first unit (the tasks not taken
    are cancelled), then run again: it resumes and ends with the uninterrupted results."""
    out = tmp_path / "cmp"
    command = [sys.executable, "-m", "posenc", "compare", "--preset", "smoke", "--out",
               str(out), "--device", "cpu", "--threads", "1", "--no-atlas", "--no-progress",
               "--ray", cluster.address]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)

    def runs_saved() -> list:
        try:
            return json.loads((out / "results.json").read_text())["runs"]
        except (OSError, ValueError, KeyError):
            return []
    try:
        wait_for(lambda: runs_saved() or driver.poll() is not None, 120, "a committed unit")
    finally:
        driver.send_signal(signal.SIGTERM)
        _, stderr = driver.communicate(timeout=60)
    assert driver.returncode != 0, stderr
    cut = json.loads((out / "results.json").read_text())
    assert cut["runs"] and "timing" not in cut                 # stopped part way
    again = run_compare(_smoke(), out, progress=False, atlas=False,
                        cluster=RayCluster(cluster.address))
    committed = {f"{r['encoding']}/seed{s['seed']}" for r in cut["runs"] for s in r["seeds"]}
    assert committed <= set(again.reused) and not committed & set(again.trained)
    assert without(_saved(out), VOLATILE) == without(_saved(compared_here.out_dir), VOLATILE)


def test_a_node_removed_while_units_run_changes_nothing(cluster, tmp_path):
    here = run_task_study(tmp_path / "here", SLOWER, progress=False)
    out, done = tmp_path / "there", {}
    study = threading.Thread(target=lambda: done.update(run_task_study(
        out, SLOWER, progress=False, cluster=RayCluster(cluster.address))))
    study.start()
    wait_for(lambda: (out / "results.json").exists()
             and json.loads((out / "results.json").read_text())["runs"], 120,
             "a unit committed")
    worker = next(n for n in cluster.worker_nodes)
    cluster.remove_node(worker, allow_graceful=False)       # while the other units run
    study.join(180)
    assert not study.is_alive() and done
    keys = [(r["part"], r["task"], r["encoding"], r["seed"]) for r in done["runs"]]
    assert len(keys) == len(set(keys)) == len(here["runs"])
    assert without(done, VOLATILE) == without(here, VOLATILE)
