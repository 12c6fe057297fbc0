"""The custom op posenc::rotary: torch.library's own checks, torch.compile(fullgraph=True)
tracing through it with the eager results (values and gradients), the size from which
compiled code takes it, export, and eager calls staying on the direct ctypes path."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from posenc import build_encoding
from posenc.encodings.context import HookContext
from posenc.kernels import rotary as rk
from posenc.kernels import rotary_native as rn

EXACT = dict(rtol=0.0, atol=0.0)
OP = torch.ops.posenc.rotary.default


def qkv_view(b, h, t, d, dtype=torch.float32):
    """q as the attention layer makes it: a (B, H, T, D) view of a (B, T, 3*H*D) projection."""
    qkv = torch.randn(b, t, 3 * h * d).to(dtype)
    return qkv[..., : h * d].view(b, t, h, d).transpose(1, 2)


def angles(length, rot, batch=None):
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    pos = torch.arange(length) if batch is None else \
        torch.arange(length) + 5 * torch.arange(batch)[:, None]
    theta = rk.rotary_angles(pos, inv_freq)                    # (L, R/2) or (B, L, R/2)
    return theta.cos(), theta.sin()


@pytest.fixture
def kernel_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(rk, "rotate_native", lambda *a: calls.append(a) or rn.rotate_native(*a))
    return calls


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def op_at_any_size(monkeypatch):
    """Compiled code takes the op for small tensors too (they keep these tests fast)."""
    monkeypatch.setattr(rk, "COMPILED_OP_MIN_BYTES", 0)


def graph_ops(fn, *args):
    """The call targets of the graph(s) torch.compile(fullgraph=True) traces from fn."""
    targets = []

    def backend(gm, example_inputs):
        targets.extend(node.target for node in gm.graph.nodes if node.op == "call_function")
        return gm
    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return targets


@pytest.mark.parametrize("case", ["fp32", "bf16", "strided", "per_sample", "partial",
                                  "interleaved", "float64", "requires_grad"])
def test_opcheck(native_rotary, case):
    """Schema, fake implementation (shapes and strides), autograd registration and AOT
    dispatch, on the kernel's inputs and on ones it leaves to the reference (float64)."""
    dtype = {"bf16": torch.bfloat16, "float64": torch.float64}.get(case, torch.float32)
    x = qkv_view(2, 3, 5, 16, dtype) if case == "strided" else torch.randn(2, 3, 5, 16).to(dtype)
    cos, sin = angles(5, 8 if case == "partial" else 16, batch=2 if case == "per_sample" else None)
    if case == "per_sample":
        cos, sin = cos[:, None], sin[:, None]                   # (B, 1, L, R/2)
    if case == "float64":
        cos, sin = cos.double(), sin.double()
    if case == "requires_grad":
        x.requires_grad_()
    layout = "interleaved" if case == "interleaved" else "half"
    torch.library.opcheck(OP, (x, cos, sin, layout))


def test_op_gradients_of_x_and_of_the_angles():
    """float64 (the op's reference branch): gradcheck of x, cos and sin (the rotation runs
    in fp32, so with a large step: it is bilinear in x and the angles); fp32 (the kernel):
    the angles' gradients match the reference's."""
    x = torch.randn(2, 2, 4, 6, dtype=torch.float64, requires_grad=True)
    cos, sin = (t.double().requires_grad_() for t in angles(4, 4, batch=2))
    for layout in rk.LAYOUTS:
        assert torch.autograd.gradcheck(
            lambda x, c, s: rk.rotary_op(x, c, s, layout), (x, cos, sin),
            eps=1e-2, atol=1e-4, rtol=1e-3)
    x32 = x.detach().float().requires_grad_()
    c32, s32 = (t.detach().float().requires_grad_() for t in (cos, sin))   # (B, L, R/2)
    assert rn.fits_kernel(x32, c32[:, None], s32[:, None])
    got = torch.autograd.grad(rk.rotary_op(x32, c32, s32, "half").square().sum(),
                              (x32, c32, s32))
    want = torch.autograd.grad(rk.apply_rotary_reference(x32, c32, s32).square().sum(),
                               (x32, c32, s32))
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_apply_rotary_traces_the_op_and_equals_eager(native_rotary, fresh_dynamo,
                                                              op_at_any_size, kernel_calls,
                                                              dtype, layout):
    """fullgraph=True (no graph break) with inductor: the op in the graph, the kernel run
    forward and backward, values and gradients equal to eager bit for bit."""
    cos, sin = angles(9, 16)
    pcos, psin = angles(9, 16, batch=2)

    def fn(q, k):
        return rk.apply_rotary(q, cos, sin, layout), rk.apply_rotary(k, pcos, psin, layout)
    assert graph_ops(fn, qkv_view(2, 3, 9, 32, dtype), torch.randn(2, 3, 9, 32).to(dtype)
                     ).count(torch.ops.posenc.rotary) == 2
    kernel_calls.clear()
    q, k = qkv_view(2, 3, 9, 32, dtype), torch.randn(2, 3, 9, 32).to(dtype)
    grads = [torch.randn(2, 3, 9, 32).to(dtype) for _ in range(2)]
    results = []
    for run in (fn, torch.compile(fn, fullgraph=True)):
        leaves = [q.detach().requires_grad_(), k.detach().requires_grad_()]
        outs = run(*leaves)
        results.append((outs, torch.autograd.grad(outs, leaves, grads)))
    (eager, eager_grads), (compiled, compiled_grads) = results
    for a, b in zip(eager + eager_grads, compiled + compiled_grads):
        assert_close(a, b, **EXACT)
    assert [t.stride() for t in eager] == [t.stride() for t in compiled]   # x's memory order
    assert len(kernel_calls) == 8                  # 2 forward + 2 backward, eager and compiled


def test_compiled_rope_layer_and_dynamic_lengths(native_rotary, fresh_dynamo, op_at_any_size,
                                                 kernel_calls):
    """RoPE's transform_qk compiled whole, with lengths marked dynamic: eager's numbers, to
    fp32 rounding (inductor computes cos and sin of the angles with its own vector code)."""
    pe = build_encoding("rope", n_heads=2, head_dim=16)
    compiled = torch.compile(lambda q, k, pos: pe.transform_qk(q, k, HookContext(pos, pos)),
                             fullgraph=True, dynamic=True)
    for length in (7, 12):
        q, k = qkv_view(1, 2, length, 16), qkv_view(1, 2, length, 16)
        pos = torch.arange(3, 3 + length)
        for a, b in zip(compiled(q, k, pos),
                        pe.transform_qk(q, k, HookContext.for_positions(pos, pos))):
            assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert len(kernel_calls) == 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_code_takes_the_op_for_large_outputs_only(native_rotary, fresh_dynamo, dtype):
    """Below COMPILED_OP_MIN_BYTES the traced graph holds the reference (which inductor
    fuses), from there on the op; both give eager's numbers."""
    cos, sin = angles(4096, 128)
    big = qkv_view(1, 4, 4096, 128, dtype)                      # 8 MiB (fp32), 4 MiB (bf16)
    large = big.numel() * big.element_size() >= rk.COMPILED_OP_MIN_BYTES
    assert large == (dtype == torch.float32)
    ops = graph_ops(lambda x: rk.apply_rotary(x, cos, sin), big)
    assert (torch.ops.posenc.rotary in ops) == large
    small = qkv_view(2, 3, 9, 32, dtype)
    cos, sin = angles(9, 16)

    def fn(x):
        return rk.apply_rotary(x, cos, sin, "interleaved")
    assert torch.ops.posenc.rotary not in graph_ops(fn, small)
    assert_close(torch.compile(fn, fullgraph=True)(small), fn(small), **EXACT)


def test_compiled_without_native_kernels_traces_the_reference(monkeypatch, fresh_dynamo,
                                                              op_at_any_size):
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    cos, sin = angles(6, 8)
    x = torch.randn(2, 6, 8)
    ops = graph_ops(lambda x: rk.apply_rotary(x, cos, sin), x)
    assert torch.ops.posenc.rotary not in ops and ops
    compiled = torch.compile(lambda x: rk.apply_rotary(x, cos, sin), fullgraph=True)
    assert_close(compiled(x), rk.apply_rotary_reference(x, cos, sin), **EXACT)


def test_export_keeps_the_op(native_rotary, op_at_any_size):
    cos, sin = angles(5, 8)

    class Rotate(torch.nn.Module):
        def forward(self, x):
            return rk.apply_rotary(x, cos, sin, "interleaved")
    x = torch.randn(2, 3, 5, 8)
    program = torch.export.export(Rotate(), (x,))
    assert OP in [n.target for n in program.graph.nodes]
    assert_close(program.module()(x), rk.apply_rotary(x, cos, sin, "interleaved"), **EXACT)


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def test_eager_calls_skip_the_op(native_rotary, kernel_calls):
    """Eager calls go straight to the kernel (the op's dispatch costs more than the kernel
    on small tensors, BENCHMARKS.md); the op serves torch.compile and export."""
    cos, sin = angles(5, 8)
    x = torch.randn(2, 3, 5, 8, requires_grad=True)
    grad = torch.randn(2, 3, 5, 8)
    with _Ops() as mode:
        rk.apply_rotary(x, cos, sin).backward(grad)
    assert OP not in mode.seen and len(kernel_calls) == 2
