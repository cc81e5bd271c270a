"""Simulated vs measured per-device peak memory (issue 7).

Five small Keras models x {inference, training} x {BRKGA placement, one device}, each run on
2 TensorFlow devices by `regal.measure.measure`. On a machine with GPUs the peaks come from
each logical GPU's allocator; on CPU they are replayed from step statistics (see
regal/measure.py). Writes experiments/results/sim_vs_measured_{cpu|gpu}.{md,csv}.

    .venv/bin/python experiments/sim_vs_measured.py [--budget 1000] [--devices 2]

Columns: `simulated` is the performance model on the static import (what every optimizer
sees); `sim (run times)` replaces each op's cost by its measured time (isolates timing);
`sim (+fwd)` also models TensorFlow's in-place buffer forwarding (regal.measure.with_forwarding,
a proposed importer correction).
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from regal import measure as rm  # noqa: E402 - imports TensorFlow, sets the env first

import tensorflow as tf  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def mlp():
    x = tf.keras.Input((256,), name="features")
    h = tf.keras.layers.Dense(512, activation="relu", name="fc1")(x)
    h = tf.keras.layers.Dense(512, activation="relu", name="fc2")(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(10, name="logits")(h), name="mlp")


def small_cnn():
    x = tf.keras.Input((32, 32, 3), name="image")
    h = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="c1")(x)
    h = tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="c2")(h)
    h = tf.keras.layers.MaxPooling2D(name="pool")(h)
    h = tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="c3")(h)
    h = tf.keras.layers.GlobalAveragePooling2D(name="gap")(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(10, name="logits")(h), name="small_cnn")


def mobilenetv2():
    return tf.keras.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35,
                                             weights=None, classes=10)


def transformer():
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

    from regal import optimizers
    from regal.io.tensorflow import import_step
    from regal.sim import simulate

    kind = rm.configure_devices(devices)
    rows = []
    jobs = [(m, t) for m in models for t in (False, True)]
    for name, training in tqdm(jobs, desc="models", unit="graph"):
        build, batch = MODELS[name]
        step = import_step(build, batch_size=batch, training=training)
        problem = optimizers.Problem(step.graph, devices)
        brkga = optimizers.solve("brkga", problem, budget, seed, population_size=50)
        single = optimizers.single_device(problem)
        for label, solution in (("brkga", brkga), ("one-device", single)):
            record = optimizers.solution_record(problem, solution, budget)
            start = time.perf_counter()
            m = rm.measure(step, record, devices, seed=seed)
            placed = rm.place(step, record, devices)
            fwd = simulate(rm.with_forwarding(step.graph), placed.devices, placed.placement,
                           placed.priority, placed.transfer_priority).peak
            for k in range(devices):
                if not np.any(placed.placement == k):
                    continue  # an empty device: 0 simulated and 0 measured
                rows.append({
                    "model": name, "mode": "train" if training else "infer", "batch": batch,
                    "ops": step.graph.num_nodes, "placement": label, "device": m.devices[k],
                    "ops_on_device": int(np.sum(placed.placement == k)),
                    "simulated": int(m.simulated[k]), "measured": int(m.measured[k]),
                    "diff_pct": _pct(m.measured[k], m.simulated[k]),
                    "measured_no_scratch": int(m.extra["measured_without_scratch"][k]),
                    "sim_run_times": int(m.simulated_measured_times[k]),
                    "diff_run_times_pct": _pct(m.measured[k], m.simulated_measured_times[k]),
                    "sim_forwarding": int(fwd[k]),
                    "diff_forwarding_pct": _pct(m.measured[k], fwd[k]),
                    "diff_forwarding_no_scratch_pct": _pct(
                        m.extra["measured_without_scratch"][k], fwd[k]),
                    "moved_ops": len(m.moved), "misplaced_ops": len(m.misplaced),
                    "max_output_diff": m.max_output_diff,
                    "seconds": round(time.perf_counter() - start, 1)})
        tf.keras.backend.clear_session()
    return rows, kind


NOTES = """
## Why they differ (CPU)

* **Kernel scratch memory (the big one, training graphs with convolutions).** TensorFlow's
  CPU `Conv2DBackpropFilter` / `Conv2DBackpropInput` allocate ~19-25 MB of work buffers
  each while they run (im2col-style chunks, independent of the tiny tensors here); the
  static importer sets every op's `temporary_memory` to 0. Leaving scratch out of the
  replay (`measured w/o scratch`) removes the +150..+540% rows. On a GPU the analogue is
  the cuDNN workspace. Correction: take `temporary_memory` from a measured run
  (`regal import --run` already records it in the cost graph) or from a per-op-type table.
* **In-place forwarding (inference CNNs, -24..-38%).** Element-wise kernels (BiasAdd, Relu,
  Add, ...) write into their input's buffer when they hold its only reference; the
  importer allocates a new tensor, so the model over-counts one activation per such op.
  `sim (+fwd)` (`regal.measure.with_forwarding`: the output aliases the input when this op
  is the input's only consumer, sizes match and the input is not a variable read, constant
  or feed) closes those rows to 0.0%. This belongs in the importer's alias rule.
* **Timing of received tensors (+-5%).** Each device's order is enforced, but when a copy
  from the other device arrives depends on real op times versus the roofline estimate;
  `sim (run times)` (model with measured op times) matches those rows exactly
  (e.g. mobilenetv2 inference, device 1).
* **Remaining transformer differences (-16..+15%) are not diagnosed yet.** They are not
  timing (`sim (run times)` equals `sim`) and not forwarding of the listed element-wise
  ops; the likely suspects (unverified) are buffers TensorFlow shares through
  reshapes/transposes of multi-consumer tensors and kernels with small scratch buffers.
* Weights are exact: every variable is held once, on its handle's device, and the replay's
  persistent bytes equal the importer's (MLP training and one-device rows agree within 0.1%).
  TensorFlow runs every op that uses a variable on the variable's device, so `apply` moves
  such ops together (to where the model charges the bytes) and simulates that placement.
"""


def _mib(x) -> str:
    return f"{x / 2**20:.3f}"


def write(rows: list, kind: str, budget: int, devices: int) -> list[Path]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"sim_vs_measured_{kind.lower()}"
    with open(f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    method = rm.GPU_METHOD if kind == "GPU" else rm.CPU_METHOD
    diffs = np.array([r["diff_pct"] for r in rows])
    fwd = np.array([r["diff_forwarding_pct"] for r in rows])
    fwd_ns = np.array([r["diff_forwarding_no_scratch_pct"] for r in rows])
    lines = [f"# Simulated vs measured per-device peak memory ({kind})", "",
             f"Ran on: {kind}, host {platform.node()} ({cpu}, {os.cpu_count()} cores), "
             f"TensorFlow {tf.__version__}, {datetime.date.today().isoformat()}; "
             f"{devices} logical {kind} devices; BRKGA budget {budget} evaluations "
             f"(population 50, seed 0). Made by `experiments/sim_vs_measured.py`.", "",
             f"Measured by {method}.", "",
             f"|diff| mean {np.nanmean(np.abs(diffs)):.1f}%, max {np.nanmax(np.abs(diffs)):.1f}% "
             f"(model as imported); with in-place forwarding modelled: mean "
             f"{np.nanmean(np.abs(fwd)):.1f}%, max {np.nanmax(np.abs(fwd)):.1f}%; with forwarding "
             f"and kernel scratch left out of the measurement: mean "
             f"{np.nanmean(np.abs(fwd_ns)):.1f}%, max {np.nanmax(np.abs(fwd_ns)):.1f}%.", "",
             "MiB; diff = (measured - simulated) / simulated. `sim (run times)`: op costs "
             "replaced by the measured op times; `sim (+fwd)`: TensorFlow's in-place "
             "forwarding of element-wise ops modelled as aliases; `measured w/o scratch`: the "
             "replay without kernels' temporary buffers (which the static model sets to 0).",
             "",
             "| model | mode | ops | placement | device | ops there | simulated | measured | "
             "diff | sim (run times) | diff | sim (+fwd) | diff | measured w/o scratch | "
             "diff vs +fwd | outputs max abs diff |",
             "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['mode']} | {r['ops']} | {r['placement']} | "
                     f"{r['device']} | {r['ops_on_device']} | {_mib(r['simulated'])} | "
                     f"{_mib(r['measured'])} | {r['diff_pct']:+.1f}% | "
                     f"{_mib(r['sim_run_times'])} | {r['diff_run_times_pct']:+.1f}% | "
                     f"{_mib(r['sim_forwarding'])} | {r['diff_forwarding_pct']:+.1f}% | "
                     f"{_mib(r['measured_no_scratch'])} | "
                     f"{r['diff_forwarding_no_scratch_pct']:+.1f}% | "
                     f"{r['max_output_diff']:.2g} |")
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n" + NOTES)
    return [Path(f"{stem}.md"), Path(f"{stem}.csv")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    rows, kind = run(args.budget, args.devices, args.models)
    for path in write(rows, kind, args.budget, args.devices):
        print(f"wrote {path}")
    print(Path(RESULTS / f"sim_vs_measured_{kind.lower()}.md").read_text())


if __name__ == "__main__":
    main()
