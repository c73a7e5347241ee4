"""The questions the analysis layer answers, as frozen objects that travel whole from the
library, the CLI and ``serve`` down to the kernels and the engines: :class:`StatsRequest`
(``stats``: the keys and the filter) and :class:`CompareOptions` (``compare``: the keys,
the thresholds of the verdict, the bootstrap, the reference span, the shift rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .filters import SpanFilter

__all__ = ["CompareOptions", "StatsRequest", "keys_of"]


def keys_of(by: str | Sequence[str]) -> tuple[str, ...]:
    """``by`` (a column or several) as a tuple of column names."""
    return (by,) if isinstance(by, str) else tuple(by)


@dataclass(frozen=True)
class StatsRequest:
    """``stats`` of the spans after ``filter``, per group of ``by`` (``None``: the spans'
    default keys, ``category, name`` and ``device`` when they have device rows)."""

    by: tuple[str, ...] | None = None
    filter: SpanFilter = field(default_factory=SpanFilter)

    def __post_init__(self) -> None:
        if self.by is not None:
            object.__setattr__(self, "by", keys_of(self.by))

    @classmethod
    def of(
        cls,
        by: str | Sequence[str] | None = None,
        span_filter: SpanFilter | Mapping[str, Any] | None = None,
    ) -> StatsRequest:
        return cls(None if by is None else keys_of(by), SpanFilter.of(span_filter))

    def keys(self, default: Sequence[str]) -> tuple[str, ...]:
        """The keys asked for, or ``default`` (the spans' own) when none were."""
        return tuple(default) if self.by is None else self.by


@dataclass(frozen=True)
class CompareOptions:
    """How ``compare`` judges two runs (see :func:`hotspan.analysis.comparison.compare`):
    per group of ``by``; ``slower``/``faster`` past ``threshold`` at ``alpha``, with a
    bootstrap interval at ``confidence`` from ``resamples`` draws seeded by ``seed``; ``few``
    below ``min_count`` spans a side; ``normalize``: a reference span's name; ``shift``:
    judge against the machine's drift or a shared shift (False: raw times)."""

    by: tuple[str, ...] = ("category", "name")
    threshold: float = 0.05
    min_count: int = 1
    alpha: float = 0.05
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    normalize: str | None = None
    shift: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", keys_of(self.by))
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), not {self.alpha}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), not {self.confidence}")
        if self.resamples < 100:
            raise ValueError(f"resamples must be at least 100, not {self.resamples}")
