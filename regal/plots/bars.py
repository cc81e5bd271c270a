"""The chart of a report: each method's figures as bars, one panel per figure, runs that do
not fit a memory limit hatched."""

from __future__ import annotations

import numpy as np

from regal.plots.figure import _figure_modules, _save

__all__ = ["plot_method_bars"]


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and "/" in value:
        return value.rstrip("/").rsplit("/", 1)[-1]   # a path: its last part
    return str(value)


def _bar_labels(labels) -> list[str]:
    """Tick text per (method, budget, options): the method, its budget, and the options that
    tell its rows apart (those every row of the method shares are left out; a policy's hash
    only where nothing else differs; paths by their last part)."""
    import json

    parsed = [json.loads(o or "{}") for _, _, o in labels]
    out = []
    for (method, budget, _), options in zip(labels, parsed):
        siblings = [o for (m, _, _), o in zip(labels, parsed) if m == method]
        keys = sorted({k for o in siblings for k in o})
        varying = [k for k in keys if len({json.dumps(o.get(k)) for o in siblings}) > 1]
        shown = varying if len(siblings) > 1 else keys
        if len(shown) > 1 and "policy_hash" in shown:
            shown = [k for k in shown if k != "policy_hash"]
        text = ", ".join(f"{k}={_option_text(options[k])}" for k in shown if k in options)
        out.append(f"{method}\n{budget:,}" + (f"\n{text}" if text else ""))
    return out


def plot_method_bars(rows, path, title: str | None = None,
                     baseline_label: str = "BRKGA-5K") -> list[str]:
    """Writes a PNG of Table 1 rows (`regal.report.summarize`): one group of bars per method,
    budget and options, one bar per dataset; % improvement over the baseline (top), % gap from
    best (bottom). A panel without a value is left out (no baseline run: no top panel); a
    missing value draws no bar; a bar that rests on runs over the memory limit (the row's
    `from_unfit_runs`) is hatched and its value marked †; with few bars each carries its
    value. Returns the fields drawn, top to bottom."""
    from matplotlib.patches import Patch

    plt = _figure_modules()
    labels = sorted({(r["method"], r["budget"], r.get("options", "{}")) for r in rows})
    datasets = sorted({r["dataset"] for r in rows})
    cell = {(r["dataset"], r["method"], r["budget"], r.get("options", "{}")): r for r in rows}
    ticks = _bar_labels(labels)
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(datasets))
    crowded = len(labels) > 8
    panels = [(field, name, fmt) for field, name, fmt in (
        ("improvement_pct", f"% improvement over {baseline_label}", "{:+.1f}"),
        ("gap_pct", "% gap from best", "{:.1f}"))
        if any(r.get(field) is not None for r in rows)] or [("gap_pct", "% gap from best", "")]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharex=True, figsize=(
        min(24.0, max(6.0, 1.1 * len(labels) + 2)) + 1.6,   # + the legend beside
        (1.8 if crowded else 1.0) + (3.1 if crowded else 2.75) * len(panels)))
    axes = list(axes[:, 0])
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    hatched = False
    for ax, (field, name, fmt) in zip(axes, panels):
        for i, dataset in enumerate(datasets):
            shown = [cell.get((dataset,) + label, {}) for label in labels]
            values = [r.get(field) for r in shown]
            unfit = [field in r.get("from_unfit_runs", ()) for r in shown]
            bars = ax.bar(x + (i - (len(datasets) - 1) / 2) * width,
                          [np.nan if v is None else v for v in values], width,
                          color=colours[i % len(colours)], label=dataset,
                          hatch=["///" if u else "" for u in unfit], edgecolor="black",
                          linewidth=[0.6 if u else 0.0 for u in unfit])
            hatched = hatched or any(u and v is not None for u, v in zip(unfit, values))
            if len(labels) * len(datasets) <= 24:
                ax.bar_label(bars, labels=["" if v is None else fmt.format(v) + "†" * u
                                           for v, u in zip(values, unfit)],
                             fontsize=7, padding=2)
        if not fmt:
            ax.text(0.5, 0.5, "no values: no run ended", transform=ax.transAxes,
                    ha="center", va="center")
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_ylabel(name)
        ax.grid(axis="y", linewidth=0.3)
        ax.margins(y=0.12)
    handles = [Patch(facecolor=colours[i % len(colours)], label=dataset)  # never hatched
               for i, dataset in enumerate(datasets)]
    if hatched:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///",
                             label="† rests on runs over\nthe memory limit"))
    # beside the top panel, never over a bar; tight_layout makes room for it
    axes[0].legend(handles=handles, fontsize=8, title="dataset", title_fontsize=8,
                   loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    axes[0].set_title(title or "methods compared")
    axes[-1].set_xticks(x, ticks, fontsize=7 if crowded else 8,
                        rotation=35 if crowded else 0, ha="right" if crowded else "center",
                        rotation_mode="anchor" if crowded else "default")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return [field for field, _, fmt in panels if fmt]
