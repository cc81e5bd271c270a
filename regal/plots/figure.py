"""What every figure shares: matplotlib loaded lazily on the Agg backend (no display), saving
exactly the path asked for, whole or not at all, and a byte unit for an axis."""

from __future__ import annotations

__all__ = ["MAX_GROUPS", "SMALL_GRAPH_OPS", "MAX_LINK_LANES"]

MAX_GROUPS = 36        # colours a reader can still tell apart, and a legend that fits
SMALL_GRAPH_OPS = 60   # up to this many ops, one labelled bar per op
MAX_LINK_LANES = 12    # beyond, copies are drawn per destination device, not per link
_LABEL_CHARS = 60      # legend labels are shortened beyond this
_FORMATS = ("png", "pdf", "svg")


def _save(fig, path) -> None:
    """Writes exactly `path` (matplotlib would add '.png' to a name without a suffix, and
    the caller would then name a file that does not exist): the format follows a known
    suffix, else PNG."""
    from pathlib import Path

    from regal.files import replacing

    suffix = Path(path).suffix.lower().lstrip(".")
    with replacing(path) as tmp:  # a failed write leaves the previous file whole
        fig.savefig(tmp, dpi=110, format=suffix if suffix in _FORMATS else "png")


def _figure_modules():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _unit(max_bytes: float) -> tuple[str, float]:
    for name, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if max_bytes >= scale:
            return name, float(scale)
    return "bytes", 1.0
