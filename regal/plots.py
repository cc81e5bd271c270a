"""Pictures of one solution: each device's memory over time and a Gantt chart.

Drawn from `regal.sim.trace`, the same model that scored the solution, so the
curves peak exactly at the reported per-device peaks (each peak is marked with its
instant and value). matplotlib runs on the Agg backend: no display is needed.

A graph of a few dozen ops is drawn op by op, each bar labelled with its op's name.
Thousands of ops would be an unlabelled barcode, so larger graphs are drawn by group:
`group_ops` cuts the tree of name scopes (TensorFlow's `layer/op` names) into at most
`MAX_GROUPS` groups of similar compute time, ranges of sibling layers where a scope has
too many children, and contiguous runs of the dataflow order where names carry no scope
(synthetic graphs). Every op's bar takes its group's colour; a legend names the groups
and wide enough runs of one group carry its name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["plot_solution", "plot_trace", "plot_method_bars", "group_ops", "op_levels",
           "peak_instants", "OpGroups", "MAX_GROUPS", "SMALL_GRAPH_OPS", "MAX_LINK_LANES"]

MAX_GROUPS = 36        # colours a reader can still tell apart, and a legend that fits
SMALL_GRAPH_OPS = 60   # up to this many ops, one labelled bar per op
MAX_LINK_LANES = 12    # beyond, copies are drawn per destination device, not per link
_LABEL_CHARS = 60      # legend labels are shortened beyond this
_FORMATS = ("png", "pdf", "svg")


def _save(fig, path) -> None:
    """Writes exactly `path` (matplotlib would add '.png' to a name without a suffix, and
    the caller would then name a file that does not exist): the format follows a known
    suffix, else PNG."""
    from pathlib import Path

    from regal.files import replacing

    suffix = Path(path).suffix.lower().lstrip(".")
    with replacing(path) as tmp:  # a failed write leaves the previous file whole
        fig.savefig(tmp, dpi=110, format=suffix if suffix in _FORMATS else "png")


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


# ---------------------------------------------------------------------------
# grouping ops by name scope


@dataclass(frozen=True)
class OpGroups:
    """A partition of the ops: `of_op[i]` is op i's group, groups numbered in dataflow order
    (the weighted mean order key of their ops); `labels[g]` names group g in full, `short[g]`
    by its distinguishing tail (for text inside a bar)."""

    of_op: np.ndarray       # [n] int32
    labels: tuple
    short: tuple

    @property
    def count(self) -> int:
        return len(self.labels)


def op_levels(graph) -> np.ndarray:
    """[n] int64: the number of ops on the longest path that ends at each op, minus one
    (0 for an op without predecessors): the dataflow position groups are ordered by."""
    return graph.levels()


class _Scope:
    """A node of the name-scope tree: the ops named directly in it and its child scopes."""

    __slots__ = ("path", "own", "children", "units", "unit_weight", "weight", "key_sum",
                 "count")  # key_sum: sum of order key x weight over the scope's ops

    def __init__(self, path: tuple) -> None:
        self.path = path
        self.own: list[int] = []
        self.children: dict[str, _Scope] = {}


def _scope_tree(names, order_key: np.ndarray, weights: np.ndarray) -> _Scope:
    """The tree of name scopes ('a/b/op' lies in scope a/b), each node's sibling units (its own
    ops as one unit, and each child) sorted by the weighted mean order key of their ops: where
    a layer's work happens, not where its free bookkeeping ops sit."""
    root = _Scope(())
    for i, name in enumerate(names):
        parts = [p for p in str(name).split("/") if p]
        node = root
        for part in parts[:-1]:
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Scope(node.path + (part,))
            node = child
        node.own.append(i)

    post_order, stack = [], [root]   # children before parents, without recursion
    while stack:
        node = stack.pop()
        post_order.append(node)
        stack.extend(node.children.values())
    for node in reversed(post_order):
        units = []
        if node.own:
            own = np.asarray(node.own)
            key_sum = float((order_key[own] * weights[own]).sum())
            units.append((key_sum / float(weights[own].sum()), "", "own",
                          float(weights[own].sum()), len(own), key_sum))
        for name, child in node.children.items():
            units.append((child.key_sum / child.weight, name, child, child.weight, child.count,
                          child.key_sum))
        units.sort(key=lambda u: (u[0], u[1]))
        node.units = [u[2] for u in units]
        node.unit_weight = np.cumsum([0.0] + [u[3] for u in units])
        node.weight = float(node.unit_weight[-1])
        node.count = sum(u[4] for u in units)
        node.key_sum = sum(u[5] for u in units)
    return root


def _shorten(text: str, width: int = _LABEL_CHARS) -> str:
    """Cuts the middle of a long text: 'gradients/mobil…ject … block_9'."""
    if len(text) <= width:
        return text
    head = width // 3
    return text[:head] + "…" + text[-(width - head - 1):]


def _labels(parts: list, width: int = _LABEL_CHARS) -> list[str]:
    """Group names (scope path, separator, tail) within `width` characters, abbreviated alike:
    the tail (the layers a group holds) stays whole as long as it can; first every long scope
    name is cut ('mobilenetv2_1…'), then the middle scopes become '…'; a name still too long
    loses its middle."""
    def joined(path, sep, tail, cap, keep_middle):
        path = [p if cap is None or len(p) <= cap else p[:cap - 1] + "…" for p in path]
        if not keep_middle and len(path) > 2:
            path = [path[0], "…", path[-1]]
        return "/".join(path) + sep + tail if path else tail

    for cap, keep_middle in ((None, True), (14, True), (10, True), (10, False)):
        out = [joined(*p, cap, keep_middle) for p in parts]
        if all(len(x) <= width for x in out):
            return out
    return [_shorten(x, width) for x in out]


def _unit_name(unit, node) -> str:
    if unit == "own":  # the ops named directly in `node`
        return "(ops)" if node.path else "(top-level ops)"
    return unit.path[-1]


class _Range:
    """Units a..b-1 of one scope."""

    def __init__(self, node: _Scope, a: int, b: int) -> None:
        self.node, self.a, self.b = node, a, b
        self.weight = float(node.unit_weight[b] - node.unit_weight[a])

    def splittable(self) -> bool:
        return self.b - self.a >= 2

    def split(self):
        w = self.node.unit_weight
        cut = np.arange(self.a + 1, self.b)
        m = int(cut[np.argmin(np.abs(2 * w[cut] - w[self.a] - w[self.b]))])
        return _Range(self.node, self.a, m), _Range(self.node, m, self.b)

    def ops(self) -> np.ndarray:
        found, stack = [], []
        for unit in self.node.units[self.a:self.b]:
            if unit == "own":
                found.extend(self.node.own)
            else:
                stack.append(unit)
        while stack:  # every op in the subtrees of the range's child scopes
            scope = stack.pop()
            found.extend(scope.own)
            stack.extend(scope.children.values())
        return np.sort(np.asarray(found, dtype=np.int64))

    def labels(self, names) -> tuple[tuple, str, str]:
        """(scope path, separator, tail): the group's name is path + separator + tail."""
        path = self.node.path
        if self.a == 0 and self.b == len(self.node.units):
            return (path[:-1], "/", path[-1]) if path else ((), "", "(top level)")
        first = _unit_name(self.node.units[self.a], self.node)
        last = _unit_name(self.node.units[self.b - 1], self.node)
        return path, "/", first if self.b - self.a == 1 else f"{first} … {last}"


class _Leaf:
    """Ops named directly in one scope, in dataflow order: `ops[a:b]` of them."""

    def __init__(self, node: _Scope, ops: np.ndarray, weights: np.ndarray, a: int, b: int):
        self.node, self.all, self.weights, self.a, self.b = node, ops, weights, a, b
        self.weight = float(weights[ops[a:b]].sum())

    def splittable(self) -> bool:
        return self.b - self.a >= 2

    def split(self):
        c = np.cumsum(np.concatenate([[0.0], self.weights[self.all[self.a:self.b]]]))
        cut = np.arange(1, self.b - self.a)
        m = self.a + int(cut[np.argmin(np.abs(2 * c[cut] - c[-1]))])
        return (_Leaf(self.node, self.all, self.weights, self.a, m),
                _Leaf(self.node, self.all, self.weights, m, self.b))

    def ops(self) -> np.ndarray:
        return np.sort(self.all[self.a:self.b])

    def labels(self, names) -> tuple[tuple, str, str]:
        path = self.node.path
        if self.a == 0 and self.b == len(self.all):
            if self.node.children:
                return (path, "/", "(ops)") if path else ((), "", "(top-level ops)")
            return (path[:-1], "/", path[-1]) if path else ((), "", "(all ops)")

        def short(i):
            return str(names[i]).split("/")[-1] or str(names[i])
        first, last = short(self.all[self.a]), short(self.all[self.b - 1])
        return path, ": ", first if self.b - self.a == 1 else f"{first} … {last}"


def _short_label(tail: str, width: int = 28) -> str:
    """What fits inside a bar: the tail, or where its range starts ('block_4_expand …')."""
    if len(tail) <= width:
        return tail
    first, sep, _ = tail.partition(" … ")
    return _shorten(first, width - 2) + " …" if sep else _shorten(tail, width)


def _normalized(group, order_key, weights):
    """A range of one unit is that unit: a child scope (all of it) or the scope's own ops."""
    while isinstance(group, _Range) and group.b - group.a == 1:
        unit = group.node.units[group.a]
        if unit == "own":
            own = np.asarray(group.node.own, dtype=np.int64)
            own = own[np.lexsort((own, order_key[own]))]   # dataflow order, ties by op id
            return _Leaf(group.node, own, weights, 0, len(own))
        group = _Range(unit, 0, len(unit.units))
    return group


def group_ops(names, order_key=None, weights=None, cap: int = MAX_GROUPS) -> OpGroups:
    """Partitions ops into at most `cap` groups by name scope, for a readable chart.

    Starting from one group of all ops, repeatedly splits the heaviest group (by `weights`,
    e.g. compute time; each op also counts a little, so free ops are not lost) in two: a run
    of sibling scopes at the weight-balanced cut, a single scope into its children. Only
    when no scope is left to split are the ops named directly in one scope cut into
    contiguous runs of the dataflow order (`order_key`, e.g. `op_levels`; ties by op id),
    which is all there is to cut for names without scopes. Pure and deterministic: the
    same names, keys and weights give the same groups."""
    names = [str(x) for x in names]
    n = len(names)
    if not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"cap: expected a positive number of groups, got {cap!r}")
    order_key = np.arange(n, dtype=np.float64) if order_key is None else \
        np.asarray(order_key, dtype=np.float64)
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if order_key.shape != (n,) or weights.shape != (n,):
        raise ValueError(f"order_key and weights: expected one value per op ({n})")
    if not np.all(np.isfinite(order_key)):
        raise ValueError("order_key: expected finite numbers")
    if n == 0:
        return OpGroups(np.zeros(0, dtype=np.int32), (), ())
    weights = np.where(np.isfinite(weights) & (weights > 0), weights, 0.0)
    floor = weights.mean() if weights.sum() > 0 else 1.0
    weights = weights + 0.02 * floor
    root = _scope_tree(names, order_key, weights)
    groups = [_normalized(_Range(root, 0, len(root.units)), order_key, weights)]
    while len(groups) < cap:
        for kind in (_Range, _Leaf):   # scopes first, runs of one scope's ops last
            candidates = [i for i, g in enumerate(groups)
                          if isinstance(g, kind) and g.splittable()]
            if candidates:
                break
        else:
            break
        i = max(candidates, key=lambda j: (groups[j].weight, -j))
        left, right = groups[i].split()
        groups[i:i + 1] = [_normalized(left, order_key, weights),
                           _normalized(right, order_key, weights)]
    members = [g.ops() for g in groups]
    labelled = [g.labels(names) for g in groups]
    rank = sorted(range(len(groups)),
                  key=lambda j: (float(np.average(order_key[members[j]],
                                                  weights=weights[members[j]])), labelled[j],
                                 int(members[j][0])))
    of_op = np.empty(n, dtype=np.int32)
    for g, j in enumerate(rank):
        of_op[members[j]] = g
    return OpGroups(of_op, tuple(_labels([labelled[j] for j in rank])),
                    tuple(_short_label(labelled[j][2]) for j in rank))


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
