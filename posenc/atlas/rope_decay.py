"""RoPE's long-range decay (Su et al., 2021, "RoFormer", Section 3.4.3).

Grouping the d dimensions of q and k into d/2 complex pairs, q.k at distance r is
Re[sum_i h_i e^{i r theta_i}] with h_i the product of pair i of q and the conjugate of pair i
of k. Summation by parts (Abel) bounds its size by max_i |h_{i+1} - h_i| times
sum_{j=1}^{d/2} |S_j(r)|, where S_j(r) = sum_{k=0}^{j-1} e^{i r theta_k}; the paper plots the
relative bound (1 / (d/2)) sum_j |S_j(r)|, which shrinks as r grows. At r = 0 every S_j = j, its
largest possible value, so the bound is (d/2 + 1) / 2 there.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..encodings.context import HookContext
from ..encodings.registry import build_encoding
from ..encodings.rope_scaling import compute_inv_freq
from .figure import Panel, log2_axis, new_figure, save

#: the two bases drawn: RoFormer's and Llama 3's
THETAS = (1e4, 5e5)
HEAD_DIM = 128
MAX_DISTANCE = 1 << 16


def sampled_distances(max_distance: int = MAX_DISTANCE, n: int = 480) -> Tensor:
    """0 and about ``n`` log-spaced integer distances in [1, max_distance]: (N,) long."""
    logs = torch.linspace(0.0, float(torch.log2(torch.tensor(float(max_distance)))), n)
    return torch.cat((torch.zeros(1, dtype=torch.long),
                      torch.unique(torch.round(2.0 ** logs).long())))


def relative_decay_bound(distances: Tensor, head_dim: int = HEAD_DIM, theta: float = 1e4
                         ) -> Tensor:
    """RoFormer's relative upper bound (1 / (d/2)) sum_{j=1}^{d/2} |S_j(r)| per distance r.

    distances (N,) -> (N,) fp64. Frequencies from :func:`compute_inv_freq`.
    """
    inv_freq, _ = compute_inv_freq(head_dim, theta)
    angles = distances.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    partial = torch.polar(torch.ones_like(angles), angles).cumsum(dim=-1)   # (N, d/2): S_1..
    return partial.abs().mean(dim=-1)


def mean_abs_score(distances: Tensor, *, theta: float, same_vector: bool, samples: int = 256,
                   head_dim: int = HEAD_DIM, seed: int = 0) -> Tensor:
    """Mean |q_r . k_0| over ``samples`` standard normal pairs, rotated by the library's RoPE
    module: the query at position r, the key at 0. ``same_vector``: k = q (a token meeting a
    copy of itself); otherwise q and k are independent. distances (N,) -> (N,)."""
    gen = torch.Generator().manual_seed(seed)
    pe = build_encoding("rope", n_heads=1, head_dim=head_dim, theta=theta)
    q = torch.randn(samples, 1, 1, head_dim, generator=gen)
    k = q if same_vector else torch.randn(samples, 1, 1, head_dim, generator=gen)
    n = distances.numel()
    at = HookContext.for_positions(distances, torch.zeros(1, dtype=torch.long))
    q_rot, k_rot = pe.transform_qk(q.expand(samples, 1, n, head_dim).contiguous(), k, at)
    scores = (q_rot * k_rot).sum(dim=-1)[:, 0]                      # (samples, N)
    return scores.abs().mean(dim=0)


#: the caption of :func:`rope_decay_panel` (two sentences, the sources cited)
ROPE_DECAY_CAPTION = (
    "RoPE turns q.k into a sum of d/2 rotating terms, and Su et al. (2021, Section 3.4.3) "
    "bound its size by the mean |S_j| of partial sums of those rotations, which falls "
    "from its maximum at distance 0 as the distance grows; a larger base (500,000, as in "
    "Llama 3) stretches the decay to longer distances. For random vectors the decay only "
    "shows when query and key are alike (solid lines): for independent q and k (dashed) "
    "the mean |q.k| is the same at every distance, because a rotation does not change "
    "the distribution of a random vector.")


def rope_decay_panel(out_dir: Path) -> Panel:
    distances = sampled_distances()
    bound = {f"{t:g}": relative_decay_bound(distances, theta=t) for t in THETAS}
    same = {f"{t:g}": mean_abs_score(distances, theta=t, same_vector=True) for t in THETAS}
    independent = {f"{t:g}": mean_abs_score(distances, theta=t, same_vector=False)
                   for t in THETAS}
    fig, axes = new_figure(12, 4.4, 1, 2)
    left, right = axes[0]
    colors = {"10000": "tab:blue", "500000": "tab:orange"}
    shown = distances >= 1                                  # log axis: distance 0 is off-axis
    for t in bound:
        left.plot(distances[shown], bound[t][shown], color=colors[t], linewidth=1.6,
                  label=f"theta = {float(t):,.0f}")
        right.plot(distances[shown], same[t][shown], color=colors[t], linewidth=1.6,
                   label=f"k = q, theta = {float(t):,.0f}")
        right.plot(distances[shown], independent[t][shown], color=colors[t], linewidth=1.2,
                   linestyle="--", label=f"k independent of q, theta = {float(t):,.0f}")
    top = (HEAD_DIM // 2 + 1) / 2
    left.axhline(top, color="grey", linestyle=":", linewidth=1)
    left.text(MAX_DISTANCE / 1.2, top * 1.01, f"value at distance 0: (d/2 + 1)/2 = {top:g}",
              va="bottom", ha="right", fontsize=9, color="dimgrey")
    left.set_ylabel("relative upper bound  (1/(d/2)) sum_j |S_j|")
    left.set_title(f"RoFormer's bound on |q.k| (d = {HEAD_DIM})")
    right.set_ylabel("mean |q.k| over 256 random pairs")
    right.set_title("q.k of random N(0, 1) vectors, query r tokens after key")
    for ax in (left, right):
        log2_axis(ax, "x", 1, MAX_DISTANCE)
        ax.set_xlabel("relative distance r (tokens)")
        ax.grid(True, alpha=0.3)
    left.set_ylim(0, top * 1.1)
    right.set_yscale("log")
    right.set_ylim(5, 400)
    right.legend(fontsize=8, loc="upper right")
    left.legend(fontsize=9, loc="lower left")
    images = [save(fig, out_dir, "rope_decay.png")]
    caption = ROPE_DECAY_CAPTION
    data = {"head_dim": HEAD_DIM, "distances": distances, "relative_bound": bound,
            "mean_abs_qk_same_vector": same, "mean_abs_qk_independent": independent}
    return Panel("rope_decay", "RoPE: long-range decay", caption, images, data)
