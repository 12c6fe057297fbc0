"""A study's units as Ray tasks: the executor :func:`~posenc.study.run_study` drives when a
study runs on a cluster (``--ray [ADDRESS]``; Ray 2.x, the optional extra ``posenc[ray]``).

Each unit a study hands over (its ``task_of(unit) -> (key, fn, args)``, the contract of
:class:`posenc.lab.compare.unit_pool.PooledUnits`) becomes one Ray task that declares what
it needs (:func:`task_resources`): one GPU when the study runs on CUDA, else one CPU and
the memory the study estimates for it, so Ray places as many side by side as the cluster
holds. Every task is submitted at once; the driver takes each unit's result in plan order
and commits it through the study core, which alone writes the run directory: no
filesystem is shared between nodes. While it waits for one, the units whose tasks end
first are counted on the progress bar as they end (:meth:`RayUnits.watch`).

- Shared data: an argument wrapped in :class:`Shared` (a prepared corpus, a loaded model)
  goes into Ray's object store once, and each worker process fetches it once.
- Faults: a task whose node or worker dies is run again elsewhere (``max_retries``); a
  unit is deterministic, so its result is the same as had it run once. An exception the
  unit raises (a bad config, a :class:`~posenc.errors.UserError`) is not retried and is
  raised in the driver once, as the original exception.
- Ctrl-C / SIGTERM on the driver (or any failure) cancels the tasks not yet taken
  (:meth:`RayUnits.close`); what was committed stays, and the same command resumes.
- Placement: each task reports the node (IP and id), device and wall time it ran with
  (:meth:`RayUnits.placement`); :func:`run_study` records it under ``placement`` in the
  results, apart from the measured values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .study import Study, Unit

#: times a unit's task is run again when its worker or node dies
MAX_RETRIES = 3
#: shared values a worker process keeps fetched (the newest; one study's data and model)
WORKER_CACHE_SIZE = 4
#: how to install Ray, for the message when it is missing
RAY_INSTALL = "pip install 'posenc[ray]'"
#: seconds the driver waits on the cluster at a time (signals are handled between waits)
WAIT_SECONDS = 1.0

TaskOf = Callable[[Unit], tuple[Any, Callable[..., Any], tuple] | None]
Pick = Callable[[Unit, Any, bool], Any]


@dataclass(frozen=True)
class RayCluster:
    """Where a study's units run: ``address`` ``auto`` (the cluster this machine joined
    with ``ray start``), ``ray://host:10001`` (a remote one, through Ray Client), a head's
    ``host:port``, or None (a Ray started here for this study, stopped after it)."""

    address: str | None = None


@dataclass(frozen=True)
class Shared:
    """A task argument many units share: put into the object store once, fetched once per
    worker process (not once per unit)."""

    value: Any


@dataclass(frozen=True)
class _SharedRef:
    """A :class:`Shared` argument on its way: the object ref inside a list, so that Ray
    hands the ref itself to the task (a top-level ref would be fetched for every task)."""

    refs: list


def is_gpu_device(device: str) -> bool:
    """Whether a resolved device string (``cuda``, ``cuda:1``, ``cpu``, ``mps``) asks for a
    CUDA GPU, which is what Ray's ``num_gpus`` schedules."""
    return str(device).split(":")[0] == "cuda"


def task_resources(device: str, memory: int | None = None) -> dict[str, Any]:
    """What one unit's task asks Ray for: ``num_gpus=1`` on a CUDA device (Ray then makes
    that GPU the task's ``cuda``, and the unit has its memory to itself), else
    ``num_cpus=1`` (one thread) and ``memory``, the bytes the study estimates the unit
    needs, when it does (Ray's ``memory`` is host memory: a scheduling reservation, not a
    limit)."""
    if is_gpu_device(device):
        return {"num_gpus": 1}
    return {"num_cpus": 1, **({"memory": int(memory)} if memory else {})}


def import_ray():
    """The ``ray`` module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


def connect(cluster: RayCluster) -> bool:
    """Connect this process to ``cluster`` unless it already is; True when it connected now
    (and should disconnect when done)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    import logging
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if cluster.address is None:
        options["include_dashboard"] = False
    elif cluster.address.startswith("ray://"):
        options = {}                    # Ray Client: the server's settings apply
    try:
        ray.init(address=cluster.address, **options)
    except ConnectionError as err:
        raise UserError(f"--ray {cluster.address}: no Ray cluster there ({err}); start one "
                        "with `ray start --head` or give its address") from None
    return True


# ------------------------------------------------------------------ in the worker
_FETCHED: dict[str, Any] = {}


def _fetch(ray: Any, arg: Any) -> Any:
    """An argument as the unit's function takes it (a :class:`Shared` one fetched once)."""
    if not isinstance(arg, _SharedRef):
        return arg
    ref = arg.refs[0]
    key = ref.hex()
    if key not in _FETCHED:
        while len(_FETCHED) >= WORKER_CACHE_SIZE:
            _FETCHED.pop(next(iter(_FETCHED)))
        _FETCHED[key] = ray.get(ref)
    return _FETCHED[key]


def call_unit(fn: Callable[..., Any], device: str, *args: Any) -> tuple[Any, dict]:
    """In a Ray worker: ``fn(*args)`` and where it ran (node IP and id, device, seconds)."""
    import ray
    start = time.perf_counter()
    result = fn(*(_fetch(ray, a) for a in args))
    context = ray.get_runtime_context()
    where = {"node_ip": ray.util.get_node_ip_address(), "node_id": context.get_node_id(),
             "device": device, "wall_s": round(time.perf_counter() - start, 3)}
    if is_gpu_device(device):
        where["gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
    return result, where


# ------------------------------------------------------------------ in the driver
class RayUnits:
    """Runs the tasks of ``units`` (``task_of``) on ``cluster``; :meth:`run` waits for a
    unit's task and returns ``pick(unit, task_result, first)``. ``device``: where the
    study's models run (routes GPU tasks); ``memory(unit)``: its estimated bytes, or None.
    A unit without a task runs in this process (``study.run_unit``)."""

    def __init__(self, study: Study, units: Sequence[Unit], cluster: RayCluster,
                 task_of: TaskOf, device: str = "cpu",
                 pick: Pick = lambda unit, result, first: result,
                 memory: Callable[[Unit], int | None] = lambda unit: None) -> None:
        self.study, self.task_of, self.pick, self.device = study, task_of, pick, device
        self.ray = import_ray()
        self.owns_connection = connect(cluster)
        self.refs: dict[Any, Any] = {}            # tasks whose result is not fetched yet
        self.left: dict[Any, int] = {}            # units per task still to take
        self.fetched: dict[Any, tuple[Any, dict]] = {}
        self.placed: dict[tuple, dict] = {}
        self.units_of: dict[Any, list[Unit]] = {}  # each task's units, in plan order
        self.ended: set[Any] = set()              # tasks seen to end (finished or failed)
        self.finished: Callable[[Unit], None] = lambda unit: None
        self._put: dict[int, _SharedRef] = {}
        remote = self.ray.remote(call_unit)
        try:
            for unit in units:
                task = task_of(unit)
                if task is None:
                    continue
                self.left[task[0]] = self.left.get(task[0], 0) + 1
                self.units_of.setdefault(task[0], []).append(unit)
                if task[0] in self.refs:
                    continue
                key, fn, args = task
                options = task_resources(device, memory(unit))
                self.refs[key] = remote.options(
                    **options, max_retries=MAX_RETRIES, retry_exceptions=False,
                    name=unit.label[:100]).remote(fn, device, *map(self._shared, args))
        except BaseException:
            self.close(abort=True)
            raise

    def _shared(self, arg: Any) -> Any:
        """A :class:`Shared` argument put into the object store (once per value)."""
        if not isinstance(arg, Shared):
            return arg
        if id(arg.value) not in self._put:
            self._put[id(arg.value)] = _SharedRef([self.ray.put(arg.value)])
        return self._put[id(arg.value)]

    def watch(self, finished: Callable[[Unit], None]) -> None:
        """Call ``finished(unit)`` for the units of each task that ends while the driver
        waits for an earlier one (the progress bar counts them then)."""
        self.finished = finished

    def _wait_for(self, key: Any) -> None:
        """Wait until the task ``key`` ends, telling :meth:`watch` of those ending first."""
        while key not in self.ended:
            pending = [(k, ref) for k, ref in self.refs.items() if k not in self.ended]
            ready, _ = self.ray.wait([ref for _, ref in pending], num_returns=1,
                                     timeout=WAIT_SECONDS, fetch_local=False)
            for ref in ready:
                done = next(k for k, r in pending if r == ref)
                self.ended.add(done)
                if done != key:
                    for unit in self.units_of[done]:
                        self.finished(unit)

    def run(self, unit: Unit, advance: Callable[[int], None]) -> Any:
        task = self.task_of(unit)
        if task is None or task[0] not in self.left:
            return self.study.run_unit(unit, advance)
        key = task[0]
        first = key in self.refs
        if first:
            self._wait_for(key)
            try:
                self.fetched[key] = self.ray.get(self.refs.pop(key))
            except self.ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                if isinstance(cause, UserError):
                    raise cause from None           # a bad input: one line, as run here
                raise
        result, where = self.fetched[key]
        self.left[key] -= 1
        if not self.left[key]:                      # its last unit: let the result go
            del self.fetched[key]
        self.placed[unit.key] = where
        return self.pick(unit, result, first)

    def placement(self, unit: Unit) -> dict | None:
        """Where ``unit`` ran (node IP and id, device, its task's wall seconds), or None
        when it ran in this process."""
        return self.placed.get(unit.key)

    def close(self, abort: bool = False) -> None:
        """Cancel the tasks whose results were not taken (``abort``: the study was
        interrupted or failed; otherwise none is left), then disconnect if this executor
        connected."""
        if not hasattr(self, "refs"):
            return
        for ref in self.refs.values():
            try:
                self.ray.cancel(ref, force=True)
            except Exception:                       # already finished or gone
                pass
        self.refs, self.fetched, self._put = {}, {}, {}
        if self.owns_connection:
            self.ray.shutdown()
            self.owns_connection = False


# ------------------------------------------------------------------ a study run in process
def run_unit_of(study: Study, unit: Unit) -> Any:
    """In a Ray worker: ``study.run_unit(unit)`` on the study ``prepare`` made in the
    driver (shipped once per worker), quietly."""
    return study.run_unit(unit, lambda n: None)


def study_units_on(study: Study, shipped: Study, units: Sequence[Unit], cluster: RayCluster,
                   device: str, memory: Callable[[Unit], int | None] = lambda unit: None,
                   here: Callable[[Unit], bool] = lambda unit: False) -> RayUnits:
    """The executor of a study whose units share what ``prepare`` loaded (a model, a
    tokenizer, a text): ``shipped`` (the prepared study, picklable) goes to the object store
    once and every unit runs on it in a Ray task, but those ``here`` says run in this
    process (bookkeeping units)."""
    prepared = Shared(shipped)
    return RayUnits(study, units, cluster,
                    lambda unit: None if here(unit) else (unit.key, run_unit_of,
                                                          (prepared, unit)),
                    device, memory=memory)
