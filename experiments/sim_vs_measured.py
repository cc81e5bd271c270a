"""Simulated vs measured per-device peak memory (issue 7).

Five small Keras models x {inference, training} x {BRKGA placement, one device}, each run on
2 TensorFlow devices by `regal.measure.measure`. On a machine with GPUs the peaks come from
each logical GPU's allocator; on CPU they are replayed from step statistics (see
regal/measure/). Writes experiments/results/sim_vs_measured_{cpu|gpu}.{md,csv} (OUT/...
with --out OUT; a run of fewer than the five models needs --out, so that it cannot replace
the committed table of all five).

    .venv/bin/python experiments/sim_vs_measured.py [--budget 1000] [--devices 2]
        [--models mlp ...] [--out DIR]

Columns: `simulated` is the performance model on the static import (what every optimizer
sees: in-place forwarding as aliases and conv-gradient kernel scratch, see
regal/io/tensorflow/); `sim (before)` is the same placement on the import without those
two corrections (forwarding=False, kernel_scratch=False); `sim (run times)` replaces each
op's cost by its measured time (isolates timing); `sim w/o scratch` vs `measured w/o
scratch` compares tensor bytes alone (kernel scratch left out of both).
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime  # noqa: E402
import io  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from gpu_check import cpu_model  # noqa: E402  (this script's folder is on the path)

RESULTS = Path(__file__).parent / "results"


def _tf():
    """TensorFlow, imported on first use (through regal.measure, which sets its environment
    first): checking the flags, and importing MODELS for their names (gpu_check.py's
    parent), load no TensorFlow."""
    from regal import measure  # noqa: F401 - imports TensorFlow, sets the env first

    import tensorflow as tf
    return tf


def mlp():
    tf = _tf()
    x = tf.keras.Input((256,), name="features")
    h = tf.keras.layers.Dense(512, activation="relu", name="fc1")(x)
    h = tf.keras.layers.Dense(512, activation="relu", name="fc2")(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(10, name="logits")(h), name="mlp")


def small_cnn():
    tf = _tf()
    x = tf.keras.Input((32, 32, 3), name="image")
    h = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="c1")(x)
    h = tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="c2")(h)
    h = tf.keras.layers.MaxPooling2D(name="pool")(h)
    h = tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="c3")(h)
    h = tf.keras.layers.GlobalAveragePooling2D(name="gap")(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(10, name="logits")(h), name="small_cnn")


def mobilenetv2():
    tf = _tf()
    return tf.keras.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35,
                                             weights=None, classes=10)


def transformer():
    tf = _tf()
    seq, d, heads = 32, 64, 2
    tokens = tf.keras.Input((seq,), dtype="int32", name="tokens")
    x = tf.keras.layers.Embedding(1000, d, name="embed")(tokens)
    for i in range(2):
        h = tf.keras.layers.MultiHeadAttention(heads, d // heads, name=f"att{i}")(x, x)
        x = tf.keras.layers.LayerNormalization(name=f"ln{i}a")(x + h)
        h = tf.keras.layers.Dense(4 * d, activation="relu", name=f"ff{i}a")(x)
        h = tf.keras.layers.Dense(d, name=f"ff{i}b")(h)
        x = tf.keras.layers.LayerNormalization(name=f"ln{i}b")(x + h)
    logits = tf.keras.layers.Dense(2, name="cls")(x[:, 0])
    return tf.keras.Model(tokens, logits, name="transformer")


def resnet_blocks():
    tf = _tf()
    x = tf.keras.Input((32, 32, 3), name="image")
    h = tf.keras.layers.Conv2D(32, 3, padding="same", name="stem")(x)
    for i in range(3):
        r = tf.keras.layers.Conv2D(32, 3, padding="same", name=f"b{i}c1")(h)
        r = tf.keras.layers.BatchNormalization(name=f"b{i}bn1")(r)
        r = tf.keras.layers.ReLU(name=f"b{i}relu")(r)
        r = tf.keras.layers.Conv2D(32, 3, padding="same", name=f"b{i}c2")(r)
        r = tf.keras.layers.BatchNormalization(name=f"b{i}bn2")(r)
        h = tf.keras.layers.ReLU(name=f"b{i}out")(h + r)
    h = tf.keras.layers.GlobalAveragePooling2D(name="gap")(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(10, name="logits")(h), name="resnet_blocks")


MODELS = {"mlp": (mlp, 32), "small_cnn": (small_cnn, 16), "mobilenetv2_64": (mobilenetv2, 4),
          "transformer": (transformer, 8), "resnet_blocks": (resnet_blocks, 8)}


def _pct(a, b) -> float:
    return float((a - b) / b * 100.0) if b else float("nan")


def run(budget: int, devices: int, models: list[str], seed: int = 0) -> tuple[list, str]:
    from tqdm import tqdm

    from regal import measure as rm
    from regal import optimizers
    from regal.io.tensorflow import import_step
    from regal.sim import simulate

    kind = rm.configure_devices(devices)
    rows = []
    jobs = [(m, t) for m in models for t in (False, True)]
    for name, training in tqdm(jobs, desc="models", unit="graph"):
        build, batch = MODELS[name]
        step = import_step(build, batch_size=batch, training=training)
        before = import_step(build, batch_size=batch, training=training, forwarding=False,
                             kernel_scratch=False).graph
        assert before.names.tolist() == step.graph.names.tolist()
        no_scratch = step.graph._replace(temporary_memory=np.zeros_like(
            step.graph.temporary_memory))
        problem = optimizers.Problem(step.graph, devices)
        brkga = optimizers.solve("brkga", problem, budget, seed, population_size=50)
        single = optimizers.single_device(problem)
        for label, solution in (("brkga", brkga), ("one-device", single)):
            record = optimizers.solution_record(problem, solution, budget)
            start = time.perf_counter()
            m = rm.measure(step, record, devices, seed=seed)
            placed = rm.place(step, record, devices)
            args = (placed.devices, placed.placement, placed.priority,
                    placed.transfer_priority)
            old = simulate(before, *args).peak
            tensors_only = simulate(no_scratch, *args).peak
            for k in range(devices):
                if not np.any(placed.placement == k):
                    continue  # an empty device: 0 simulated and 0 measured
                rows.append({
                    "model": name, "mode": "train" if training else "infer", "batch": batch,
                    "ops": step.graph.num_nodes, "placement": label, "device": m.devices[k],
                    "ops_on_device": int(np.sum(placed.placement == k)),
                    "simulated": int(m.simulated[k]), "measured": int(m.measured[k]),
                    "diff_pct": _pct(m.measured[k], m.simulated[k]),
                    "sim_before": int(old[k]), "diff_before_pct": _pct(m.measured[k], old[k]),
                    "sim_run_times": int(m.simulated_measured_times[k]),
                    "diff_run_times_pct": _pct(m.measured[k], m.simulated_measured_times[k]),
                    "sim_no_scratch": int(tensors_only[k]),
                    "measured_no_scratch": int(m.extra["measured_without_scratch"][k]),
                    "diff_no_scratch_pct": _pct(m.extra["measured_without_scratch"][k],
                                                tensors_only[k]),
                    "moved_ops": len(m.moved), "misplaced_ops": len(m.misplaced),
                    "max_output_diff": m.max_output_diff,
                    "seconds": round(time.perf_counter() - start, 1)})
        _tf().keras.backend.clear_session()
    return rows, kind


NOTES = """
## Why they differ (CPU)

Two systematic differences were found in the first version of this table and are now
corrected in the importer (`regal/io/tensorflow/`, on by default; `sim (before)` shows
the same placements without them):

* **Kernel scratch memory (training graphs with convolutions, were +125..+492%).**
  TensorFlow's CPU `Conv2DBackpropFilter` / `Conv2DBackpropInput` allocate an im2col
  buffer sized to a 30 MiB working set while they run (10-30 MB each here, independent of
  the tiny tensors). The importer now sets their `temporary_memory` from the kernels'
  formula (module docstring: `conv2d_backprop_filter_scratch`,
  `conv2d_backprop_input_scratch`); it matched the measured per-op scratch to the byte for
  all 35 + 35 conv-gradient ops of MobileNetV2 and every conv gradient of the other
  models. Those rows are now within 0.1%. On a GPU the analogue is cuDNN's workspace,
  which this formula does not describe.
* **In-place forwarding (inference CNNs, were -24..-49%).** Element-wise kernels (BiasAdd,
  Relu, Add, ...) write into an input's buffer when they hold its last reference; the
  importer now models that as an alias (`with_forwarding`: the op is the input's last
  consumer under every schedule, i.e. every other consumer is its ancestor; sizes match;
  the input is not a view, variable read, constant, feed or fetched tensor). Those rows
  are now 0.0%.

What remains:

* **resnet_blocks inference, BRKGA, one device +47.3% (exactly one 1 MiB activation).**
  Not systematic: the same seeded solution gave this row on device 1 in one run, on
  device 0 in the next and 0.0% on both in a third. A residual `add` on one device whose
  input came from the other is modelled as forwarding into the received copy, but
  logical CPUs share one allocator and an intra-process CPU-to-CPU receive shares the
  sender's buffer, so TensorFlow can forward only if the sender's side has already
  dropped its references; that depends on the two devices' relative timing. With real
  GPUs the receive is a copy and this race does not exist. In the run with colocation
  groups (2026-11-25, new BRKGA placements) the resnet_blocks rows are within 0.1%; a
  1 MiB difference appears instead only in the w/o-scratch column of small_cnn training
  (BRKGA, device 0: -21.9%), not investigated.
* **Transformer rows (-5.7..+7.3%).** Two small effects of opposite sign. (1) Kernels
  the model gives no scratch allocate a little: Einsum up to 192 KB, the layer norms
  (FusedBatchNormV3 and its gradient) up to 197 KB, ResourceApplyAdam up to 250 KB,
  measured per op; on devices whose peak falls while one runs, measured > simulated
  (BRKGA device 1: +7.3% with scratch, -1.6% without). (2) With scratch left out of both,
  the measured tensor bytes are up to 16% lower (one-device inference -16.2%): TensorFlow
  reuses more buffers than the forwarding rule models (candidates, not verified: inputs
  that are themselves views, such as the reshapes and transposes around attention, and
  element-wise ops outside `FORWARDING_OPS`).
* **Timing (within 1%).** Each device's order is enforced, but when a copy from the
  other device arrives depends on real op times versus the roofline estimate;
  `sim (run times)` (model with measured op times) shows where that matters.
* Weights are exact: every variable is held once, on its handle's device, and the replay's
  persistent bytes equal the importer's (MLP training and one-device rows agree within 0.1%).
  TensorFlow runs every op that uses a variable on the variable's device; the importer
  records those colocation groups in the graph, so BRKGA's placements keep each group
  together and `apply` moves no op (`ops moved` 0; before the graph had groups, TF moved
  4..1010 ops of the BRKGA placements, 1010 of 2897 in MobileNetV2 training); the
  placement simulated is the placement the optimizer chose.
"""


def _stat(pct) -> str:
    return f"{np.nanmean(np.abs(pct)):.1f}%, max {np.nanmax(np.abs(pct)):.1f}%"


def _mib(x) -> str:
    return f"{x / 2**20:.3f}"


def write(rows: list, kind: str, budget: int, devices: int, out: Path = RESULTS) -> list[Path]:
    from regal import measure as rm
    from regal.files import write_text

    tf = _tf()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"sim_vs_measured_{kind.lower()}"
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_text(f"{stem}.csv", table.getvalue())
    cpu = cpu_model()
    method = rm.GPU_METHOD if kind == "GPU" else rm.CPU_METHOD
    diffs = np.array([r["diff_pct"] for r in rows])
    old = np.array([r["diff_before_pct"] for r in rows])
    timed = np.array([r["diff_run_times_pct"] for r in rows])
    tensors = np.array([r["diff_no_scratch_pct"] for r in rows])
    lines = [f"# Simulated vs measured per-device peak memory ({kind})", "",
             f"Ran on: {kind}, host {platform.node()} ({cpu}, {os.cpu_count()} cores), "
             f"TensorFlow {tf.__version__}, {datetime.date.today().isoformat()}; "
             f"{devices} logical {kind} devices; BRKGA budget {budget} evaluations "
             f"(population 50, seed 0). Made by `experiments/sim_vs_measured.py`.", "",
             f"Measured by {method}.", "",
             f"|diff| (measured vs simulated, per device): importer as it is now (in-place "
             f"forwarding + conv-gradient scratch) mean {_stat(diffs)}; before those "
             f"corrections mean {_stat(old)}; now, with measured op times mean "
             f"{_stat(timed)}; tensor bytes alone (scratch left out of both) mean "
             f"{_stat(tensors)}.", "",
             "MiB; diff = (measured - simulated) / simulated. `sim (before)`: the same "
             "placement on the import without forwarding and kernel scratch "
             "(`forwarding=False, kernel_scratch=False`); `sim (run times)`: op costs "
             "replaced by the measured op times; `w/o scratch`: kernels' temporary buffers "
             "left out of the replay and of the model; `ops moved`: ops TensorFlow's "
             "colocation would have run on another device than the solution's (0: the "
             "graph's colocation groups kept every group together).",
             "",
             "| model | mode | ops | placement | device | ops there | measured | simulated | "
             "diff | sim (before) | diff | sim (run times) | diff | measured w/o scratch | "
             "sim w/o scratch | diff | outputs max abs diff | ops moved |",
             "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['mode']} | {r['ops']} | {r['placement']} | "
                     f"{r['device']} | {r['ops_on_device']} | {_mib(r['measured'])} | "
                     f"{_mib(r['simulated'])} | {r['diff_pct']:+.1f}% | "
                     f"{_mib(r['sim_before'])} | {r['diff_before_pct']:+.1f}% | "
                     f"{_mib(r['sim_run_times'])} | {r['diff_run_times_pct']:+.1f}% | "
                     f"{_mib(r['measured_no_scratch'])} | {_mib(r['sim_no_scratch'])} | "
                     f"{r['diff_no_scratch_pct']:+.1f}% | "
                     f"{r['max_output_diff']:.2g} | {r['moved_ops']} |")
    write_text(f"{stem}.md", "\n".join(lines) + "\n" + NOTES)
    return [Path(f"{stem}.md"), Path(f"{stem}.csv")]


def main(argv=None) -> int:
    from regal.arguments import check_device_counts, check_output, device_count, positive_int
    from regal.user_errors import UserError, refuse_empty

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=positive_int, default=1000)
    parser.add_argument("--devices", type=device_count, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder of sim_vs_measured_{cpu|gpu}.{md,csv} (default "
                             "experiments/results; needed when --models leaves some out)")
    args = parser.parse_args(argv)
    check_device_counts(args)
    if args.out is None and set(args.models) != set(MODELS):
        raise UserError(f"--models {' '.join(args.models)}: a run of fewer than the "
                        f"{len(MODELS)} models would replace the committed table of all of "
                        "them in experiments/results; give --out DIR to write it elsewhere")
    out = RESULTS if args.out is None else args.out
    check_output("--out", out, folder=True)
    rows, kind = run(args.budget, args.devices, args.models)
    refuse_empty(rows, f"--models {' '.join(args.models)}")
    paths = write(rows, kind, args.budget, args.devices, out)
    for path in paths:
        print(f"wrote {path}")
    print(paths[0].read_text())
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    raise SystemExit(report_user_errors("sim_vs_measured.py", main))
