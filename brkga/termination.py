"""The termination criterion: a fixed number of fitness evaluations."""

from __future__ import annotations


class Budget:
    """Counts fitness evaluations and hands out at most `limit` of them."""

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.used = 0

    @property
    def left(self) -> int:
        return self.limit - self.used

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    def grant(self, wanted: int) -> int:
        """Reserves up to `wanted` evaluations and returns how many were granted."""
        granted = max(0, min(int(wanted), self.left))
        self.used += granted
        return granted
