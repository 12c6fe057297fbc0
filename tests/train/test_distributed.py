"""Data-parallel training on CPU (gloo): two processes stay in sync and match one process
training on their combined batch (packed documents too); the real ``torchrun ... posenc
train`` command works."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from posenc.models import LMConfig
from posenc.train import TrainConfig, load_run, train
from tests.data.helpers import write_short_files

STEPS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_data(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(30):
        (folder / f"{i:02d}.txt").write_text("".join(f"{i} and {j} make {i + j}\n"
                                                     for j in range(40)))
    return folder


def config(tmp_path, batch_size, pack=False):
    model = LMConfig(d_model=32, n_layers=1, n_heads=2, max_len=16, d_ff=64, pe="alibi")
    data = write_short_files(tmp_path / "short", 60) if pack else make_data(tmp_path / "data")
    return TrainConfig(model=model, data=str(data), train_len=16, batch_size=batch_size,
                       steps=STEPS, checkpoint_every=2, cache_dir=str(tmp_path / "cache"),
                       device="cpu", eval_windows=4, pack=pack)


def _worker(rank: int, world: int, port: int, cfg_dict: dict, run_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
                      RANK=str(rank), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)

    def save(step, record, model):
        if step == STEPS:
            torch.save({k: v.clone() for k, v in model.state_dict().items()},
                       f"{out}/rank{rank}.pt")

    train(TrainConfig.from_dict(cfg_dict), run_dir, progress=False, on_step=save)


@pytest.mark.parametrize("pack", [False, True])
def test_two_processes_stay_in_sync_and_match_one_process(tmp_path, pack):
    """Packed, the ranks score different numbers of targets: the loss is still the mean over
    the global batch's scored targets, as one process computes it."""
    cfg = config(tmp_path, batch_size=2, pack=pack)
    mp.spawn(_worker, args=(2, free_port(), cfg.to_dict(), str(tmp_path / "ddp"),
                            str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    for name in r0:
        torch.testing.assert_close(r0[name], r1[name], rtol=0, atol=0)
    ddp = load_run(tmp_path / "ddp")
    steps = [r for r in ddp.log if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    assert steps[-1]["tokens"] == STEPS * 2 * 2 * 16                  # global tokens
    train(config(tmp_path, batch_size=4, pack=pack), tmp_path / "single", progress=False)
    single = load_run(tmp_path / "single")
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(r0[name], value, rtol=1e-4, atol=1e-5)
    losses = torch.tensor([r["loss"] for r in single.log if "loss" in r], dtype=torch.float64)
    torch.testing.assert_close(
        torch.tensor([r["loss"] for r in steps], dtype=torch.float64), losses,
        rtol=1e-5, atol=1e-5)
    assert losses[0] - losses[-1] > 0.1                               # it did train


def test_torchrun_runs_the_same_command(tmp_path):
    data = make_data(tmp_path / "data")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(free_port()), "-m", "posenc.cli", "train",
           "--out", str(tmp_path / "run"), "--data", str(data), "--pe", "rope",
           "--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--train-len", "16",
           "--batch-size", "2", "--steps", "3", "--cache-dir", str(tmp_path / "cache"),
           "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("rope: 3 steps") == 1           # rank 0 reports
    run = load_run(tmp_path / "run")
    assert [r["step"] for r in run.log if "loss" in r] == [1, 2, 3]   # rank 0 alone writes
    assert run.log[-1]["step"] == 3 and "val_loss" in run.log[-1]


def test_a_cuda_device_string_without_cuda_is_one_line(monkeypatch):
    import torch

    from posenc.errors import UserError
    from posenc.train import distributed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(UserError, match=f"device '{device}' was asked for but CUDA"):
            distributed.setup(device)
    assert distributed.setup("auto").device == torch.device("cpu")
