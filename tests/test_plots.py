"""`regal.plots`: grouping ops by name scope (a hand-worked case and properties), the peaks the
memory plot marks against the simulator, and whole figures for a small, a mid-size and a
3,000-op real graph."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regal import optimizers as opt
from regal import plots
from regal.plots import MAX_GROUPS, group_ops, op_levels, peak_instants
from regal.plots import bars, figure, solution
from regal.sim import DeviceSpec, simulate, trace
from regal.synth import generate

ROOT = Path(__file__).parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


# -- grouping ------------------------------------------------------------------

# Worked by hand: weights 4 4 2 3 3 1 (+2% of their mean each, 0.0567), keys 0..5.
# Root units by weighted mean key: a (0.8), b (3.5), the root's own op c (5); a weighs 10.17,
# b 6.11, c 1.06. The first cut of [a, b, c] balances 10.17 | 7.17 (not 16.28 | 1.06).
NAMES = ["a/x/1", "a/x/2", "a/y/1", "b/1", "b/2", "c"]
WEIGHTS = [4, 4, 2, 3, 3, 1]


@pytest.mark.parametrize("cap, members, labels", [
    (1, [NAMES], ["(top level)"]),
    (2, [NAMES[:3], NAMES[3:]], ["a", "b … (top-level ops)"]),
    # a is heavier than b+c: a splits into its children x and y
    (3, [NAMES[:2], ["a/y/1"], NAMES[3:]], ["a/x", "a/y", "b … (top-level ops)"]),
    # then b+c into b and c (scopes first, before any scope's own ops are cut)
    (4, [NAMES[:2], ["a/y/1"], ["b/1", "b/2"], ["c"]], ["a/x", "a/y", "b", "(top-level ops)"]),
    # no scope left to split: the heaviest own-ops group, a/x (8.11), is cut in dataflow order
    (5, [["a/x/1"], ["a/x/2"], ["a/y/1"], ["b/1", "b/2"], ["c"]],
     ["a/x: 1", "a/x: 2", "a/y", "b", "(top-level ops)"]),
    (10, [[n] for n in NAMES], ["a/x: 1", "a/x: 2", "a/y", "b: 1", "b: 2", "(top-level ops)"]),
])
def test_group_ops_hand_worked(cap, members, labels):
    groups = group_ops(NAMES, np.arange(6), WEIGHTS, cap=cap)
    got = [[NAMES[i] for i in np.flatnonzero(groups.of_op == g)] for g in range(groups.count)]
    assert got == members
    assert list(groups.labels) == labels


def test_group_ops_without_scopes_cuts_the_dataflow_order_into_runs():
    """Names without '/' (synthetic graphs): each group is a contiguous run of the ops sorted
    by (order key, op id), and runs follow each other in that order."""
    rng = np.random.default_rng(0)
    n = 200
    key = rng.integers(0, 30, n)
    groups = group_ops([f"node_{i}" for i in range(n)], key, rng.random(n), cap=12)
    assert groups.count == 12
    order = np.lexsort((np.arange(n), key))
    sequence = groups.of_op[order]
    assert np.all(np.diff(sequence) >= 0)                       # contiguous, in order
    assert set(sequence.tolist()) == set(range(12))


names_strategy = st.lists(
    st.lists(st.sampled_from(["a", "b", "c", "grad", "block_1", "block_2", "x" * 40]),
             min_size=0, max_size=4).map(lambda parts: "/".join(parts + ["op"])),
    min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(names=names_strategy, cap=st.integers(1, 45), seed=st.integers(0, 2**16))
def test_group_ops_properties(names, cap, seed):
    """Every op in exactly one group; min(cap, n) groups, none empty (splitting stops only at
    the cap or at single ops); deterministic; groups in order of weighted mean key; labels
    within the width; a group spanning several scopes holds each of their own ops whole."""
    names = [f"{name}{i}" for i, name in enumerate(names)]   # unique op names
    n = len(names)
    rng = np.random.default_rng(seed)
    key = rng.integers(0, 10, n).astype(float)
    weights = rng.choice([0.0, 1.0, 5.0, 100.0], n)
    groups = group_ops(names, key, weights, cap=cap)
    assert groups.of_op.shape == (n,)
    assert groups.count == min(cap, n) == len(groups.short)
    assert np.array_equal(np.bincount(groups.of_op, minlength=groups.count) > 0,
                          np.ones(groups.count, bool))
    again = group_ops(list(names), key.copy(), weights.copy(), cap=cap)
    assert np.array_equal(again.of_op, groups.of_op) and again.labels == groups.labels
    w = weights + 0.02 * (weights.mean() if weights.sum() > 0 else 1.0)
    means = [np.average(key[groups.of_op == g], weights=w[groups.of_op == g])
             for g in range(groups.count)]
    assert np.all(np.diff(means) >= -1e-9)
    assert all(len(label) <= figure._LABEL_CHARS for label in groups.labels)
    scope = np.array(["/".join(name.split("/")[:-1]) for name in names])
    for g in range(groups.count):
        scopes = set(scope[groups.of_op == g])
        if len(scopes) > 1:
            for s in scopes:
                assert np.all(groups.of_op[scope == s] == g), (s, names)


def test_group_ops_refuses_bad_arguments():
    with pytest.raises(ValueError, match="cap"):
        group_ops(["a"], cap=0)
    with pytest.raises(ValueError, match="one value per op"):
        group_ops(["a", "b"], order_key=[0.0])
    with pytest.raises(ValueError, match="finite"):
        group_ops(["a", "b"], order_key=[0.0, float("nan")])
    assert group_ops([]).count == 0


def test_op_levels_is_the_longest_path_by_brute_force():
    graph = generate("inception", 70, 2)
    level = op_levels(graph)
    expected = np.zeros(graph.num_nodes, dtype=np.int64)
    changed = True
    while changed:  # relax until nothing changes: longest path from any source
        changed = False
        for v in range(graph.num_nodes):
            preds = graph.predecessors(v)
            best = max((expected[u] + 1 for u in preds), default=0)
            if best != expected[v]:
                expected[v], changed = best, True
    assert np.array_equal(level, expected)


# -- peaks ---------------------------------------------------------------------

@pytest.mark.parametrize("family, ops, d, seed", [("random", 60, 3, 0), ("cnn", 120, 2, 1),
                                                  ("transformer", 90, 4, 2)])
def test_peak_instants_are_the_simulated_peaks(family, ops, d, seed):
    """The marked value is simulate()'s peak of each device (computed apart), and the traced
    curve really stands at that value at the marked instant."""
    graph = generate(family, ops, seed)
    rng = np.random.default_rng(seed)
    placement = rng.integers(0, d, graph.num_nodes).astype(np.int32)
    priority, transfer = rng.random(graph.num_nodes), rng.random(graph.num_nodes)
    devices = DeviceSpec(d)
    result = simulate(graph, devices, placement, priority, transfer)
    tr = trace(graph, devices, placement, priority, transfer)
    marks = peak_instants(tr)
    assert [p for _, p in marks] == result.peak.tolist()
    for k, (at, peak) in enumerate(marks):
        times, live = tr.memory[k]
        assert 0 <= at <= result.makespan
        if len(live):
            assert peak in live[times == at]
            assert not np.any(live[times < at] == peak)   # the first time it is reached


# -- whole figures ---------------------------------------------------------------

@pytest.fixture
def drawn_figures(monkeypatch):
    """The matplotlib figures plot_trace and plot_method_bars save, captured before they are
    closed."""
    captured = []
    save = figure._save

    def keep(fig, path):
        captured.append(fig)
        save(fig, path)
    for module in (solution, bars):
        monkeypatch.setattr(module, "_save", keep)
    return captured


def _marks_on_figure(fig, peaks_bytes, makespan):
    """(time, bytes) of the peak markers drawn on the memory axes, in µs and bytes."""
    from regal.units import duration_unit
    ax = fig.axes[0]
    unit, scale = figure._unit(float(max(peaks_bytes)))
    assert ax.get_ylabel() == f"live memory ({unit})"
    _, t_scale = duration_unit(makespan)
    marks = [line for line in ax.get_lines() if line.get_marker() == "v"]
    return [(float(m.get_xdata()[0]) * t_scale, float(m.get_ydata()[0]) * scale)
            for m in marks]


def test_small_graph_is_drawn_per_op_with_names(tmp_path, drawn_figures):
    problem = opt.Problem(generate("cnn", 40, 0), DeviceSpec(2))
    sol = opt.solve("brkga", problem, 200, seed=0)
    out = tmp_path / "small.png"
    drawn = plots.plot_solution(problem, sol, out, title="small")
    assert out.read_bytes()[:8] == PNG and drawn["groups"] is None
    fig = drawn_figures[0]
    texts = {t.get_text() for t in fig.axes[1].texts}
    op_names = {str(x).split("/")[-1] for x in problem.graph.names}
    assert texts and texts <= op_names          # bar labels are op names
    marks = _marks_on_figure(fig, sol.peak, sol.makespan)
    assert [b for _, b in marks] == pytest.approx(sol.peak.tolist(), rel=1e-9)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0].startswith("device 0: peak ")


def test_real_3000_op_graph_is_drawn_by_group_in_reasonable_time(tmp_path, drawn_figures):
    """MobileNetV2 training (2,897 ops) on 4 devices: grouped into MAX_GROUPS name-scope
    groups, a legend naming each, peaks marked at the simulator's values, in seconds."""
    from regal.io import load_graph
    from regal.units import format_bytes
    graph = load_graph(ROOT / "data/real/mobilenetv2_train_b1.npz")
    problem = opt.Problem(graph, DeviceSpec(4))
    sol = opt.round_robin(problem)
    out = tmp_path / "big.png"
    start = time.perf_counter()
    drawn = plots.plot_solution(problem, sol, out, title="mobilenetv2")
    seconds = time.perf_counter() - start
    assert out.read_bytes()[:8] == PNG
    assert seconds < 60, seconds   # about 3 s on one core when written
    groups = drawn["groups"]
    assert groups.count == MAX_GROUPS
    assert [p for _, p in drawn["peaks"]] == sol.peak.tolist()
    fig = drawn_figures[0]
    marks = _marks_on_figure(fig, sol.peak, sol.makespan)
    assert [b for _, b in marks] == pytest.approx(sol.peak.tolist(), rel=1e-9)
    assert [t for t, _ in marks] == pytest.approx([t for t, _ in drawn["peaks"]], rel=1e-9)
    legend_texts = [t.get_text() for ax in fig.axes for t in
                    (ax.get_legend().get_texts() if ax.get_legend() else [])]
    for g, label in enumerate(groups.labels):
        assert any(text.startswith(f"{g}  {label} (") for text in legend_texts), label
    for k, peak in enumerate(sol.peak):
        assert any(text.startswith(f"device {k}: peak {format_bytes(peak)} at ")
                   for text in legend_texts)
    # each device lane says how busy it is: its ops' time over the step time
    lanes = [t.get_text() for t in fig.axes[1].get_yticklabels()][:4]
    tr = trace(graph, problem.devices, sol.placement, sol.priority, sol.transfer_priority)
    for k, lane in enumerate(lanes):
        on_k = sol.placement == k
        busy = (tr.op_end[on_k] - tr.op_start[on_k]).sum() / sol.makespan
        assert lane == f"device {k}\nbusy {100 * busy:.0f}%"
    # forward layers are grouped apart from their gradients
    assert any(label.startswith("mobilen") for label in groups.labels)
    assert any(label.startswith("gradients/") for label in groups.labels)


def test_many_devices_draw_copies_per_destination(tmp_path, drawn_figures):
    """Six devices (30 links) under a memory limit, as SVG: one lane of copies per destination,
    each device's limit beside its peak."""
    from regal.units import format_bytes
    problem = opt.Problem(generate("random", 150, 3), DeviceSpec(6, memory_limit=2**20))
    sol = opt.round_robin(problem)
    plots.plot_solution(problem, sol, tmp_path / "six.svg")
    legend = [t.get_text() for t in drawn_figures[0].axes[0].get_legend().get_texts()]
    assert legend == [f"device {k}: peak {format_bytes(p)} / limit 1.00 MiB at "
                      f"{legend[k].rsplit(' at ', 1)[1]}" for k, p in enumerate(sol.peak)]
    assert (tmp_path / "six.svg").read_text().lstrip().startswith("<?xml")
    lanes = [t.get_text() for t in drawn_figures[0].axes[1].get_yticklabels()]
    assert [lane.split("\n")[0] for lane in lanes[:6]] == [f"device {k}" for k in range(6)]
    assert 0 < len(lanes) - 6 <= 6 and all(lane.startswith("copies into ") for lane in lanes[6:])


def _four_chains(base_bytes: float, sizes, costs, limits):
    """Four identical chains (op j: cost costs[j], output sizes[j] x `base_bytes`, a hair
    bigger per chain) pinned one per device: four nearly equal peaks at one instant."""
    from regal.graph_builder import GraphBuilder

    b = GraphBuilder()
    for k in range(4):
        prev = None
        for j, (size, cost) in enumerate(zip(sizes, costs)):
            v = b.add_op(f"chain{k}/op{j}", cost)
            b.add_output(v, int(base_bytes * (1 + 0.0005 * k) * size))
            if prev is None:
                first = v
                b.pin(v, k)
            else:
                b.add_input(v, prev)
                b.colocate(first, v)
            prev = v
    problem = opt.Problem(b.build(), DeviceSpec(4, memory_limit=limits))
    return problem, opt.round_robin(problem)


@pytest.mark.parametrize("base_bytes, sizes, costs, limits", [
    # long legend labels: a limit per device, sizes in KiB that need 7 characters
    (200 * 2**10, [1, 2, 3, 1, 2, 3], [123.4] * 6,
     [1023 * 2**20, 1022 * 2**20, 1021 * 2**20, 1020 * 2**20]),
    # the limit drawn, the peaks at the right edge (the last op is short)
    (2**20, [1, 2, 3, 4, 5, 6], [10.0] * 5 + [0.1], 16 * 2**20),
])
def test_solution_plot_keeps_legend_and_peak_labels_inside_and_apart(
        tmp_path, drawn_figures, base_bytes, sizes, costs, limits):
    """Issue 36 item 13: the legend ran past the figure's right edge and the peak labels of
    4 devices overlapped. Every artist (the legend included) lies within the figure, and the
    4 peak labels of nearly equal peaks at one instant lie within the memory axes, apart."""
    from itertools import combinations

    from regal.units import format_bytes

    problem, sol = _four_chains(base_bytes, sizes, costs, limits)
    assert max(sol.peak) - min(sol.peak) < 0.01 * max(sol.peak)
    plots.plot_solution(problem, sol, tmp_path / "four.png",
                        title="data/synth/samples/four_chains.npz (round-robin)")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = drawn_figures[0]
    canvas = FigureCanvasAgg(fig)  # plt.close took the figure's own canvas away
    canvas.draw()
    renderer = canvas.get_renderer()
    page = fig.bbox.padded(0.5)                          # pixels
    drawn = fig.get_tightbbox(renderer)                  # inches: every drawn artist
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= fig.get_figwidth() + 0.01 \
        and drawn.y1 <= fig.get_figheight() + 0.01, drawn
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 \
                and box.y1 <= page.y1, (box, page)
    ax_mem = fig.axes[0]
    labels = [t for t in ax_mem.texts if t.get_text().endswith("B")]
    assert sorted(t.get_text() for t in labels) == sorted(format_bytes(p) for p in sol.peak)
    boxes = [t.get_window_extent(renderer) for t in labels]
    inside = ax_mem.get_window_extent(renderer).padded(0.5)
    for box in boxes:
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and box.y1 <= inside.y1
    for a, b in combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


# -- the report's bar chart --------------------------------------------------------

def test_method_bars_tell_option_variants_apart(tmp_path, drawn_figures):
    """Rows of one method that differ only in options get ticks that say how (the policy's
    last path part, not its hash); options every row shares, and a lone row's hash, stay out."""
    a = '{"policy_dir": "runs/x/both_elite", "policy_hash": "aa"}'
    b = '{"policy_dir": "runs/x/both_noelite", "policy_hash": "bb"}'
    rows = [{"dataset": "real", "method": "regal", "budget": 5000, "options": a,
             "improvement_pct": 1.5, "gap_pct": 2.0},
            {"dataset": "real", "method": "regal", "budget": 5000, "options": b,
             "improvement_pct": None, "gap_pct": 3.0},
            {"dataset": "real", "method": "cpsat", "budget": 5000,
             "options": '{"time_limit": 10.0}', "improvement_pct": -4.0, "gap_pct": 9.0},
            {"dataset": "real", "method": "brkga", "budget": 5000, "options": "{}",
             "improvement_pct": 0.0, "gap_pct": 5.0}]
    plots.plot_method_bars(rows, tmp_path / "bars.png", title="t")
    assert (tmp_path / "bars.png").read_bytes()[:8] == PNG
    fig = drawn_figures[0]
    ticks = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    assert ticks == ["brkga\n5,000", "cpsat\n5,000\ntime_limit=10.0",
                     "regal\n5,000\npolicy_dir=both_elite", "regal\n5,000\npolicy_dir=both_noelite"]
    values = sorted(t.get_text() for ax in fig.axes for t in ax.texts if t.get_text())
    assert values == sorted(["+0.0", "-4.0", "+1.5", "5.0", "9.0", "2.0", "3.0"])


def test_method_bars_mark_runs_over_the_limit_and_leave_out_an_empty_panel(tmp_path,
                                                                           drawn_figures):
    """Issue 36 item 11: without a BRKGA-5K run the improvement panel was an empty 1e-17
    axis; a figure that rests on runs over the memory limit looked like any other."""
    rows = [{"dataset": "real", "method": "m1", "budget": 200, "options": "{}",
             "improvement_pct": None, "gap_pct": 12.5, "from_unfit_runs": ("gap_pct",)},
            {"dataset": "real", "method": "m2", "budget": 200, "options": "{}",
             "improvement_pct": None, "gap_pct": 3.0, "from_unfit_runs": ()}]
    drawn = plots.plot_method_bars(rows, tmp_path / "bars.png", title="t")
    assert drawn == ["gap_pct"] and (tmp_path / "bars.png").read_bytes()[:8] == PNG
    (ax,) = drawn_figures[0].axes
    assert ax.get_ylabel() == "% gap from best"
    bars = [p for p in ax.patches if np.isfinite(p.get_height())]
    assert [(p.get_height(), bool(p.get_hatch())) for p in bars] == [(12.5, True), (3.0, False)]
    assert sorted(t.get_text() for t in ax.texts) == ["12.5†", "3.0"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "real" and legend[1].startswith("† rests on runs over")
    (dataset_patch, unfit_patch) = ax.get_legend().get_patches()
    assert not dataset_patch.get_hatch() and unfit_patch.get_hatch()
