"""Numbers for people: the one formatter of durations, byte counts, counts and rates that
the CLI, the live log and the reports share (so a figure reads the same everywhere)."""

from __future__ import annotations

import math

__all__ = ["human_bytes", "human_count", "human_ns", "human_rate"]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def human_ns(ns: float | None) -> str:
    """A duration for people: ``1.23 ms``, ``850 ns``; ``-`` for a missing value."""
    if ns is None or _missing(ns):
        return "-"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{sign}{ns / scale:.2f} {unit}"
    return f"{sign}{ns:.0f} ns"


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``1.50 KiB``; ``None`` -> ``""``."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


def human_count(value: float | int | None) -> str:
    """``1234567`` -> ``1,234,567``; a fractional float keeps one decimal; ``-`` when missing."""
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{int(value):,}" if value.is_integer() else f"{value:,.1f}"
    return f"{value:,}"


def human_rate(value: float | None, unit: str = "/s") -> str:
    """``2760.0`` -> ``2.76 k/s``; ``-`` when missing."""
    if value is None or _missing(value):
        return "-"
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.1f} {unit}"
