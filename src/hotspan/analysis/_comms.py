"""Which spans are collectives, and of which process group: one rule for the across-ranks
analysis (rank_kernel.py) and ``hotspan hang`` (hang.py). Light: no numpy, no pyarrow."""

from __future__ import annotations

__all__ = ["group_of", "is_collective"]


def is_collective(category: str | None, want: str = "comms") -> bool:
    """Whether a span of ``category`` is a collective: the category's last part is ``want``
    (``train/comms``), or ``want:GROUP`` (``comms:world``: the torch.distributed
    instrumentation's collectives, marked with their process group)."""
    if category is None:
        return False
    last = category.rpartition("/")[2]
    return last == want or last.startswith(want + ":")


def group_of(category: str | None, want: str = "comms") -> str | None:
    """The process group a collective's category names (``comms:GROUP``), else None."""
    if category is None:
        return None
    last = category.rpartition("/")[2]
    return last[len(want) + 1 :] if last.startswith(want + ":") else None
