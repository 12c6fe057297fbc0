"""What a study's Ray tasks ask for, without a cluster: a CUDA study's units each ask for
one GPU, a CPU study's for one CPU, with the study's memory estimate; a unit is retried when
its node dies, never for its own exception; the placement table; the missing-Ray message."""

from __future__ import annotations

import sys

import pytest

from posenc.errors import UserError
from posenc.lab.tasks import study as task_study
from posenc.lab.tasks.study import TaskStudy
from posenc.study import RunDirectory, Study, StudyKind, Unit, ray_units, run_study
from posenc.study.placement import placement_markdown, record_placement
from posenc.study.ray_units import MAX_RETRIES, RayCluster, RayUnits, Shared, task_resources
from tests.lab.helpers import TINY


class _FakeRemote:
    """Records the options of each submission; runs the call when its result is asked."""

    def __init__(self, submitted: list) -> None:
        self.submitted, self.pending = submitted, {}

    def options(self, **options):
        self.pending = options
        return self

    def remote(self, fn, device, *args):
        self.submitted.append(self.pending)
        return (fn, device, args)


class _FakeRay:
    def __init__(self) -> None:
        self.submitted, self.put_count, self.cancelled, self.waits = [], 0, [], 0

    def remote(self, fn):
        return _FakeRemote(self.submitted)

    def put(self, value):
        self.put_count += 1
        return _FakeRef(value)

    def get(self, ref):
        fn, device, args = ref
        args = [a.refs[0].value if isinstance(a, ray_units._SharedRef) else a for a in args]
        return fn(*args), {"node_ip": "10.0.0.7", "node_id": "abcdef0123", "device": device,
                           "wall_s": 1.5}

    def wait(self, refs, num_returns=1, timeout=None, fetch_local=True):
        """The newest submission ends first (units finish out of plan order)."""
        self.waits += 1
        return refs[-num_returns:], refs[:-num_returns]

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)


class _FakeRef:
    def __init__(self, value) -> None:
        self.value = value


@pytest.fixture
def fake_ray(monkeypatch):
    fake = _FakeRay()
    monkeypatch.setattr(ray_units, "import_ray", lambda: fake)
    monkeypatch.setattr(ray_units, "connect", lambda cluster: False)
    return fake


def _add(x, y):
    return x + y


class _Here:
    def run_unit(self, unit, advance):
        return "here"


@pytest.mark.parametrize("device, expected", [
    ("cuda", {"num_gpus": 1}), ("cuda:1", {"num_gpus": 1}),
    ("cpu", {"num_cpus": 1, "memory": 123}), ("mps", {"num_cpus": 1, "memory": 123})])
def test_a_cuda_device_asks_for_one_gpu_any_other_for_one_cpu_and_memory(device, expected):
    assert task_resources(device, 123.0) == expected
    assert "memory" not in task_resources(device)


@pytest.mark.parametrize("device, route", [("cuda", "num_gpus"), ("cpu", "num_cpus")])
def test_every_unit_task_declares_its_device_memory_and_retries(fake_ray, device, route):
    units = [Unit(("a",), "a"), Unit(("b",), "b"), Unit(("c",), "c")]
    shared = Shared(40)

    def task(unit):
        return None if unit.key == ("c",) else (unit.key, _add, (shared, len(unit.label)))
    executor = RayUnits(_Here(), units, RayCluster(), task, device,
                        memory=lambda unit: 2**20)
    assert len(fake_ray.submitted) == 2 and fake_ray.put_count == 1    # shared put once
    for options in fake_ray.submitted:
        assert options[route] == 1 and options.get("memory") == (
            2**20 if route == "num_cpus" else None)            # a GPU unit has its GPU
        assert options["max_retries"] == MAX_RETRIES and options["retry_exceptions"] is False
        assert ({"num_gpus", "num_cpus"} - {route}).isdisjoint(options)
    assert executor.run(units[0], lambda n: None) == 41
    assert executor.run(units[2], lambda n: None) == "here"            # no task: in process
    assert executor.placement(units[0])["device"] == device
    assert executor.placement(units[2]) is None
    executor.close(abort=True)
    assert len(fake_ray.cancelled) == 1                                 # b was never taken


def test_a_task_study_on_cuda_routes_every_run_to_a_gpu(fake_ray, monkeypatch):
    monkeypatch.setattr(task_study, "eval_device", lambda: "cuda")
    study = TaskStudy(TINY, cluster=RayCluster("auto"))
    study.prepare(None)
    units = study.plan({"runs": []})
    study.executor(units).close()
    assert len(fake_ray.submitted) == len(units) > 1
    assert all(o["num_gpus"] == 1 and "num_cpus" not in o for o in fake_ray.submitted)


def test_the_placement_table_counts_units_per_node():
    results: dict = {}
    for i, node in enumerate(("aaaaaaaa11", "bbbbbbbb22", "bbbbbbbb22")):
        record_placement(results, Unit(("run", f"e{i}", None, 0), "x"),
                         {"node_ip": "10.0.0.1", "node_id": node, "device": "cpu",
                          "wall_s": 2.0})
    assert set(results["placement"]) == {"run/e0/None/0", "run/e1/None/0", "run/e2/None/0"}
    text = placement_markdown(results)
    assert "| 10.0.0.1 (aaaaaaaa) | 1 | 2.0 |" in text
    assert "| 10.0.0.1 (bbbbbbbb) | 2 | 4.0 |" in text
    assert placement_markdown({}) == ""


def test_without_ray_the_flag_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"posenc\[ray\]"):
        ray_units.import_ray()


class _Tripled(Study):
    """A toy study whose units (weight 1, 2, 3) run as (fake) Ray tasks."""

    kind = StudyKind("tripled", 1, "posenc tripled", ("results.json",))

    def incomparable(self, existing):
        return None

    def prepare(self, existing):
        return {"tripled": {}}

    def plan(self, results):
        return [Unit((n,), f"triple {n}", weight=n) for n in (1, 2, 3)]

    def commit(self, results, unit, result):
        results["tripled"][str(unit.key[0])] = result

    def render(self, results, directory: RunDirectory, final):
        return []

    def executor(self, units):
        return RayUnits(self, units, RayCluster(),
                        lambda unit: (unit.key, _add, (unit.key[0], 2 * unit.key[0])))


def test_the_bar_counts_units_as_their_tasks_end_not_in_plan_order(fake_ray, tmp_path, capsys):
    """The last units' tasks end first: waiting for the first unit counts all three, so the
    first unit's line already says 100%; each unit's work is counted once."""
    outcome = run_study(_Tripled(), tmp_path, progress=True)
    assert outcome.results["tripled"] == {"1": 3, "2": 6, "3": 9}
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tripled:")]
    assert lines[0].startswith("tripled:   0% triple 1")             # the first unit starts
    assert lines[1].startswith("tripled: 100% triple 1")             # ... and all have ended
    assert all(ln.startswith("tripled: 100%") for ln in lines[1:]) and len(lines) == 4
    assert fake_ray.waits == 3                                       # one wait per task
