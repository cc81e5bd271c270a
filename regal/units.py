"""Human units for what the command line prints: bytes in KiB/MiB/GiB, times in µs/ms/s."""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_duration_us", "format_change", "parse_bytes",
           "parse_duration_us", "duration_unit"]


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


def format_change(value: float, reference: float) -> str:
    """The change from `reference` to `value` in percent: '+119.6%', '-45.0%'; '' when the
    reference is 0 (no ratio exists) or either figure is not finite."""
    value, reference = float(value), float(reference)
    if not (math.isfinite(value) and math.isfinite(reference)) or reference == 0:
        return ""
    return f"{(value - reference) / abs(reference) * 100:+.1f}%"


def duration_unit(max_us: float) -> tuple[str, float]:
    """The unit `format_duration_us` would use for `max_us`, and its size in µs (for an axis)."""
    max_us = abs(float(max_us))
    if max_us >= 1e6:
        return "s", 1e6
    if max_us >= 1e3:
        return "ms", 1e3
    return "us", 1.0


_BYTE_SCALE = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_TIME_SCALE = {"us": 1.0, "ms": 1e3, "s": 1e6}


def _parse(text: str, scales: dict, example: str) -> float:
    number, _, unit = str(text).strip().partition(" ")
    try:
        return float(number.replace(",", "")) * scales[unit.strip()]
    except (KeyError, ValueError):
        raise ValueError(f"expected a figure as printed (e.g. {example}), got {text!r}") from None


def parse_bytes(text: str) -> float:
    """Inverse of `format_bytes` up to its rounding: '1.50 KiB' -> 1536.0 (for scripts and
    tests that read what the command line printed)."""
    return _parse(text, _BYTE_SCALE, "1.50 KiB")


def parse_duration_us(text: str) -> float:
    """Inverse of `format_duration_us` up to its rounding: '3.66 ms' -> 3660.0."""
    return _parse(text, _TIME_SCALE, "3.66 ms")
