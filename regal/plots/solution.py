"""The picture of one solution: each device's memory over time and a Gantt chart of ops and
transfers, drawn from `regal.sim.trace`, so the curves peak exactly at the reported
per-device peaks (each marked with its instant and value)."""

from __future__ import annotations

import numpy as np

from regal.plots.figure import (MAX_GROUPS, MAX_LINK_LANES, SMALL_GRAPH_OPS, _figure_modules,
                                _save, _unit)
from regal.plots.groups import group_ops, op_levels

__all__ = ["plot_solution", "plot_trace", "peak_instants"]


# ---------------------------------------------------------------------------
# the figure


def peak_instants(tr) -> list[tuple[float, int]]:
    """Per device, (the first instant its live bytes reach their peak in µs, the peak in
    bytes): the points the memory plot marks. The peak is `max` of the traced curve, which
    the trace guarantees equals the simulator's `peak[k]`."""
    marks = []
    for times, live in tr.memory:
        if len(live) == 0:
            marks.append((0.0, 0))
            continue
        at = int(np.argmax(live))
        marks.append((float(times[at]), int(live[at])))
    return marks


def _palette(count: int) -> list:
    """Distinct colours, neighbours of different hue: tab10, then tab20's light shades, then
    tab20b; repeats past 40 (groups are at most MAX_GROUPS)."""
    plt = _figure_modules()
    colours = [plt.get_cmap("tab10")(i) for i in range(10)]
    colours += [plt.get_cmap("tab20")(2 * i + 1) for i in range(10)]
    colours += [plt.get_cmap("tab20b")(i) for i in (0, 4, 8, 12, 16, 2, 6, 10, 14, 18,
                                                     1, 5, 9, 13, 17, 3, 7, 11, 15, 19)]
    return [colours[i % len(colours)] for i in range(count)]


def _ink(colour) -> str:
    """Black or white text, whichever reads on `colour`."""
    r, g, b = colour[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _label_bars(ax, spans, texts, fallbacks, colours, row, px_per_unit, fontsize=7) -> None:
    """Writes each text centred in its bar when it fits (else its fallback, else nothing)."""
    char_px = fontsize * 0.62 * 110 / 72
    for (start, width), text, fallback, colour in zip(spans, texts, fallbacks, colours):
        room = width * px_per_unit - 4
        for candidate in (text, fallback):
            if candidate and len(candidate) * char_px <= room:
                ax.text(start + width / 2, row, candidate, ha="center", va="center",
                        fontsize=fontsize, color=_ink(colour), clip_on=True)
                break


def _runs(starts, ends, groups, min_width: float):
    """Bars of one group that follow each other on one lane (gaps under `min_width`) merged:
    [(start, end, group)]; bars shorter than `min_width` (invisible slivers) neither start
    nor break a run."""
    order = np.lexsort((ends, starts))
    runs = []
    for i in order:
        if ends[i] - starts[i] < min_width:
            continue
        if runs and runs[-1][2] == groups[i] and starts[i] - runs[-1][1] < min_width:
            runs[-1][1] = max(runs[-1][1], ends[i])
        else:
            runs.append([starts[i], ends[i], groups[i]])
    return runs


def _group_cap(num_ops: int) -> int:
    """How many groups a chart of `num_ops` ops gets: about sqrt(n) (a 100-op graph in 10
    groups of 10, not 36 of 3), at least 8, at most MAX_GROUPS."""
    return int(min(MAX_GROUPS, max(8, round(num_ops ** 0.5))))


def _legend_columns(fig, labels, fontsize: float, width_in: float, most: int) -> int:
    """How many columns (at most `most`) a legend of `labels` may have and still fit in
    `width_in` inches: long labels (a limit per device) go on more rows, never past the
    figure's edge. Counts the handle (1.5 em), matplotlib's default pads and spacing."""
    renderer = fig.canvas.get_renderer()
    probe = fig.text(0, 0, "", fontsize=fontsize)
    widest = 0.0
    for label in labels:
        probe.set_text(label)
        widest = max(widest, probe.get_window_extent(renderer).width)
    probe.remove()
    em = fontsize * fig.dpi / 72
    for columns in range(min(most, len(labels)), 1, -1):
        needed = columns * (widest + (1.5 + 0.8) * em) + (columns - 1) * 2.0 * em + 1.2 * em
        if needed <= width_in * fig.dpi:
            rows = -(-len(labels) // columns)
            return -(-len(labels) // rows)  # as few columns as those rows need: 2 x 2, not 3 + 1
    return 1


def _label_peaks(ax, peaks, colours, t_scale: float, scale: float) -> list:
    """Writes each device's peak above its marker, inside the axes and never on another:
    labels whose widths overlap stack above the highest of their markers (the lowest peak at
    the bottom), and the y range grows to hold the stack. Returns the labels."""
    from regal.units import format_bytes

    renderer = ax.figure.canvas.get_renderer()
    px = ax.figure.dpi / 72  # pixels per point
    labels = [ax.annotate(format_bytes(peak), (at / t_scale, peak / scale), xytext=(0, 7),
                          textcoords="offset points", ha="center", va="bottom", fontsize=7,
                          color=colour, fontweight="bold")
              for (at, peak), colour in zip(peaks, colours)]
    box = ax.get_window_extent(renderer)
    sizes = [label.get_window_extent(renderer) for label in labels]
    spans = []  # (left, right, marker) in pixels; left and right within the axes' width
    for (at, _), size in zip(peaks, sizes):
        x = ax.transData.transform((at / t_scale, 0.0))[0]
        left = min(max(x - size.width / 2, box.x0), box.x1 - size.width)
        spans.append((left, left + size.width, x))
    stacks, reach = [], -np.inf  # labels chained by overlapping widths
    for k in sorted(range(len(labels)), key=lambda j: spans[j][0]):
        if stacks and spans[k][0] < reach + px:
            stacks[-1].append(k)
            reach = max(reach, spans[k][1])
        else:
            stacks.append([k])
            reach = spans[k][1]
    row = max(s.height for s in sizes) / px + 1.0  # points
    height = box.height / px
    y_max = ax.get_ylim()[1]
    for stack in stacks:
        top = max(peaks[k][1] for k in stack)
        for level, k in enumerate(sorted(stack, key=lambda j: (peaks[j][1], j))):
            left, right, x = spans[k]
            labels[k].xy = (peaks[k][0] / t_scale, top / scale)
            labels[k].xyann = (((left + right) / 2 - x) / px, 7 + level * row)
        room = height - (7 + len(stack) * row + 2)  # points below the stack's bottom
        if room > 0:
            y_max = max(y_max, top / scale * height / room)
    ax.set_ylim(0, y_max)
    return labels


def plot_trace(tr, graph, devices, path, title: str | None = None) -> dict:
    """Writes the figure: memory curves with each device's peak marked (top), ops per device
    and transfers per link (bottom; by group, with a legend, above SMALL_GRAPH_OPS ops).
    Returns what it drew: {'peaks': peak_instants(tr), 'groups': OpGroups or None}."""
    from regal.units import duration_unit, format_bytes, format_duration_us

    plt = _figure_modules()
    d, n = devices.count, graph.num_nodes
    per_op = n <= SMALL_GRAPH_OPS
    groups = None if per_op else group_ops(graph.names, op_levels(graph), graph.compute_cost,
                                           cap=_group_cap(n))
    links = sorted({(int(s), int(t)) for s, t in zip(tr.transfer_src, tr.transfer_dst)})
    if len(links) > MAX_LINK_LANES:  # many devices: one lane of incoming copies per device
        links = sorted({(-1, t) for _, t in links})
    end = max(float(tr.result.makespan), 1e-9)
    t_name, t_scale = duration_unit(end)
    t_label = "µs" if t_name == "us" else t_name

    # layout in inches, top to bottom; axes placed exactly so nothing overlaps
    lane_y = list(range(d)) + [d - 0.1 + 0.5 * (j + 1) for j in range(len(links))]
    gantt_units = (lane_y[-1] + 0.4) - (-0.5)
    legend_rows = 0 if per_op else -(-groups.count // 3)
    limits = devices.limits
    peaks = peak_instants(tr)
    mem_labels = [f"device {k}: peak {format_bytes(peak)}"
                  + ("" if limits is None else f" / limit {format_bytes(limits[k])}")
                  + f" at {format_duration_us(at)}" for k, (at, peak) in enumerate(peaks)]
    left, width = 0.075, 0.915
    fig = plt.figure(figsize=(14, 10))  # the height follows from the blocks below
    mem_columns = _legend_columns(fig, mem_labels, 8, 14 * (1 - left) - 0.1, most=4)
    blocks = [("title", 0.5), ("mem legend", 0.24 * -(-d // mem_columns)), ("mem", 3.0),
              ("gantt title", 0.3), ("gantt", 0.42 * gantt_units + 0.1), ("xlabel", 0.5),
              ("groups", 0.3 + 0.165 * legend_rows if legend_rows else 0.0), ("margin", 0.1)]
    height = sum(h for _, h in blocks)
    fig.set_size_inches(14, height)
    top, place = height, {}
    for name, h in blocks:
        place[name] = (top - h) / height, h / height
        top -= h
    ax_mem = fig.add_axes([left, place["mem"][0], width, place["mem"][1]])
    ax_gantt = fig.add_axes([left, place["gantt"][0], width, place["gantt"][1]], sharex=ax_mem)
    device_colour = plt.get_cmap("tab10")

    # memory: one step curve per device, its peak marked (instant and value), its limit dashed
    peak_all = max((p for _, p in peaks), default=0)
    unit, scale = _unit(float(peak_all))
    shown_limits = [] if limits is None else [x for x in limits if x <= 2 * max(peak_all, 1)]
    y_top = max([peak_all, 1] + shown_limits)
    for k, (times, live) in enumerate(tr.memory):
        colour = device_colour(k % 10)
        t = np.concatenate([[0.0], times, [end]]) / t_scale
        v = np.concatenate([[live[0] if len(live) else 0], live, [live[-1] if len(live) else 0]])
        at, peak = peaks[k]
        ax_mem.step(t, v / scale, where="post", color=colour, lw=1.0, label=mem_labels[k])
        ax_mem.plot([at / t_scale], [peak / scale], marker="v", color=colour, ms=8,
                    markeredgecolor="black", markeredgewidth=0.6, zorder=5, clip_on=False)
        for ax in (ax_mem, ax_gantt):
            ax.axvline(at / t_scale, color=colour, ls=":", lw=0.9, alpha=0.9)
        if limits is not None and limits[k] <= 2 * max(peak_all, 1):
            ax_mem.axhline(limits[k] / scale, color=colour, ls="--", lw=0.8)
    ax_mem.set_ylim(0, y_top / scale * 1.15)
    ax_mem.set_ylabel(f"live memory ({unit})")
    ax_mem.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=mem_columns, fontsize=8,
                  frameon=False, borderaxespad=0.2, handlelength=1.5)
    ax_mem.grid(axis="y", lw=0.3)
    ax_mem.tick_params(labelbottom=False)
    subtitle = (f"peak {format_bytes(peak_all)} · step time {format_duration_us(end)} · "
                f"{n:,} ops on {d} device{'s' if d != 1 else ''} · ▼ each device's peak")
    fig.text(0.5, 1 - 0.12 / height, f"{title}\n{subtitle}" if title else subtitle,
             ha="center", va="top", fontsize=10)

    # Gantt: one lane per device, then a thinner one per link
    px_per_unit = width * 14 * 110 / (end / t_scale)   # figure inches x dpi over the x range
    start, finish = tr.op_start / t_scale, tr.op_end / t_scale
    if per_op:
        for k in range(d):
            ops = np.flatnonzero(tr.op_device == k)
            spans = list(zip(start[ops], finish[ops] - start[ops]))
            colour = device_colour(k % 10)
            ax_gantt.broken_barh(spans, (k - 0.4, 0.8), facecolors=colour, edgecolor="black",
                                 linewidth=0.4)
            names = [str(graph.names[i]).split("/")[-1] for i in ops]
            _label_bars(ax_gantt, spans, names, [None] * len(ops), [colour] * len(ops), k,
                        px_per_unit)
    else:
        colours = _palette(groups.count)
        for k in range(d):
            ops = np.flatnonzero(tr.op_device == k)
            g_of = groups.of_op[ops]
            for g in np.unique(g_of):
                sel = ops[g_of == g]
                ax_gantt.broken_barh(list(zip(start[sel], finish[sel] - start[sel])),
                                     (k - 0.4, 0.8), facecolors=colours[g], linewidth=0)
            runs = _runs(start[ops], finish[ops], g_of, 2.0 / px_per_unit)
            _label_bars(ax_gantt, [(a, b - a) for a, b, _ in runs],
                        [groups.short[g] for _, _, g in runs], [str(g) for _, _, g in runs],
                        [colours[g] for _, _, g in runs], k, px_per_unit)
    for j, (s, t) in enumerate(links):
        sel = (tr.transfer_dst == t) & ((tr.transfer_src == s) | (s < 0))
        spans = list(zip(tr.transfer_start[sel] / t_scale,
                         (tr.transfer_end[sel] - tr.transfer_start[sel]) / t_scale))
        ax_gantt.broken_barh(spans, (lane_y[d + j] - 0.18, 0.36), facecolors="0.55",
                             edgecolor="black" if per_op else "none", linewidth=0.3)
    busy = np.bincount(tr.op_device, weights=tr.op_end - tr.op_start, minlength=d)[:d]
    ax_gantt.set_yticks(lane_y, [f"device {k}\nbusy {100 * busy[k] / end:.0f}%"
                                 for k in range(d)] +
                        [f"copies {s}→{t}" if s >= 0 else f"copies into {t}" for s, t in links])
    for tick in ax_gantt.get_yticklabels()[d:]:
        tick.set_fontsize(7)
    ax_gantt.set_ylim(lane_y[-1] + 0.4, -0.5)
    ax_gantt.set_xlabel(f"time ({t_label})")
    ax_gantt.set_xlim(0, end / t_scale)
    if d <= 4:  # more values would pile up; the legend holds every one
        _label_peaks(ax_mem, peaks, [device_colour(k % 10) for k in range(d)], t_scale, scale)
    ax_gantt.grid(axis="x", lw=0.3)
    copies = "copies per link" if not links or links[0][0] >= 0 else "copies into each device"
    ax_gantt.set_title(f"ops per device, one bar per op (labelled where it fits); {copies}"
                       if per_op else
                       f"ops per device, coloured by name scope ({groups.count} groups, listed "
                       f"below; a wide run shows its group's name or number); {copies}",
                       fontsize=9, loc="left")

    if legend_rows:
        from matplotlib.patches import Patch

        ax_legend = fig.add_axes([left, place["groups"][0], width, place["groups"][1]])
        ax_legend.axis("off")
        cost = np.bincount(groups.of_op, weights=graph.compute_cost, minlength=groups.count)
        total = max(float(cost.sum()), 1e-12)
        handles = [Patch(facecolor=colours[g], label=f"{g}  {groups.labels[g]} "
                                                     f"({100 * cost[g] / total:.0f}%)")
                   for g in range(groups.count)]
        ax_legend.legend(handles=handles, loc="upper left", ncol=3, fontsize=7, frameon=False,
                         title="groups in dataflow order (share of compute time)",
                         title_fontsize=8, alignment="left", handlelength=1.2,
                         columnspacing=1.5, borderaxespad=0, mode="expand")
    _save(fig, path)
    plt.close(fig)
    return {"peaks": peaks, "groups": groups}


def plot_solution(problem, solution, path, title: str | None = None) -> dict:
    """Traces `solution` on `problem` with the simulator and writes the figure to `path`;
    returns what `plot_trace` drew."""
    from regal.sim import trace

    tr = trace(problem.graph, problem.devices, solution.placement, solution.priority,
               solution.transfer_priority)
    return plot_trace(tr, problem.graph, problem.devices, path, title=title)
