"""`regal measure`: the placed step run on D logical devices, each device's measured peak
memory (the GPU allocator's, or the CPU replay's) beside the simulator's, and the step's
measured wall time beside the simulated one (the makespan of the same placement).

Step time: the median wall time of `timed_runs` untraced runs of the placed step (no
tracing, outputs fetched), after the warm-up runs. On logical CPU devices all devices share
the machine's cores and one thread pool, so it shows no parallel speed-up; only a run on
GPUs checks the overlap the simulator predicts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import tensorflow as tf  # loaded by regal.measure's __init__, quietly and with Keras 2

from regal.io.tensorflow import ImportedStep, import_step
from regal.measure.placed import (_import_for_run, _random, _variable_values, device_name,
                                  load_solution_record, place, placed_graph_def)
from regal.measure.replay import _device_index, _nanos, replay_step_stats
from regal.sim import DeviceSpec, simulate
from regal.units import format_duration_us

__all__ = ["Measurement", "configure_devices", "measure", "CPU_METHOD", "GPU_METHOD",
           "DEFAULT_GPU_MEMORY_MB"]

CPU_METHOD = ("CPU step-statistics replay: logical CPUs share one allocator, so each device's "
              "peak is rebuilt from the run's step stats (output bytes and pointers, op "
              "times; a tensor freed after its last consumer on that device; received "
              "tensors counted as copies on the receiver)")
GPU_METHOD = ("GPU allocator: one logical GPU per device, each with its own allocator; "
              "peak = tf.config.experimental.get_memory_info(device)['peak'] after a reset")
DEFAULT_GPU_MEMORY_MB = 4096  # per logical GPU when splitting physical GPUs
INSTANT_BANDWIDTH = 1e15  # bytes/µs: a copy that takes no time (logical CPUs' shared memory)


# ---------------------------------------------------------------------------
# devices


def configure_devices(count: int, kind: str = "auto",
                      gpu_memory_mb: int | None = None) -> str:
    """Creates `count` logical devices of `kind` ('auto': GPU when one exists) -> 'CPU'/'GPU'.

    Must run before TensorFlow initialises its devices; if it already has, the existing
    logical devices are used when there are enough, else a ValueError says so.
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected an integer >= 1, got {count!r}")
    kind = kind.upper()
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "AUTO":
        kind = "GPU" if gpus else "CPU"
    if kind not in ("CPU", "GPU"):
        raise ValueError(f"device type: expected cpu, gpu or auto, got {kind.lower()!r}")
    if kind == "GPU" and not gpus:
        raise ValueError("device type gpu: no GPU found on this machine")
    try:
        if kind == "GPU":
            memory = int(gpu_memory_mb or DEFAULT_GPU_MEMORY_MB)
            for i, gpu in enumerate(gpus):
                here = count // len(gpus) + (1 if i < count % len(gpus) else 0)
                if here:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory)] * here)
        else:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:  # devices already initialised in this process
        pass
    have = len(tf.config.list_logical_devices(kind))
    if have < count:
        raise ValueError(f"devices: {count} logical {kind} devices needed, but TensorFlow "
                         f"already initialised {have} in this process; call "
                         f"regal.measure.configure_devices({count}) first or use a fresh "
                         f"process")
    return kind


def _session_config(kind: str, count: int) -> "tf.compat.v1.ConfigProto":
    """The eager context's device set-up, without graph rewriting (ops keep names/devices)."""
    from tensorflow.python.eager import context

    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    if kind == "CPU":
        config.device_count["CPU"] = max(count, config.device_count.get("CPU", 1))
    config.allow_soft_placement = kind == "GPU"  # an op with no GPU kernel may fall back
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    opts = config.graph_options.optimizer_options
    opts.opt_level = tf.compat.v1.OptimizerOptions.L0
    opts.do_constant_folding = False
    opts.do_common_subexpression_elimination = False
    opts.do_function_inlining = False
    return config


def _run(graph_def, step: ImportedStep, config, *, seed: int, runs: int, timed_runs: int = 0,
         before_measured=None, after_measured=None):
    """Runs the step `runs` times (warm-up; the first run's outputs are returned), then
    `timed_runs` times timed, then once traced.

    Returns (outputs, RunMetadata, extra, wall times of the timed runs in µs)."""
    g, init, init_feed = _import_for_run(graph_def, _variable_values(graph_def, seed))
    rng = np.random.default_rng(seed + 1)
    feed = {g.get_tensor_by_name(t.name): _random(rng, t.shape.as_list(), t.dtype)
            for t in step.feeds}
    tensors = [g.get_tensor_by_name(f.name) for f in step.fetches if isinstance(f, tf.Tensor)]
    others = [g.get_operation_by_name(f.name) for f in step.fetches
              if isinstance(f, tf.Operation)]
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                      output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    extra = None
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init, init_feed)
        outputs = sess.run(tensors, feed)  # first run: outputs before any training update
        for _ in range(max(runs - 1, 0)):
            sess.run(tensors + others, feed)
        walls = []
        for _ in range(max(timed_runs, 0)):
            start = time.perf_counter()
            sess.run(tensors + others, feed)
            walls.append((time.perf_counter() - start) * 1e6)
        if before_measured is not None:
            before_measured()
            sess.run(tensors + others, feed)
            extra = after_measured()
        sess.run(tensors + others, feed, options=options, run_metadata=metadata)
    return outputs, metadata, extra, walls


def _traced_span_us(metadata, count: int, kind: str) -> float:
    """First op start to last op end over the step's devices in the traced run (µs): the
    step without the session's own overhead around it."""
    starts, ends = [], []
    for dev in metadata.step_stats.dev_stats:
        k = _device_index(dev.device, kind)
        if k is None or k >= count:
            continue
        for ns in dev.node_stats:
            start, end = _nanos(ns)
            starts.append(start)
            ends.append(end)
    return (max(ends) - min(starts)) / 1000.0 if starts else math.nan


# ---------------------------------------------------------------------------
# measure


@dataclass
class Measurement:
    """Per-device peaks: measured on TF devices vs simulated for the applied placement."""

    devices: list                 # TF device names
    method: str                   # how the measured peaks were obtained
    measured: np.ndarray          # [D] bytes
    simulated: np.ndarray         # [D] bytes, model costs, applied placement
    simulated_measured_times: np.ndarray  # [D] bytes, op times taken from the run
    solution_peak: np.ndarray     # [D'] the solution record's own claim
    moved: dict                   # op -> (solution device, applied device)
    misplaced: dict               # op -> device TF ran it on, where not the applied one
    max_output_diff: float | None  # placed vs unplaced outputs (max abs), if checked
    extra: dict = field(default_factory=dict)
    measured_step_us: float = math.nan   # median wall time of the timed runs
    simulated_step_us: float = math.nan  # the simulator's makespan, applied placement
    step_samples_us: list = field(default_factory=list)  # each timed run's wall time

    @property
    def step_difference_pct(self) -> float:
        sim = float(self.simulated_step_us)
        if not (sim > 0 and math.isfinite(sim) and math.isfinite(self.measured_step_us)):
            return math.nan
        return (float(self.measured_step_us) - sim) / sim * 100.0

    @property
    def difference_pct(self) -> np.ndarray:
        sim = np.asarray(self.simulated, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sim > 0, (self.measured - sim) / sim * 100.0, np.nan)

    def lines(self) -> list[str]:
        out = [f"measured by {self.method}",
               f"{'device':<28}{'simulated':>14}{'measured':>14}{'diff':>9}"]
        for k, dev in enumerate(self.devices):
            out.append(f"{dev:<28}{_mib(self.simulated[k]):>14}{_mib(self.measured[k]):>14}"
                       f"{self.difference_pct[k]:>+8.1f}%")
        if math.isfinite(self.measured_step_us) or math.isfinite(self.simulated_step_us):
            line = (f"step time: simulated {format_duration_us(self.simulated_step_us)}, "
                    f"measured {format_duration_us(self.measured_step_us)}")
            if self.step_samples_us:
                line += f" (median wall time of {len(self.step_samples_us)} runs"
                if math.isfinite(self.step_difference_pct):
                    line += f"; {self.step_difference_pct:+.1f}%"
                line += ")"
            out.append(line)
            if self.extra.get("kind") == "CPU":
                out.append("  (logical CPU devices share this machine's cores: the measured "
                           "time shows no parallel speed-up)")
        if self.moved:
            first = next(iter(self.moved))
            out.append(f"{len(self.moved)} ops moved to their variable's device (TensorFlow "
                       f"colocates resource ops), e.g. {first!r}; simulated = applied placement")
        if self.misplaced:
            first, dev = next(iter(self.misplaced.items()))
            out.append(f"warning: {len(self.misplaced)} ops ran elsewhere than applied, e.g. "
                       f"{first!r} on {dev}")
        if self.max_output_diff is not None:
            out.append(f"outputs vs unplaced run: max abs difference {self.max_output_diff:.3g}")
        return out

    def to_dict(self) -> dict:
        return {"devices": list(self.devices), "method": self.method,
                "measured": [int(x) for x in self.measured],
                "simulated": [int(x) for x in self.simulated],
                "simulated_measured_times": [int(x) for x in self.simulated_measured_times],
                "difference_pct": [float(x) for x in self.difference_pct],
                "solution_peak": [int(x) for x in self.solution_peak],
                "moved": {k: list(v) for k, v in self.moved.items()},
                "misplaced": dict(self.misplaced), "max_output_diff": self.max_output_diff,
                "measured_step_us": _float_or_none(self.measured_step_us),
                "simulated_step_us": _float_or_none(self.simulated_step_us),
                "step_difference_pct": _float_or_none(self.step_difference_pct),
                "step_samples_us": [float(x) for x in self.step_samples_us],
                **self.extra}


def _float_or_none(value) -> float | None:
    """JSON has no NaN: a value not measured is null."""
    value = float(value)
    return value if math.isfinite(value) else None


def _mib(value) -> str:
    return f"{float(value) / 2**20:.3f} MiB"


def measure(model, solution, devices: int | None = None, *, batch_size: int = 1,
            training: bool = False, input_shapes=None, kind: str = "auto", runs: int = 3,
            timed_runs: int = 5, seed: int = 0, check_outputs: bool = True,
            gpu_memory_mb: int | None = None, trust_code: bool = False, loss=None,
            custom_objects=None) -> Measurement:
    """Runs `model` placed by `solution` on `devices` devices and measures per-device peaks.

    `model`: anything `regal.io.tensorflow.import_model` takes (`trust_code`, `loss`,
    `custom_objects` as there), or an ImportedStep;
    `solution`: a solution.json path or record; `devices`: default the solution's count;
    `runs` warm-up runs, then `timed_runs` timed ones (the step time is their median wall
    time; 0: not timed), then one traced run for the step statistics.
    """
    record = load_solution_record(solution)
    count = record["devices"]["count"] if devices is None else devices
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected an integer >= 1, got {devices!r}")
    if isinstance(timed_runs, bool) or not isinstance(timed_runs, (int, np.integer)) \
            or timed_runs < 0:
        raise ValueError(f"timed runs: expected an integer >= 0, got {timed_runs!r}")
    kind = configure_devices(count, kind, gpu_memory_mb)
    step = model if isinstance(model, ImportedStep) else import_step(
        model, batch_size=batch_size, training=training, input_shapes=input_shapes,
        trust_code=trust_code, loss=loss, custom_objects=custom_objects)
    placed = place(step, record, count)
    graph_def = placed_graph_def(placed, kind)
    config = _session_config(kind, count)
    names = [device_name(kind, k) for k in range(count)]
    if kind == "GPU":
        def reset():
            for k in range(count):
                tf.config.experimental.reset_memory_stats(f"GPU:{k}")

        def read():
            return [int(tf.config.experimental.get_memory_info(f"GPU:{k}")["peak"])
                    for k in range(count)]
        outputs, metadata, gpu_peaks, walls = _run(
            graph_def, step, config, seed=seed, runs=runs, timed_runs=timed_runs,
            before_measured=reset, after_measured=read)
        method = GPU_METHOD
    else:
        outputs, metadata, gpu_peaks, walls = _run(graph_def, step, config, seed=seed,
                                                   runs=runs, timed_runs=timed_runs)
        method = CPU_METHOD
    fetch_names = [f.name for f in step.fetches if isinstance(f, tf.Tensor)]
    replay = replay_step_stats(metadata, count, fetch_names, kind)
    measured = np.asarray(gpu_peaks if gpu_peaks is not None else replay["peak"],
                          dtype=np.int64)
    graph = step.graph
    sim = simulate(graph, placed.devices, placed.placement, placed.priority,
                   placed.transfer_priority)
    measured_cost = graph.compute_cost.copy()
    for v, name in enumerate(graph.names.tolist()):
        if name in replay["duration_us"]:
            measured_cost[v] = replay["duration_us"][name]
    measured_cost.setflags(write=False)
    # measured times are the op's times on the devices it ran on: no counts, no speeds
    timed_graph = graph._replace(compute_cost=measured_cost, op_flops=None, op_bytes=None)
    timed = simulate(timed_graph, replace(placed.devices, flops=None, memory_bandwidth=None),
                     placed.placement, placed.priority, placed.transfer_priority)
    # logical CPUs share one memory: a "copy" between them is a pointer handed over at
    # once, so the sender's buffer is freed when its consumers there finish, not when a
    # modelled link has carried it (a few µs per MiB, against the model's µs-scale ops)
    instant = simulate(timed_graph,
                       DeviceSpec(count, bandwidth=INSTANT_BANDWIDTH, latency=0.0),
                       placed.placement, placed.priority, placed.transfer_priority)
    misplaced = {}
    for v, name in enumerate(graph.names.tolist()):
        k = replay["device_of"].get(name)
        if k is not None and k != placed.placement[v]:
            misplaced[name] = device_name(kind, k)
    diff = None
    if check_outputs and outputs:
        reference, _, _, _ = _run(placed_graph_def(step), step,
                                  _session_config(kind, count), seed=seed, runs=1)
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                   if np.size(a) else 0.0 for a, b in zip(outputs, reference))
    return Measurement(names, method, measured, np.asarray(sim.peak, np.int64),
                       np.asarray(timed.peak, np.int64), placed.solution_peak, placed.moved,
                       misplaced, diff, extra={
                           "kind": kind, "persistent_measured": replay["persistent"],
                           "measured_without_scratch": replay["peak_without_scratch"],
                           "simulated_step_run_times_us": float(timed.makespan),
                           "simulated_run_times_instant_copies": [
                               int(x) for x in instant.peak],
                           "traced_step_us": _float_or_none(
                               _traced_span_us(metadata, count, kind))},
                       measured_step_us=float(np.median(walls)) if walls else math.nan,
                       simulated_step_us=float(sim.makespan),
                       step_samples_us=[float(w) for w in walls])
