"""enable / disable / enabled, and HOTSPAN=0 at start."""

from __future__ import annotations

import pytest

import hotspan
from _util import run_python

pytestmark = pytest.mark.usefixtures("fresh")


def test_disable_stops_recording_and_enable_resumes():
    s = hotspan.span("x")
    assert hotspan.enabled() is True
    hotspan.disable()
    assert hotspan.enabled() is False
    with s:
        pass
    hotspan.instant("i")
    assert hotspan.drain().num_rows == 0
    hotspan.enable()
    with s:
        pass
    assert hotspan.drain().num_rows == 1


def test_span_open_across_disable_still_closes():
    s = hotspan.span("across")
    with s:
        hotspan.disable()
    hotspan.enable()
    # the frame opened while enabled was closed: the stack is balanced again
    with hotspan.span("after"):
        pass
    rs = hotspan.drain().to_pylist()
    assert [r["name"] for r in rs] == ["across", "after"]
    assert rs[1]["depth"] == 0


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_env_hotspan_0_starts_disabled(value):
    proc = run_python(
        """
        import hotspan
        print(hotspan.enabled())
        with hotspan.span("x"):
            pass
        print(hotspan.drain().num_rows)
        hotspan.enable()
        with hotspan.span("x"):
            pass
        print(hotspan.drain().num_rows)
        """,
        env={"HOTSPAN": value},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "0", "1"]


def test_env_unset_starts_enabled():
    proc = run_python("import hotspan; print(hotspan.enabled())", env={"HOTSPAN": "1"})
    assert proc.stdout.strip() == "True"
