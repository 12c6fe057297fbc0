"""Write a context-extension study: results.json, report.md, ppl.png, passkey_<method>.png.

``results`` is the dict of :func:`posenc.hf.study.run_study` plus ``model`` / ``data`` /
``native_context`` entries added by the caller. Plots are matplotlib Figures on the Agg canvas
(:func:`posenc.viz.axes.new_figure`; no backend is selected).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ..runio import atomic_write, has_content
from ..viz.axes import new_figure, save_png


def prepare_out_dir(path: str | Path, force: bool = False, create: bool = True) -> Path:
    """Check (and with ``create`` make) ``path``; refuse (FileExistsError) a non-empty
    directory unless ``force`` (files of the same name are then overwritten)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output path {out} exists and is not a directory")
    if out.is_dir() and has_content(out) and not force:
        raise FileExistsError(f"output directory {out} is not empty; choose another --out or "
                              "pass --force to overwrite")
    if create:
        out.mkdir(parents=True, exist_ok=True)
    return out


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "inf" if x is not None else "n/a"
    return f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(r) + " |" for r in rows]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def report_markdown(results: dict[str, Any]) -> str:
    """The report: setup, perplexity table, passkey table, memory, fine-tune losses."""
    cfg, methods = results["config"], results["methods"]
    native = results.get("native_context")
    lengths = cfg["lengths"]
    lines = [f"# Context extension of {results.get('model', 'a model')}", ""]
    data = results.get("data", {})
    setup = (f"- native context: {native}; factor {cfg['factor']} "
             f"(original length {cfg['original'] or native})")
    text = (f"- data: {data.get('name', '?')} ({data.get('split', '?')} split), "
            f"{results['n_tokens']} tokens; windows per length <= {cfg['max_windows']}, "
            f"stride {cfg['stride'] or 'length/2'}")
    lines += [setup, text, ""]
    head = ["method"] + [f"{n}" + (f" ({n / native:g}x)" if native else "") for n in lengths]
    rows = [[name] + [_fmt(p["ppl"]) for p in row["ppl"]] for name, row in methods.items()]
    lines += ["## Perplexity against window length", ""] + _table(head, rows) + [""]
    if cfg["passkey"]:
        pl = cfg["passkey_lengths"]
        rows = [[name] + [_fmt(row["passkey"]["accuracy_by_length"][str(n)])
                          for n in pl] + [_fmt(_mean(row["passkey"]["accuracy"]))]
                for name, row in methods.items()]
        note = (f"Mean over depths {cfg['passkey_depths']}, {cfg['passkey_trials']} keys per "
                "cell; heat maps in passkey_<method>.png.")
        lines += ["## Passkey retrieval accuracy", "", note, ""]
        lines += _table(["method"] + [str(n) for n in pl] + ["mean"], rows) + [""]
    note = "Peak resident memory of the process while measuring each method (GiB):"
    lines += ["## Memory", "", note, ""]
    lines += _table(["method", "peak RSS", "RSS before"],
                    [[name, _fmt(row["peak_rss_bytes"] / 2**30),
                      _fmt(row["rss_before_bytes"] / 2**30)] for name, row in methods.items()])
    tuned = {n: r["finetune"] for n, r in methods.items() if r.get("finetune")}
    if tuned:
        lines += ["", "## Fine-tuning", ""]
        lines += _table(["method", "steps", "length", "first loss", "last loss"],
                        [[n, str(f["steps"]), str(f["length"]), _fmt(f["losses"][0], 3),
                          _fmt(f["losses"][-1], 3)] for n, f in tuned.items()])
    return "\n".join(lines) + "\n"


def _mean(acc: list[list[float]]) -> float:
    cells = [a for row in acc for a in row]
    return sum(cells) / len(cells)


def plot_ppl(results: dict[str, Any], path: Path) -> Path:
    """Perplexity against window length, one line per method (fine-tuned: dashed)."""
    fig = new_figure(figsize=(6.5, 4))
    ax = fig.subplots()
    colors: dict[str, Any] = {}
    values = []
    for name, row in results["methods"].items():
        pts = [(p["length"], p["ppl"]) for p in row["ppl"] if math.isfinite(p["ppl"])]
        base = name.removesuffix("+ft")
        if base not in colors:
            colors[base] = f"C{len(colors) % 10}"
        if pts:
            ax.plot(*zip(*pts), marker="o", label=name, color=colors[base],
                    linestyle="--" if name.endswith("+ft") else "-")
            values += [v for _, v in pts]
    native = results.get("native_context")
    if native:
        ax.axvline(native, color="grey", linestyle=":", linewidth=1, label="native context")
    if values and max(values) > 10 * min(values):
        ax.set_yscale("log")
    ax.set_xlabel("window length (tokens)")
    ax.set_ylabel("perplexity")
    ax.set_title(f"Perplexity against length: {results.get('model', '')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, path, dpi=120)


def plot_passkey(name: str, grid: dict[str, Any], path: Path) -> Path:
    """Heat map of accuracy: depth (rows) against context length (columns)."""
    fig = new_figure(figsize=(1.2 + 0.9 * len(grid["lengths"]),
                          1.2 + 0.5 * len(grid["depths"])))
    ax = fig.subplots()
    im = ax.imshow(grid["accuracy"], vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(grid["lengths"])), [str(n) for n in grid["lengths"]])
    ax.set_yticks(range(len(grid["depths"])), [f"{d:.0%}" for d in grid["depths"]])
    for i, row in enumerate(grid["accuracy"]):
        for j, a in enumerate(row):
            ax.text(j, i, f"{a:.0%}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("key depth")
    ax.set_title(f"passkey retrieval: {name}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    return save_png(fig, path, dpi=120)


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """Write every file into ``out`` (which :func:`prepare_out_dir` made); return the paths."""
    for row in results["methods"].values():
        grid = row.get("passkey")
        if grid is not None:
            grid["accuracy_by_length"] = {
                str(n): sum(r[j] for r in grid["accuracy"]) / len(grid["depths"])
                for j, n in enumerate(grid["lengths"])}
    paths = [out / "results.json", out / "report.md"]
    atomic_write(paths[0], (json.dumps(json_clean(results), indent=2, allow_nan=False)
                            + "\n").encode())
    atomic_write(paths[1], report_markdown(results).encode())
    paths.append(plot_ppl(results, out / "ppl.png"))
    for name, row in results["methods"].items():
        if row.get("passkey") is not None:
            paths.append(plot_passkey(name, row["passkey"], out / f"passkey_{_safe(name)}.png"))
    return paths


def json_clean(obj: Any) -> Any:
    """JSON-safe copy: tuples to lists, non-finite floats to strings ("inf", "nan")."""
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)
