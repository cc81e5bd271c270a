"""Save and load times of every graph file format on one random 50,000-op DAG.

    .venv/bin/python experiments/bench_io.py [--ops 50000] [--repeat 3] [--seed 0]

Prints one row per format: file size, best-of-`repeat` save and load seconds.
The graph comes from its own simple generator (about two inputs per op, a few
control edges, some aliases) so that the benchmark does not depend on regal.synth.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from regal.graph import ComputationGraph, build_graph
from regal.io import load_graph, save_graph
from regal.io.native import write_native


def random_dag(num_ops: int, seed: int = 0, window: int = 200) -> ComputationGraph:
    """Op v reads ~2 tensors of recent ops (within `window`); ~5% of ops get a control input."""
    rng = np.random.default_rng(seed)
    num_out = rng.choice([1, 1, 1, 2], size=num_ops)
    num_out[0] = 1
    producer = np.repeat(np.arange(num_ops), num_out)
    output_ptr = np.concatenate([[0], np.cumsum(num_out)])
    num_in = np.minimum(rng.poisson(2.0, size=num_ops), np.arange(num_ops))
    input_ptr = np.concatenate([[0], np.cumsum(num_in)])
    consumer = np.repeat(np.arange(num_ops), num_in)
    src_op = consumer - rng.integers(1, window + 1, size=len(consumer))
    src_op = np.maximum(src_op, 0)
    port = (rng.random(len(consumer)) * num_out[src_op]).astype(np.int64)
    input_tensor = output_ptr[src_op] + port
    t = len(producer)
    alias = np.full(t, -1)
    # the first output of ~3% of ops with inputs aliases their first input
    lucky = np.flatnonzero((num_in > 0) & (rng.random(num_ops) < 0.03))
    alias[output_ptr[lucky]] = input_tensor[input_ptr[lucky]]
    ctrl_dst = rng.choice(np.arange(1, num_ops), size=num_ops // 20, replace=False)
    ctrl_src = np.maximum(ctrl_dst - rng.integers(1, window + 1, size=len(ctrl_dst)), 0)
    return build_graph(
        names=[f"block{v // 100}/op_{v}" for v in range(num_ops)],
        op_types=rng.choice(["Conv2D", "MatMul", "Relu", "AddV2", "Identity"], size=num_ops),
        compute_cost=rng.integers(0, 100, size=num_ops).astype(float),
        temporary_memory=rng.integers(0, 1 << 16, size=num_ops) * (rng.random(num_ops) < 0.2),
        persistent_memory=rng.integers(0, 1 << 20, size=num_ops) * (rng.random(num_ops) < 0.1),
        tensor_producer=producer, tensor_size=rng.integers(4, 1 << 22, size=t),
        tensor_alias=alias, input_ptr=input_ptr, input_tensor=input_tensor,
        control_src=ctrl_src, control_dst=ctrl_dst,
    )


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> int:
    from regal.arguments import non_negative_int, positive_int

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=positive_int, default=50_000)
    parser.add_argument("--repeat", type=positive_int, default=3)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    args = parser.parse_args(argv)

    build_s, graph = _best(lambda: random_dag(args.ops, args.seed), 1)
    print(f"graph: {graph!r}  (generated + validated in {build_s:.2f} s)")
    formats = [
        (".npz (compressed)", "g.npz", lambda g, p: save_graph(g, p)),
        (".npz (uncompressed)", "g.npz", lambda g, p: write_native(g, p, compressed=False)),
        (".pb (CostGraphDef)", "g.pb", lambda g, p: save_graph(g, p)),
        (".pbtxt (CostGraphDef)", "g.pbtxt", lambda g, p: save_graph(g, p)),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, save in tqdm(formats, desc="formats"):
            path = Path(tmp) / name
            save_s, _ = _best(lambda: save(graph, path), args.repeat)
            load_s, loaded = _best(lambda: load_graph(path), args.repeat)
            # CostGraphDef has no op types: compare everything else
            same = all(np.array_equal(a, b) for f, a, b in
                       zip(graph._fields, graph, loaded) if f != "op_types")
            rows.append((label, path.stat().st_size / 2**20, save_s, load_s, same))
    print(f"\n{'format':<24}{'size MiB':>10}{'save s':>9}{'load s':>9}  round trip")
    for label, mib, save_s, load_s, same in rows:
        print(f"{label:<24}{mib:>10.2f}{save_s:>9.3f}{load_s:>9.3f}  {'ok' if same else 'DIFFERS'}")
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("bench_io.py", main))
