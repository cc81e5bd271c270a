"""`DeviceSpec`: how many devices, how much memory each has, how fast they talk, and
(optionally) how fast each computes.

Units follow CostGraphDef: time in microseconds (µs), sizes in bytes, so bandwidth is
bytes/µs (1 GB/s = 1,000 bytes/µs).

Defaults model GPUs linked point to point by NVLink-class links:
  - bandwidth 100,000 bytes/µs = 100 GB/s per direction per device pair, between the
    50 GB/s of two bonded NVLink-2 links (V100 DGX-1) and the ~300 GB/s of an NVLink-3/4
    switch port (A100/H100), and well above PCIe 4.0 x16 (~25 GB/s);
  - latency 5 µs: a peer copy's launch plus link latency, as measured by the usual
    p2p latency tests (a few µs).

Device speeds (`flops` in FLOP/µs, `memory_bandwidth` in bytes/µs; 1 TFLOP/s = 10**6
FLOP/µs, 1 GB/s = 1,000 bytes/µs) are each None (every device the cost model's reference:
10 TFLOP/s, 500 GB/s) or one value per device. `memory_bandwidth` is a device's own memory
bandwidth, which bounds memory-bound ops; `bandwidth` is the link between two devices, which
times transfers. With either set, an op's time depends on its device (`regal.sim.speeds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from regal.graph import MAX_BYTES

__all__ = ["DeviceSpec", "DEFAULT_BANDWIDTH", "DEFAULT_LATENCY"]

DEFAULT_BANDWIDTH = 100_000.0  # bytes per µs (100 GB/s)
DEFAULT_LATENCY = 5.0          # µs


@dataclass(frozen=True)
class DeviceSpec:
    """`count` devices; `memory_limit` is None (unlimited), one int for all, or one per device.

    `bandwidth` (bytes/µs) and `latency` (µs) describe the links between devices.
    `flops` (FLOP/µs) and `memory_bandwidth` (bytes/µs, the device's own memory, not the
    link) are None (the cost model's reference device), one number for all or one per
    device; they are kept as one float per device. `presets` names the GPU presets they came
    from, for the record only (it compares and hashes as nothing).
    """

    count: int
    memory_limit: None | int | Sequence[int] = None
    bandwidth: float = DEFAULT_BANDWIDTH
    latency: float = DEFAULT_LATENCY
    flops: None | float | Sequence[float] = None
    memory_bandwidth: None | float | Sequence[float] = None
    presets: None | Sequence[str] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        count = self.count
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"count: expected an integer >= 1, got {count!r}")
        object.__setattr__(self, "count", int(count))
        for name in ("bandwidth", "latency"):
            value = getattr(self, name)
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: expected a number, got {getattr(self, name)!r}") from None
            object.__setattr__(self, name, value)
        if not (self.bandwidth > 0):  # also rejects NaN
            raise ValueError(f"bandwidth: expected a positive number of bytes/µs, "
                             f"got {self.bandwidth!r}")
        if not (0 <= self.latency < math.inf):
            raise ValueError(f"latency: expected a finite number of µs >= 0, got {self.latency!r}")
        for name, unit in (("flops", "FLOP/µs"), ("memory_bandwidth", "bytes/µs")):
            object.__setattr__(self, name, self._per_device(name, unit))
        if self.presets is not None:
            names = [self.presets] if isinstance(self.presets, str) else list(self.presets)
            if not all(isinstance(x, str) for x in names) or len(names) not in (1, self.count):
                raise ValueError(f"presets: expected one name or one per device "
                                 f"({self.count}), got {self.presets!r}")
            object.__setattr__(self, "presets", tuple(names))
        limit = self.memory_limit
        if limit is None:
            return
        if np.ndim(limit) == 0:
            limits = [limit] * self.count
        else:
            limits = list(limit)
            if len(limits) != self.count:
                raise ValueError(f"memory_limit: expected one limit per device ({self.count}), "
                                 f"got {len(limits)}")
        checked = []
        for k, value in enumerate(limits):
            try:
                whole = not isinstance(value, bool) and float(value).is_integer() and value >= 0
            except (TypeError, ValueError):
                whole = False
            if not whole or value > MAX_BYTES:  # the simulator's int64 sums stay exact
                raise ValueError(f"memory_limit: device {k}: expected a whole number of bytes "
                                 f"in 0..2**62, got {value!r}")
            checked.append(int(value))
        object.__setattr__(self, "memory_limit", tuple(checked))

    def _per_device(self, name: str, unit: str) -> tuple[float, ...] | None:
        """A speed field as one finite float > 0 per device, or None."""
        value = getattr(self, name)
        if value is None:
            return None
        values = [value] * self.count if np.ndim(value) == 0 else list(value)
        if len(values) != self.count:
            raise ValueError(f"{name}: expected one value per device ({self.count}), "
                             f"got {len(values)}")
        checked = []
        for k, x in enumerate(values):
            try:
                number = float(x)
            except (TypeError, ValueError):
                number = math.nan
            if isinstance(x, bool) or not (0 < number < math.inf):
                raise ValueError(f"{name}: device {k}: expected a finite number of {unit} > 0, "
                                 f"got {x!r}")
            checked.append(number)
        return tuple(checked)

    @property
    def has_speeds(self) -> bool:
        """Whether an op's time depends on its device (some speed is set)."""
        return self.flops is not None or self.memory_bandwidth is not None

    def speed_key(self) -> tuple:
        """What, beyond the count and memory limits, changes the simulator's answers: the
        links and the speeds (cache keys use it)."""
        return (self.bandwidth, self.latency, self.flops, self.memory_bandwidth)

    def with_count(self, count: int, memory_limit=None) -> "DeviceSpec":
        """The same links on `count` devices: per-device speeds kept for the first devices,
        extra devices as slow as the slowest (as `regal.fit_search` gives them the smallest
        memory limit)."""
        def resized(values):
            if values is None:
                return None
            return tuple(values[:count]) + (min(values),) * max(0, count - len(values))
        return replace(self, count=count, memory_limit=memory_limit,
                       flops=resized(self.flops),
                       memory_bandwidth=resized(self.memory_bandwidth),
                       presets=self.presets if self.presets is not None
                       and len(self.presets) == 1 else None)

    @property
    def limits(self) -> np.ndarray | None:
        """Per-device limits as int64, or None when unlimited."""
        if self.memory_limit is None:
            return None
        return np.asarray(self.memory_limit, dtype=np.int64)

    def transfer_time(self, size) -> np.ndarray:
        """latency + size / bandwidth, in float64 (SIM_RULES 5)."""
        return self.latency + np.asarray(size, dtype=np.float64) / self.bandwidth
