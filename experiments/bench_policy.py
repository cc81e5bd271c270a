"""Times the policy on CPU: featurisation, first call (tracing), warm forward pass, act.

    python experiments/bench_policy.py [--sizes 1000 10000] [--repeats 5] [--devices 4]

The target (issue 6) is a warm forward pass on a 10,000-op graph in <= 1 s on CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU figure, even on a GPU machine

import numpy as np  # noqa: E402

from regal.graph_builder import GraphBuilder  # noqa: E402


def benchmark_graph(num_ops: int, seed: int = 0):
    """regal.synth.random_dag when available, else a local random DAG (2 inputs, local reach)."""
    try:
        from regal.synth import random_dag
        return random_dag(num_ops, np.random.default_rng(seed))
    except ImportError:
        pass
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    for v in range(num_ops):
        b.add_op(f"op{v}", float(rng.integers(1, 100)), op_type=("MatMul", "Add", "Relu")[v % 3])
        b.add_output(v, float(rng.integers(1, 1 << 20)))
        for u in set(rng.integers(max(0, v - 20), v, size=min(v, 2)).tolist()):
            b.add_input(v, u)
    return b.build()


def timed(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), times


def main(argv=None) -> int:
    from regal.arguments import check_device_counts, device_count, positive_int

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeats", type=positive_int, default=5)
    ap.add_argument("--devices", type=device_count, default=4)
    ap.add_argument("--layers", type=positive_int, default=4)
    ap.add_argument("--hidden", type=positive_int, default=64)
    args = ap.parse_args(argv)
    check_device_counts(args)

    # TensorFlow only now, after the flags are checked
    from regal.policy import Policy
    from regal.policy.features import graph_features
    from regal.policy.inference import NumpyPolicy

    policy = Policy(num_layers=args.layers, hidden=args.hidden, seed=0)
    # the TensorFlow-free forward pass `regal optimize --method regal` uses, same weights
    numpy_policy = NumpyPolicy(policy.config, policy.net.get_weights())
    print(f"policy: {args.layers} layers, hidden {args.hidden}, "
          f"{sum(int(np.prod(v.shape)) for v in policy.trainable_variables)} parameters")
    for n in args.sizes:
        graph = benchmark_graph(n)
        t = time.perf_counter()
        feats = graph_features(graph, args.devices)
        t_feat = time.perf_counter() - t
        t = time.perf_counter()
        policy.logits(feats)
        t_first = time.perf_counter() - t
        t_fwd, _ = timed(lambda: policy.logits(feats), args.repeats)
        t_act, _ = timed(lambda: policy.act(graph, args.devices, seed=0), args.repeats)
        t_np, _ = timed(lambda: numpy_policy.logits(feats), args.repeats)
        gap = max(float(np.abs(numpy_policy.logits(feats)[h] - policy.logits(feats)[h]).max())
                  for h in policy.learned)
        print(f"n={n:>6} edges={len(feats.edge_index):>7}  features {t_feat:.3f}s  "
              f"first call {t_first:.3f}s  forward (median of {args.repeats}) {t_fwd:.3f}s  "
              f"act incl. features {t_act:.3f}s  | numpy forward {t_np:.4f}s "
              f"(max |logit diff| {gap:.1e})")
    print(f"traces of the forward function: {policy._forward.experimental_get_tracing_count()}")
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("bench_policy.py", main))
