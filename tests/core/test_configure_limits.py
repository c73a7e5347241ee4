"""configure() refuses what it cannot honour, naming the range; HOTSPAN must be a known word."""

from __future__ import annotations

import pytest

import hotspan


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(capacity=2**30), ["capacity", "2..16,777,216"]),
        (dict(capacity=1), ["capacity", "2..16,777,216"]),
        (dict(rank=2**31), ["rank", "0..2147483647"]),
        (dict(rank=-1), ["rank", "0..2147483647"]),
    ],
)
def test_out_of_range_values_are_refused_with_the_range(kwargs, words):
    before = hotspan.rank()
    with pytest.raises(ValueError) as info:
        hotspan.configure(**kwargs)
    assert all(word in str(info.value) for word in words)
    assert hotspan.rank() == before  # nothing was applied


def test_the_ends_of_the_ranges_are_taken(fresh):
    hotspan.configure(rank=2**31 - 1)  # and 70000, which was once stored as 4464
    try:
        with hotspan.span("x"):
            pass
        assert hotspan.drain().column("rank").to_pylist() == [2**31 - 1]
        hotspan.configure(rank=70000)
        with hotspan.span("x"):
            pass
        assert hotspan.drain().column("rank").to_pylist() == [70000]
    finally:
        hotspan.configure(rank=0)


@pytest.mark.parametrize(
    "value, says", [("bogus", True), ("", False), ("0", False), ("off", False), ("YES", False)]
)
def test_hotspan_env_value_not_understood_is_said(value, says):
    from _util import run_python

    proc = run_python("import hotspan; print(hotspan.enabled())", env={"HOTSPAN": value})
    assert proc.returncode == 0, proc.stderr
    assert ("HOTSPAN=" in proc.stderr) == says, proc.stderr
    assert proc.stdout.strip() == ("False" if value in ("0", "off") else "True")
