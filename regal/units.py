"""Human units for what the command line prints: bytes in KiB/MiB/GiB, times in µs/ms/s."""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_duration_us"]


def format_bytes(value: float) -> str:
    """1536 -> '1.50 KiB'; below 1 KiB the exact byte count ('512 B')."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{int(value)} B"


def format_duration_us(value: float) -> str:
    """A duration given in microseconds: '850.0 us', '12.35 ms', '3.21 s'."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f} s"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.2f} ms"
    return f"{value:.1f} us"
