"""Render a context-extension study: report.md, ppl.png, passkey_<method>.png.

``results`` is the results dict of :class:`posenc.hf.extend_study.ExtendStudy` (decoded: floats,
not the strings results.json keeps for non-finite values). Plots are matplotlib Figures on the
Agg canvas (:func:`posenc.viz.axes.new_figure`; no backend is selected).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ..methods import sources_lines
from ..study import MIN_SAMPLES, TOO_FEW, RunDirectory, markdown_table
from ..viz.axes import new_figure, save_png
from .load import model_title


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "inf" if x is not None else "n/a"
    return f"{x:.{digits}f}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def report_markdown(results: dict[str, Any]) -> str:
    """The report: setup, perplexity table, passkey table, memory, fine-tune losses."""
    cfg, methods = results["config"], results["methods"]
    native = results.get("native_context")
    lengths = cfg["lengths"]
    lines = [f"# Context extension of {model_title(results.get('model', 'a model'))}", ""]
    data = results.get("data", {})
    base = cfg["original"] or native
    setup = (f"- native context of the model: {native}; extended by factor {cfg['factor']} "
             + (f"from the original length you set, {base}" if cfg["original"]
                else "from the native context"))
    text = (f"- data: {data.get('name', '?')} ({data.get('split', '?')} split), "
            f"{results['n_tokens']} tokens; windows per length <= {cfg['max_windows']}, "
            f"stride {cfg['stride'] or 'length/2'}")
    lines += [setup, text, ""]
    cited = sources_lines([m for m in methods if not m.endswith("+ft")])
    if cited:
        lines += ["Sources of the methods:", "", *cited, ""]
    run_time = _llama_cpp_lines(methods)
    if run_time:
        lines += run_time + [""]
    notes = results.get("notes") or []
    if notes:
        lines += [f"> **Note:** {note}" for note in notes] + [""]
    head = ["method"] + [f"{n}" + (f" ({n / base:g}x)" if base else "") for n in lengths]
    rows = [[name] + [_ppl_cell(p) for p in row["ppl"]] for name, row in methods.items()]
    lines += ["## Perplexity against window length", "", _spread_note(methods), ""]
    lines += markdown_table(head, rows) + [""]
    if cfg["passkey"]:
        pl = cfg["passkey_lengths"]
        rows = [[name] + [_fmt(row["passkey"]["accuracy_by_length"][str(n)])
                          for n in pl] + [_fmt(_mean(row["passkey"]["accuracy"]))]
                for name, row in methods.items()]
        depths = ", ".join(f"{d:g}" for d in cfg["passkey_depths"])
        note = (f"Mean over depths {depths}, {cfg['passkey_trials']} keys per "
                "cell; heat maps in passkey_<method>.png.")
        if cfg["passkey_trials"] < MIN_SAMPLES:
            note += (f" **{TOO_FEW}**: fewer than {MIN_SAMPLES} keys per cell, so each cell "
                     "is a coarse rate (one key: 0 % or 100 %).")
        lines += ["## Passkey retrieval accuracy", "", note, ""]
        lines += markdown_table(["method"] + [str(n) for n in pl] + ["mean"], rows) + [""]
    note = "Peak resident memory of the process while measuring each method (GiB):"
    lines += ["## Memory", "", note, ""]
    lines += markdown_table(["method", "peak RSS", "RSS before"],
                            [[name, _fmt(row["peak_rss_bytes"] / 2**30),
                              _fmt(row["rss_before_bytes"] / 2**30)]
                             for name, row in methods.items()])
    tuned = {n: r["finetune"] for n, r in methods.items() if r.get("finetune")}
    if tuned:
        lines += ["", "## Fine-tuning", ""]
        lines += markdown_table(["method", "steps", "length", "first loss", "last loss"],
                                [[n, str(f["steps"]), str(f["length"]),
                                  _fmt(f["losses"][0], 3), _fmt(f["losses"][-1], 3)]
                                 for n, f in tuned.items()])
    return "\n".join(lines) + "\n"


def _llama_cpp_lines(methods: dict[str, Any]) -> list[str]:
    """One line per method llama.cpp runs from its command line on the plain model (its
    flags for the resolved options; nothing where llama.cpp cannot take them)."""
    from ..errors import UserError
    from ..methods import method_class
    out = []
    for name, row in methods.items():
        attention = (row.get("extension") or {}).get("attention") or {}
        cls = method_class(attention["name"]) if attention.get("name") else None
        if cls is None or not cls.llama_cpp_run_time:
            continue
        try:
            flags = cls(**{k: v for k, v in attention.items() if k != "name"}) \
                .llama_cpp_flags()
        except UserError as e:
            out.append(f"- llama.cpp cannot run {name} as set: {e}")
            continue
        out.append(f"- llama.cpp runs {name} on the plain model with `{' '.join(flags)}`: "
                   "block by block on its KV cache, not this map (README, llama.cpp)")
    return out


def _ppl_cell(point: dict[str, Any]) -> str:
    """``12.34 ± 0.56`` (the bootstrap spread over windows), or the perplexity alone (no
    spread, or one window, whose spread would be zero)."""
    std = point.get("ppl_std")
    if std is None or not math.isfinite(point["ppl"]) or point.get("n_windows", 2) < 2:
        return _fmt(point["ppl"])
    return f"{_fmt(point['ppl'])} ± {_fmt(std)}"


def _spread_note(methods: dict[str, Any]) -> str:
    counts = sorted({(p["length"], p["n_windows"]) for row in methods.values()
                     for p in row["ppl"]})
    per_length = ", ".join(f"{n}: {w}" for n, w in counts) or "none yet"
    few = sorted({n for n, w in counts if w < MIN_SAMPLES})
    caveat = (f" **{TOO_FEW}** at {', '.join(map(str, few))}: fewer than {MIN_SAMPLES} "
              "windows, so no difference there is decided by these numbers." if few else "")
    return ("Perplexity ± its standard deviation over bootstrap resamples of the windows "
            "(a single window has no spread); windows per length: " + per_length + "." + caveat)


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
    original = (results.get("config") or {}).get("original")
    base = original or results.get("native_context")
    if base:
        ax.axvline(base, color="grey", linestyle=":", linewidth=1,
                   label="original length" if original else "native context")
    if values and max(values) > 10 * min(values):
        ax.set_yscale("log")
    ax.set_xlabel("window length (tokens)")
    ax.set_ylabel("perplexity")
    ax.set_title(f"Perplexity against length: {results.get('model', '')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, path, dpi=120)


def plot_passkey(name: str, grid: dict[str, Any], path: Path, per_cell: int | None = None
                 ) -> Path:
    """Heat map of accuracy: depth (rows) against context length (columns); ``per_cell``:
    the keys each cell's rate is taken over (said in the title)."""
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
    keys = "" if per_cell is None else f" ({per_cell} key{'' if per_cell == 1 else 's'} per cell)"
    ax.set_title(f"passkey retrieval: {name}{keys}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    return save_png(fig, path, dpi=120)


def passkey_figure(method: str) -> str:
    """The file name of a method's passkey heat map."""
    return f"passkey_{_safe(method)}.png"


def write_figures(results: dict[str, Any], directory: RunDirectory) -> list[Path]:
    """ppl.png and one passkey_<method>.png per row with a passkey grid; returns the paths."""
    paths = [plot_ppl(results, directory.path / "ppl.png")]
    for name, row in results["methods"].items():
        if row.get("passkey") is not None:
            paths.append(plot_passkey(name, row["passkey"],
                                      directory.path / passkey_figure(name),
                                      results["config"].get("passkey_trials")))
    return paths


def check_extension_numbers(results: dict[str, Any], path: Path) -> None:
    """UserError naming ``path`` and the field if a perplexity point of a (hand-edited or
    damaged) results.json is not a length and a number."""
    from ..study.fields import field_error, is_length, is_number
    config, methods = results.get("config"), results.get("methods")
    if not isinstance(methods, dict):
        raise field_error(path, "methods", "must map methods to their results", methods)
    for name, row in methods.items():
        for k, point in enumerate((row or {}).get("ppl") or []):
            field = f"methods[{name!r}].ppl[{k}]"
            if not isinstance(point, dict):
                raise field_error(path, field, "must be an object with length and ppl", point)
            if not is_length(point.get("length")):
                raise field_error(path, f"{field}.length", "is not a positive integer",
                                  point.get("length"))
            if not is_number(point.get("ppl")):
                raise field_error(path, f"{field}.ppl", "is not a number", point.get("ppl"))
    if not isinstance(config, dict):
        raise field_error(path, "config", "must be an object (the study's settings)", config)
    lengths = config.get("lengths")
    if not isinstance(lengths, list) or not all(is_length(n) for n in lengths):
        raise field_error(path, "config.lengths", "must be a list of positive integers",
                          lengths)

