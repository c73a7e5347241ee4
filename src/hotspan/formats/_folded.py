"""Collapsed stacks (``.folded``): one line a stack of frames and its self time in ns,
``step [train];forward [train/compute] 1671347``, as Brendan Gregg's ``flamegraph.pl``,
inferno (``inferno-flamegraph``) and speedscope read them.

The stacks are those of the flame graph (:mod:`hotspan.analysis.flamegraph`, code in ``hotspan._flame``), merged over
ranks and threads. The format holds no spans (only their self times summed by stack): it is
written, never loaded back.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .._flame import folded_stacks
from ._base import Exporter, TraceFileError

__all__ = ["FoldedExporter"]


class FoldedExporter(Exporter):
    keeps_metadata = False
    readable = False

    def _write(self, table: pa.Table, path: Path) -> None:
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            for line in folded_stacks(table):
                out.write(line)
                out.write("\n")

    def _read(self, path: Path) -> pa.Table:
        raise TraceFileError(
            path,
            "collapsed stacks hold no spans (self time summed by stack): "
            "a .folded file is written, never loaded; load the trace it came from",
        )
