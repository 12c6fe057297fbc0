"""FLOATER: positions from a neural ODE (Liu et al., 2020, "Learning to Encode Position for
Transformer with Continuous Dynamical Model").

The position vector is the solution of dp/dt = h(p, t) from a learned p(0), sampled at
t_k = k * delta for integer positions k; h is a one-hidden-layer tanh MLP of (p, t). The ODE is
integrated by ``torchdiffeq.odeint`` (any of its solvers; gradients by backpropagation
through the solver). Internally time is counted in positions (tau = t / delta, so
dp/dtau = delta * h(p, tau * delta)): output times are exact integers, a fixed-grid solver
steps on the same grid whatever length is asked for, and position k gets bit-identical
values for every sequence length (adaptive solvers choose their steps from the start of the
trajectory forward, so they are prefix-consistent too).

Differences from the paper: the paper injects p into every Transformer block (one shared ODE,
per-block initial values); here p is added once to the input embeddings, through the same
``embed`` hook as the other absolute encodings. The trajectory caching policy is the one of
:class:`~posenc.encodings.recurrent.TrajectoryEncoding` (recomputed whenever gradients are
enabled, cached and grown by doubling otherwise).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import register
from .checks import require_choice, require_float_in, require_int_at_least, require_positive_int
from .recurrent import TrajectoryEncoding

FIXED_GRID = ("euler", "midpoint", "rk4")
ADAPTIVE = ("dopri5", "bosh3", "adaptive_heun", "dopri8")


class _Dynamics(nn.Module):
    """delta * h(p, tau * delta) with h(p, t) = W2 tanh(W1 p + w_t t + b1) + b2.

    Raw parameters (not ``nn.Linear``) so that a model's blanket Linear initialisation does
    not shrink the dynamics to nothing.
    """

    def __init__(self, width: int, hidden: int, delta: float, init_scale: float) -> None:
        super().__init__()
        self.delta = delta
        self.w1 = nn.Parameter(torch.randn(hidden, width) / (init_scale * math.sqrt(width)))
        self.w_t = nn.Parameter(torch.randn(hidden))
        self.b1 = nn.Parameter(torch.randn(hidden))
        self.w2 = nn.Parameter(torch.randn(width, hidden) * init_scale / math.sqrt(hidden))
        self.b2 = nn.Parameter(torch.zeros(width))

    def forward(self, tau: Tensor, p: Tensor) -> Tensor:
        """fp32 whatever the parameters' dtype. tau: scalar, p (C,) -> (C,)."""
        t = tau * self.delta
        hidden = torch.tanh(p @ self.w1.float().T + self.w_t.float() * t
                            + self.b1.float())                           # (H_mlp,)
        return self.delta * (hidden @ self.w2.float().T + self.b2.float())  # (C,)


@register("floater")
class FloaterEncoding(TrajectoryEncoding):
    """x_k + p(k * delta) with p the solution of a learned ODE.

    Options:
        method: a torchdiffeq solver, fixed-grid ("rk4", "midpoint", "euler") or adaptive
            ("dopri5", "bosh3", "adaptive_heun", "dopri8"); default "rk4".
        delta: ODE time between consecutive positions (> 0, default 0.1).
        substeps: fixed-grid solver steps per position (a power of two, default 1).
        rtol, atol: tolerances of adaptive solvers (in (0, 1), defaults 1e-5 and 1e-7).
        hidden_dim: width of h's hidden layer (64).
        init_scale: size of p(0) and of h's output at initialisation (> 0, 0.02, like a
            learned table).
    """

    #: the solver's times are fp32 integers: exact, so strictly increasing, up to 2**24
    max_positions = 2**24

    def __init__(self, *, method: str = "rk4", delta: float = 0.1, substeps: int = 1,
                 rtol: float = 1e-5, atol: float = 1e-7, hidden_dim: int = 64,
                 init_scale: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        self.method = require_choice("method", method, FIXED_GRID + ADAPTIVE)
        self.delta = require_float_in("delta", delta, 0.0, float("inf"))
        require_int_at_least("substeps", substeps, 1)
        if substeps & (substeps - 1):
            raise UserError(f"substeps must be a power of two (1, 2, 4, ...) so that every "
                             f"position lies exactly on the solver grid, got {substeps}")
        if substeps != 1 and method in ADAPTIVE:
            raise UserError(f"substeps applies to fixed-grid methods {FIXED_GRID}; adaptive "
                             f"method {method!r} sets its own steps (use rtol/atol), got "
                             f"substeps={substeps}")
        self.substeps = substeps
        self.rtol = require_float_in("rtol", rtol, 0.0, 1.0)
        self.atol = require_float_in("atol", atol, 0.0, 1.0)
        require_positive_int("hidden_dim", hidden_dim)
        self.init_scale = require_float_in("init_scale", init_scale, 0.0, float("inf"))
        width = self.n_heads * self.head_dim
        self.p0 = nn.Parameter(torch.randn(width) * init_scale)
        self.dynamics = _Dynamics(width, hidden_dim, self.delta, init_scale)

    def trajectory(self, n: int) -> Tensor:
        """p at positions 0..n-1: (n, C), fp32 (integer times stay exact in bf16 models)."""
        from torchdiffeq import odeint  # imported on use: it loads scipy (~0.5 s)
        p0 = self.p0.float()
        if n == 1:
            return p0[None, :]
        tau = torch.arange(n, dtype=torch.float32, device=p0.device)  # exact integer times
        if self.method in FIXED_GRID:
            options = None if self.substeps == 1 else {"step_size": 1.0 / self.substeps}
            return odeint(self.dynamics, p0, tau, method=self.method, options=options)
        return odeint(self.dynamics, p0, tau, method=self.method, rtol=self.rtol,
                      atol=self.atol)                                   # (n, C)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, method={self.method!r}, delta={self.delta}, "
                f"substeps={self.substeps}")
