"""Device speeds: how long an op takes on each device, and named presets for common GPUs.

The cost model (`regal.io.tensorflow.costs`) is a roofline: an op that is not free
bookkeeping takes

    LAUNCH_US + max(flops / F, bytes / B)  µs

where `flops` is its FLOP estimate, `bytes` the bytes of its inputs and outputs, `F` the
device's sustained compute speed (FLOP/µs) and `B` its sustained memory bandwidth (bytes/µs).
The importer evaluates it once with the reference device, F = FLOPS_PER_US (10 TFLOP/s) and
B = BYTES_PER_US (500 GB/s), into the graph's `compute_cost`, and keeps `op_flops` and
`op_bytes` beside it. A `DeviceSpec` with speeds (`flops`, `memory_bandwidth`; None is the
reference) gives each op one duration per device, `op_durations`; without speeds every op
takes its `compute_cost` on every device, as before speeds existed. An op whose
`compute_cost` is 0 (bookkeeping: constants, handles, shapes, forwarding) takes 0 on every
device. Careful: `memory_bandwidth` is a device's own memory, `DeviceSpec.bandwidth` the link
between two devices.

A graph without counts (a CostGraphDef, a synthetic graph, a graph file written before the
counts were kept, a `--run` graph of measured times) cannot be given speeds: `op_durations`
raises ValueError saying so, rather than scaling times it cannot split into compute and
memory parts.

Presets: public datasheet peaks (FP32 on CUDA cores, not tensor cores; memory bandwidth),
scaled to the model's sustained speeds by one convention: the reference speeds are those of
a V100 SXM2 at realistic efficiency, so a preset's sustained speed is the reference times its
peak over the V100's peak (compute 10 / 15.7 = 64% of peak, memory 500 / 900 = 56%). The V100
preset therefore is the default exactly, and ratios between presets are ratios of datasheet
peaks.

| preset     | GPU                    | FP32 peak TFLOP/s | memory GB/s | memory |
| ---------- | ---------------------- | ----------------- | ----------- | ------ |
| V100       | Tesla V100 SXM2        | 15.7              | 900         | 16/32 GB |
| T4         | Tesla T4               | 8.1               | 320         | 16 GB  |
| L4         | L4                     | 30.3              | 300         | 24 GB  |
| A100-40GB  | A100 SXM4 40GB         | 19.5              | 1,555       | 40 GB  |
| A100-80GB  | A100 SXM4 80GB         | 19.5              | 2,039       | 80 GB  |
| H100-SXM   | H100 SXM5              | 67                | 3,350       | 80 GB  |
| H100-PCIE  | H100 PCIe              | 51                | 2,000       | 80 GB  |
| H200       | H200 SXM               | 67                | 4,800       | 141 GB |
| RTX3090    | GeForce RTX 3090       | 35.6              | 936         | 24 GB  |
| RTX4090    | GeForce RTX 4090       | 82.6              | 1,008       | 24 GB  |

A preset sets speeds only, never a memory limit (give `--memory-limit` for that). The model
counts FP32 FLOPs; for mixed precision on tensor cores give `--device-flops` yourself.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FLOPS_PER_US", "BYTES_PER_US", "LAUNCH_US", "PRESETS", "Preset", "preset",
           "op_durations", "check_speeds", "fastest_device", "describe_speed",
           "positive_speed", "TFLOPS", "GBPS"]

# The reference device of the cost model (V100-class at realistic fp32 efficiency).
FLOPS_PER_US = 1.0e7   # 10 TFLOP/s sustained
BYTES_PER_US = 5.0e5   # 500 GB/s effective
LAUNCH_US = 1.0        # per-op launch overhead

TFLOPS = 1.0e6  # FLOP/µs in one TFLOP/s
GBPS = 1.0e3    # bytes/µs in one GB/s

_V100_TFLOPS = 15.7
_V100_GBPS = 900.0


class Preset:
    """One GPU's datasheet peaks and the sustained speeds the model uses for it."""

    def __init__(self, name: str, gpu: str, peak_tflops: float, peak_gbps: float,
                 memory_gb: str):
        self.name, self.gpu, self.memory_gb = name, gpu, memory_gb
        self.peak_tflops, self.peak_gbps = peak_tflops, peak_gbps

    @property
    def flops(self) -> float:
        """Sustained FLOP/µs: the reference times this GPU's FP32 peak over the V100's."""
        return FLOPS_PER_US * (self.peak_tflops / _V100_TFLOPS)

    @property
    def memory_bandwidth(self) -> float:
        """Sustained bytes/µs: the reference times this GPU's memory peak over the V100's."""
        return BYTES_PER_US * (self.peak_gbps / _V100_GBPS)

    def __repr__(self) -> str:
        return f"Preset({self.name!r}, {self.peak_tflops} TFLOP/s, {self.peak_gbps} GB/s)"


PRESETS = {p.name: p for p in (
    Preset("V100", "Tesla V100 SXM2", 15.7, 900.0, "16/32"),
    Preset("T4", "Tesla T4", 8.1, 320.0, "16"),
    Preset("L4", "L4", 30.3, 300.0, "24"),
    Preset("A100-40GB", "A100 SXM4 40GB", 19.5, 1555.0, "40"),
    Preset("A100-80GB", "A100 SXM4 80GB", 19.5, 2039.0, "80"),
    Preset("H100-SXM", "H100 SXM5", 67.0, 3350.0, "80"),
    Preset("H100-PCIE", "H100 PCIe", 51.0, 2000.0, "80"),
    Preset("H200", "H200 SXM", 67.0, 4800.0, "141"),
    Preset("RTX3090", "GeForce RTX 3090", 35.6, 936.0, "24"),
    Preset("RTX4090", "GeForce RTX 4090", 82.6, 1008.0, "24"),
)}


def _folded(name: str) -> str:
    return "".join(ch for ch in str(name).upper() if ch.isalnum())


_BY_FOLDED = {_folded(name): p for name, p in PRESETS.items()}


def preset(name: str) -> Preset:
    """The preset called `name` (case, spaces, '-' and '_' ignored: 'h100 sxm' is H100-SXM);
    ValueError listing the known names otherwise."""
    found = _BY_FOLDED.get(_folded(name))
    if found is None:
        raise ValueError(f"unknown device preset {name!r}; known: {', '.join(PRESETS)}")
    return found


def check_speeds(graph, devices) -> None:
    """ValueError unless `graph` can be timed with `devices`' speeds (it has FLOP and byte
    counts, or the devices have no speeds)."""
    if devices.has_speeds and (graph.op_flops is None or graph.op_bytes is None):
        raise ValueError(
            "device speeds need each op's FLOP and byte counts, and this graph has none (a "
            "CostGraphDef, a synthetic or measured graph, or a graph file written before "
            "the counts were kept); import it from the TensorFlow model again (regal import "
            "MODEL --out FILE.npz, or give the model itself) or drop the speeds")


def op_durations(graph, devices) -> np.ndarray | None:
    """[d, n] float64: op v's time on device p, LAUNCH_US + max(op_flops[v] / flops[p],
    op_bytes[v] / memory_bandwidth[p]) (0 where compute_cost[v] is 0); None when the devices
    have no speeds (every op then takes its compute_cost everywhere, SIM_RULES 3)."""
    if not devices.has_speeds:
        return None
    check_speeds(graph, devices)
    d = devices.count
    flops = np.full(d, FLOPS_PER_US) if devices.flops is None else \
        np.asarray(devices.flops, np.float64)
    bandwidth = np.full(d, BYTES_PER_US) if devices.memory_bandwidth is None else \
        np.asarray(devices.memory_bandwidth, np.float64)
    op_flops = np.asarray(graph.op_flops, np.float64)
    op_bytes = np.asarray(graph.op_bytes, np.float64)
    durations = LAUNCH_US + np.maximum(op_flops[None, :] / flops[:, None],
                                       op_bytes[None, :] / bandwidth[:, None])
    durations[:, np.asarray(graph.compute_cost) == 0] = 0.0
    if not np.isfinite(durations).all() or not durations.sum() < 2.0**62 * d:
        raise ValueError("device speeds: an op's time on some device is not finite; "
                         "check --device-flops and --device-bandwidth")
    return durations


def describe_speed(flops: float | None, memory_bandwidth: float | None) -> str:
    """'12.5 TFLOP/s, 900 GB/s' for a line of output (None: the reference)."""
    f = FLOPS_PER_US if flops is None else flops
    b = BYTES_PER_US if memory_bandwidth is None else memory_bandwidth
    return f"{f / TFLOPS:.4g} TFLOP/s, {b / GBPS:.4g} GB/s"


def fastest_device(graph, devices) -> int:
    """The device on which the whole graph runs soonest alone: the least total op time
    (ties: the lower index); 0 when the devices have no speeds (all equal)."""
    durations = op_durations(graph, devices)
    if durations is None:
        return 0
    return int(np.argmin(durations.sum(axis=1)))


def positive_speed(name: str, value) -> float:
    """A finite number > 0, or ValueError naming the field."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (0 < number < math.inf):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return number
