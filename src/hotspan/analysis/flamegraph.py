"""Self time by stack: the tree a flame graph (or icicle) draws, from the span tree.

    tree = flame_tree(table)                  # merged: one tree over every rank and thread
    tree = flame_tree(table, per="rank")      # one subtree per rank under the root
    lines = folded_stacks(table)              # ["step [train];forward [train/compute] 1234", ...]

The analysis' name for the tree, whose code lives below the formats (``hotspan._flame``):
the folded and speedscope exports draw the same stacks, and a format never imports an
analysis (``tests/test_layout.py``'s floors).
"""

from __future__ import annotations

from .._flame import PER, FlameTree, flame_tree, folded_stacks, frame_label, span_self_ns

__all__ = ["PER", "FlameTree", "flame_tree", "folded_stacks", "frame_label", "span_self_ns"]
