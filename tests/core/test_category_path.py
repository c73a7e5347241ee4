"""A category equal to its parent's does not repeat in the path (recursion stays one row)."""

from __future__ import annotations

import hotspan


def test_recursion_keeps_one_category(fresh):
    @hotspan.traced(category="solve")
    def solve(n):
        return 1 if n == 0 else solve(n - 1) + 1

    with hotspan.span("outer", "run"):
        solve(4)
    solve(2)
    with hotspan.span("mix", "run"):
        with hotspan.span("inner", "io"):
            with hotspan.span("again", "io"):
                with hotspan.span("other", "solve"):
                    pass
    rows = hotspan.drain().to_pylist()
    paths = {r["category"] for r in rows if r["name"].endswith("solve")}
    assert paths == {"run/solve", "solve"}
    by_name = {r["name"]: r["category"] for r in rows if not r["name"].endswith("solve")}
    assert by_name == {
        "outer": "run",
        "mix": "run",
        "inner": "run/io",
        "again": "run/io",
        "other": "run/io/solve",
    }
    solve(6)
    deep = hotspan.stats(hotspan.drain())  # seven nested calls: one stats row
    assert deep.num_rows == 1 and deep.column("count").to_pylist() == [7]
