"""Labels cut to a width lose whole words from their middle, never half a word."""

from __future__ import annotations

import pytest

from hotspan.report._gantt import fit_label


@pytest.mark.parametrize(
    "label, width, fitted",
    [
        ("train/compute", 10, "…/compute"),  # was "trai…mpute"
        ("train/comms", 10, "…/comms"),  # and still apart from it
        ("r0 worker-1 (123456)", 14, "r0 … (123456)"),
        ("training/optimizer_state/compute", 17, "training…/compute"),
        ("compute_forward_activations", 12, "…activations"),
        ("short", 10, "short"),
    ],
)
def test_cut_between_words(label, width, fitted):
    assert fit_label(label, width) == fitted
    assert len(fitted) <= width


def test_a_word_longer_than_the_width_is_cut_inside():
    assert fit_label("averyveryverylongfunctionname", 12) == "avery…onname"
    assert fit_label("abc", 1) == "a"
