"""Pictures of one solution: each device's memory over time and a Gantt chart.

Drawn from `regal.sim.trace`, the same model that scored the solution, so the
curves peak exactly at the reported per-device peaks. matplotlib runs on the
Agg backend: no display is needed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_solution", "plot_trace", "plot_method_bars"]


_FORMATS = ("png", "pdf", "svg")


def _save(fig, path) -> None:
    """Writes exactly `path` (matplotlib would add '.png' to a name without a suffix, and
    the caller would then name a file that does not exist): the format follows a known
    suffix, else PNG."""
    from pathlib import Path

    suffix = Path(path).suffix.lower().lstrip(".")
    fig.savefig(path, dpi=110, format=suffix if suffix in _FORMATS else "png")


def _figure_modules():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _unit(max_bytes: float) -> tuple[str, float]:
    for name, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if max_bytes >= scale:
            return name, float(scale)
    return "bytes", 1.0


def plot_trace(tr, devices, path, title: str | None = None) -> None:
    """Writes a PNG: memory curves (top) and ops per device plus transfers per link (bottom)."""
    plt = _figure_modules()
    d = devices.count
    links = sorted({(int(s), int(t)) for s, t in zip(tr.transfer_src, tr.transfer_dst)})
    rows = [f"dev {k}" for k in range(d)] + [f"{s}->{t}" for s, t in links]
    fig, (ax_mem, ax_gantt) = plt.subplots(
        2, 1, figsize=(11, 4 + 0.3 * len(rows)), sharex=True,
        gridspec_kw={"height_ratios": [3, max(2, 0.35 * len(rows))]})
    colors = plt.get_cmap("tab10")
    end = max(float(tr.result.makespan), 1e-9)

    limits = devices.limits
    unit, scale = _unit(float(np.max(tr.result.peak)))
    for k, (times, live) in enumerate(tr.memory):
        t = np.concatenate([[0.0], times, [end]])
        v = np.concatenate([[live[0] if len(live) else 0], live, [live[-1] if len(live) else 0]])
        ax_mem.step(t, v / scale, where="post", color=colors(k % 10),
                    label=f"device {k} (peak {tr.result.peak[k] / scale:.4g} {unit})")
        if limits is not None:
            ax_mem.axhline(limits[k] / scale, color=colors(k % 10), ls="--", lw=0.8)
    ax_mem.set_ylabel(f"live memory ({unit})")
    ax_mem.legend(loc="upper right", fontsize=8)
    ax_mem.set_title(title or f"makespan {tr.result.makespan:,.1f} us")

    for k in range(d):
        ops = np.flatnonzero(tr.op_device == k)
        spans = list(zip(tr.op_start[ops], tr.op_end[ops] - tr.op_start[ops]))
        ax_gantt.broken_barh(spans, (k - 0.4, 0.8), facecolors=colors(k % 10),
                             edgecolor="black", linewidth=0.2)
    for row, (s, t) in enumerate(links, start=d):
        sel = (tr.transfer_src == s) & (tr.transfer_dst == t)
        spans = list(zip(tr.transfer_start[sel], tr.transfer_end[sel] - tr.transfer_start[sel]))
        ax_gantt.broken_barh(spans, (row - 0.3, 0.6), facecolors="0.6",
                             edgecolor="black", linewidth=0.2)
    ax_gantt.set_yticks(range(len(rows)), rows)
    ax_gantt.set_ylim(len(rows) - 0.5, -0.5)
    ax_gantt.set_xlabel("time (us)")
    ax_gantt.set_xlim(0, end)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_solution(problem, solution, path, title: str | None = None) -> None:
    """Traces `solution` on `problem` with the simulator and writes the PNG to `path`."""
    from regal.sim import trace

    tr = trace(problem.graph, problem.devices, solution.placement, solution.priority,
               solution.transfer_priority)
    plot_trace(tr, problem.devices, path, title=title)


def plot_method_bars(rows, path, title: str | None = None,
                     baseline_label: str = "BRKGA-5K") -> None:
    """Writes a PNG of Table 1 rows (`regal.report.summarize`): one group of bars per method
    and budget, one bar per dataset; % improvement over the baseline (top), % gap from best
    (bottom). A missing value draws no bar."""
    plt = _figure_modules()
    labels = sorted({(r["method"], r["budget"], r.get("options", "{}")) for r in rows})
    datasets = sorted({r["dataset"] for r in rows})
    cell = {(r["dataset"], r["method"], r["budget"], r.get("options", "{}")): r for r in rows}
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(datasets))
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 1.1 * len(labels) + 2), 6.5), sharex=True)
    for ax, field, name in ((axes[0], "improvement_pct", f"% improvement over {baseline_label}"),
                            (axes[1], "gap_pct", "% gap from best")):
        for i, dataset in enumerate(datasets):
            values = [cell.get((dataset,) + label, {}).get(field) for label in labels]
            heights = [np.nan if v is None else v for v in values]
            ax.bar(x + (i - (len(datasets) - 1) / 2) * width, heights, width, label=dataset)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_ylabel(name)
        ax.grid(axis="y", linewidth=0.3)
    axes[0].legend(fontsize=8)
    axes[0].set_title(title or "methods compared")
    axes[1].set_xticks(x, [f"{m}{'*' if o != '{}' else ''}\n{b:,}" for m, b, o in labels],
                       fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
