"""``hotspan.instrument("mlx")``: ``mx.eval``, ``mx.async_eval`` and ``mx.synchronize`` as
spans of category ``mlx``, named ``eval``, ``async_eval`` and ``synchronize``.

MLX builds graphs lazily: ``y = a @ b`` only records the work, which runs inside
``mx.eval`` (or on MLX's stream after ``mx.async_eval``, until ``mx.synchronize``). These
three calls are where the time goes, so recording them shows it without editing the
program.
"""

from __future__ import annotations

from typing import Any

from .._api import traced

__all__ = ["CATEGORY", "FUNCTIONS", "install", "uninstall"]

CATEGORY = "mlx"
FUNCTIONS = ("eval", "async_eval", "synchronize")

# name -> the function found in mlx.core at install (put back by uninstall)
_originals: dict[str, Any] = {}


def install() -> None:
    import mlx.core as mx

    for fname in FUNCTIONS:
        original = getattr(mx, fname, None)
        if original is None:  # an older MLX without async_eval
            continue
        # @traced's C wrapper: the span costs what any traced call costs, with no Python
        # frame of ours between the caller and MLX.
        wrapper = traced(fname, CATEGORY)(original)
        try:
            wrapper._hotspan_original = original  # hotspan.sync.mlx() calls this directly
        except AttributeError:
            pass
        _originals[fname] = original
        setattr(mx, fname, wrapper)


def uninstall() -> None:
    import mlx.core as mx

    for fname, original in _originals.items():
        setattr(mx, fname, original)
    _originals.clear()
