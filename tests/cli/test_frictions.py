"""Small things a first user of the command line met, one test each."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import hotspan
from hotspan.cli import main
from hotspan.cli._commands import COMMANDS


@pytest.mark.parametrize("command", [m.__name__.rsplit(".", 1)[1].lstrip("_") for m in COMMANDS])
def test_help_prints_percent_signs_once(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "%%" not in out
    if command == "stats":
        assert "adds up to 100%;" in out
    if command == "compare":
        assert "95% bootstrap" in out and "5%)" in out


def test_demo_piped_keeps_its_first_line_whole(tmp_path):
    out = tmp_path / "a-rather-long-directory-name-for-the-demo-output" / "hotspan-demo.parquet"
    out.parent.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "hotspan", "demo", "--steps", "2", "-o", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    )
    first = result.stdout.splitlines()[0]
    assert len(first) > 80 and first.startswith("hotspan demo: ") and first.endswith(f"-> {out}")


def test_names_at_80_columns_lose_whole_words(tmp_path, capsys, monkeypatch):
    categories = ("training/optimizer_state/compute", "training/optimizer_state/comms")
    for category in categories:
        for _ in range(3):
            with hotspan.span("communicate_gradients", category):
                pass
    path = hotspan.export(hotspan.drain(), tmp_path / "t.parquet")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["stats", str(path), "--all"]) == 0
    shown = [
        line.split()[0]
        for line in capsys.readouterr().out.splitlines()
        if "…" in line.split(" ")[0]
    ]
    assert shown, "nothing had to be cut at 80 columns: the test lost its point"
    for cut in shown:
        head, tail = cut.split("…")
        original = next(c for c in categories if c.startswith(head) and c.endswith(tail))
        # Cut between words: the tail starts a word (or a separator); the start is kept
        # (cut inside its word only where no whole one fits beside the tail).
        assert head and tail, cut
        assert tail[0] in "/_" or original[len(original) - len(tail) - 1] in "/_", cut
    assert len(set(shown)) == len(shown)  # still told apart


def test_the_room_left_is_shared_between_the_key_columns():
    """At 80 columns the first key column (a long category path) used to take all the room
    left, squeezing the names to 10 characters."""
    from hotspan.cli._tables import fitted_table

    keys = [
        ("category", ["training/optimizer_state/compute"]),
        ("name", ["train_step_with_gradient_accumulation"]),
    ]
    values = [("count", ["3"]), ("total", ["12.64 us"])]
    table, _left_out = fitted_table(keys, values, 60)
    category, name = (column.width for column in table.columns[:2])
    assert (
        category + name == 60 - len("count") - len("12.64 us") - 2 * 3
    )  # all the room the numbers leave
    assert abs((32 - category) - (37 - name)) <= 1  # each short of its natural width by as much
