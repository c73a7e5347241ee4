"""The trace commands of the ``hotspan`` CLI: stats, export, gantt, compare, run; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

import hotspan
from hotspan.formats import export, load
from hotspan.analysis import STAT_COLUMNS


def hotspan_cli(*args, cwd=None):
    """The real command, in a fresh interpreter (exit status, streams, console script path)."""
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys, monkeypatch):
    """``hotspan.cli.main`` in this process: the same code path as the command, minus the
    interpreter start-up that would make these tests slow."""
    from hotspan.cli import main

    def run(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def record(scale: float = 1.0, rank: int = 0) -> pa.Table:
    """A small real trace: steps holding compute (with an error once) and comms with byte counts."""
    hotspan.configure(rank=rank)
    hotspan.drain()
    for i in range(6):
        with hotspan.span("step", "sync"):
            with hotspan.span("compute", "compute"):
                sum(range(int(3000 * scale)))
            with hotspan.span("send", "comms", arg=1 << 20):
                sum(range(1000))
            if i == 2:
                try:
                    with hotspan.span("flaky", "compute"):
                        raise ValueError
                except ValueError:
                    pass
    table = hotspan.drain()
    hotspan.configure(rank=0)
    return table


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    table = record()
    paths = {}
    for ext in (".parquet", ".json", ".pftrace", ".arrow", ".csv"):
        paths[ext] = root / f"trace{ext}"
        export(table, paths[ext])
    paths["rank1"] = root / "rank1.parquet"
    export(record(rank=1), paths["rank1"])
    return table, paths


@pytest.mark.parametrize("ext", [".parquet", ".json", ".pftrace", ".arrow", ".csv"])
def test_stats_json_from_every_format_matches_the_library(cli, traces, ext):
    table, paths = traces
    proc = cli("stats", paths[ext], "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {(r["category"], r["name"]): r for r in json.loads(proc.stdout)}
    expected = {(r["category"], r["name"]): r for r in hotspan.stats(load(paths[ext])).to_pylist()}
    assert (
        rows.keys()
        == expected.keys()
        == {
            ("sync", "step"),
            ("sync/compute", "compute"),
            ("sync/comms", "send"),
            ("sync/compute", "flaky"),
        }
    )
    assert rows[("sync", "step")]["count"] == 6 and rows[("sync/compute", "flaky")]["errors"] == 1
    assert rows[("sync/comms", "send")]["arg_sum"] == 6 << 20
    for key, row in expected.items():
        assert (
            rows[key]["p90_ns"] == pytest.approx(row["p90_ns"])
            and rows[key]["self_ns"] == row["self_ns"]
        )


def test_stats_table_sort_top_by_and_several_traces(cli, traces):
    _, paths = traces
    proc = cli(
        "stats",
        paths[".parquet"],
        paths["rank1"],
        "--by",
        "rank,name",
        "--sort",
        "count",
        "--top",
        "3",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 3 and set(rows[0]) == {"rank", "name", *STAT_COLUMNS}
    assert [r["count"] for r in rows] == sorted((r["count"] for r in rows), reverse=True)
    proc = cli("stats", paths[".parquet"], paths["rank1"], "--by", "rank")
    assert proc.returncode == 0, proc.stderr
    assert "p99" in proc.stdout and "self %" in proc.stdout and "phases" in proc.stdout
    assert "sync/compute" in proc.stdout and "mean" in proc.stdout  # the mean over the two ranks


def test_stats_csv_makes_directories_and_writes_the_rows(cli, traces, tmp_path):
    _, paths = traces
    target = tmp_path / "a" / "b" / "stats.csv"
    proc = cli("stats", paths[".parquet"], "--csv", target)
    assert proc.returncode == 0, proc.stderr
    written = pcsv.read_csv(target)
    assert written.column_names == ["category", "name", *STAT_COLUMNS]
    assert sorted(written.column("count").to_pylist()) == [1, 6, 6, 6]
    assert [p.name for p in target.parent.iterdir()] == ["stats.csv"]  # no temporary left


def test_export_converts_between_formats(cli, traces, tmp_path):
    table, paths = traces
    out = tmp_path / "new" / "t.json.gz"
    proc = cli("export", paths[".pftrace"], out)
    assert proc.returncode == 0, proc.stderr
    back = load(out)
    assert back.num_rows == table.num_rows
    assert sorted(back.column("duration_ns").to_pylist()) == sorted(
        table.column("duration_ns").to_pylist()
    )


def test_gantt_whole_trace_and_per_step(cli, traces):
    table, paths = traces
    proc = cli("gantt", paths[".parquet"], "--width", "60")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    lane = next(line for line in lines if line.startswith("r0 "))
    assert lane.count("│") == 2 and len(lane.split("│")[1]) == 60
    assert "!" in lane  # the flaky span ended with an error
    assert "sync/compute" in proc.stdout and "error" in proc.stdout  # the legend
    proc = cli("gantt", paths[".parquet"], "--step", "step", "--width", "40")
    assert proc.returncode == 0, proc.stderr
    steps = [r for r in table.to_pylist() if r["name"] == "step"]
    for k, _row in enumerate(sorted(steps, key=lambda r: r["start_ns"])):
        assert f"step {k + 1}/6: " in proc.stdout
    assert proc.stdout.count("└") == 6


def test_compare_exit_status_verdicts_and_environment_warning(cli, tmp_path):
    # Three recordings of each, alternating: the machine's load drifting between two runs
    # must not decide a verdict (compare's own tests cover noise).
    pairs = [(record(scale=1.0), record(scale=6.0)) for _ in range(3)]
    base = pa.concat_tables([b for b, _ in pairs])
    slow = pa.concat_tables([s for _, s in pairs])
    export(base, tmp_path / "base.parquet")
    export(slow, tmp_path / "slow.parquet")
    proc = cli("compare", tmp_path / "base.parquet", tmp_path / "base.parquet")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    proc = cli("compare", tmp_path / "base.parquet", tmp_path / "slow.parquet", "--json")
    assert proc.returncode == 1, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    compute = rows["compute"]
    assert compute["verdict"] == "slower" and compute["p50_ns_change"] > 0.05
    assert compute["count_base"] == compute["count_new"] == 18
    proc = cli("compare", tmp_path / "base.parquet", tmp_path / "slow.parquet", "--min-count", "19")
    assert proc.returncode == 0 and "few" in proc.stdout  # nothing judged with fewer than 19 spans
    # A trace recorded with another configuration: the digest differs, compare says so.
    meta = dict(slow.schema.metadata)
    env = json.loads(meta[b"hotspan.env"])
    env["config"]["capacity"] *= 2
    env["digest"] = "0" * 16
    meta[b"hotspan.env"] = json.dumps(env).encode()
    export(slow.replace_schema_metadata(meta), tmp_path / "other.parquet")
    proc = cli(
        "compare", tmp_path / "base.parquet", tmp_path / "other.parquet", "--threshold", "100"
    )
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "config" in proc.stderr and "capacity" in proc.stderr


def test_environment_digest_is_recorded():
    env = json.loads(record().schema.metadata[b"hotspan.env"])
    assert (
        env["hotspan"] == hotspan.__version__
        and env["config"]["capacity"] > 0
        and len(env["digest"]) == 16
    )


@pytest.mark.slow
def test_run_script_passes_argv_and_exit_code(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, hotspan\n"
        "print('argv', sys.argv[1:])\n"
        "with hotspan.span('work', 'compute', arg=7):\n"
        "    sum(range(1000))\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    proc = hotspan_cli(
        "run", "-o", tmp_path / "out" / "t.json", script, "3", "--flag", cwd=tmp_path
    )
    assert proc.returncode == 3, proc.stderr
    assert "argv ['3', '--flag']" in proc.stdout
    table = load(tmp_path / "out" / "t.json")
    assert table.column("name").to_pylist() == ["work"] and table.column("arg").to_pylist() == [7]
    assert "1 spans" in proc.stderr and "work" in proc.stderr  # the summary, on stderr


@pytest.mark.slow
def test_run_module_default_output_and_a_failing_program(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "job.py").write_text(
        "import sys, hotspan\n"
        "assert __name__ == '__main__'\n"
        "with hotspan.span('job'):\n"
        "    pass\n"
        "raise RuntimeError('job failed: ' + ' '.join(sys.argv[1:]))\n"
    )
    proc = hotspan_cli("run", "-m", "mypkg.job", "-x", "--y", cwd=tmp_path)
    assert proc.returncode == 1
    assert "RuntimeError: job failed: -x --y" in proc.stderr and "cli.py" not in proc.stderr
    assert load(tmp_path / "hotspan-trace.parquet").column("name").to_pylist() == ["job"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["stats", "missing.parquet"], "missing.parquet: no such trace file"),
        (["stats", "corrupt.parquet"], "corrupt.parquet: not a valid parquet file"),
        (["stats", "corrupt.json"], "corrupt.json"),
        (["stats", "trace.txt"], "trace.txt: unknown file extension"),
        (["stats", "good.parquet", "--by", "nope"], "--by: no column 'nope'"),
        (["stats", "good.parquet", "--sort", "nope"], "--sort: no column 'nope'"),
        (["stats", "good.parquet", "--top", "x"], "invalid int value"),
        (["stats", "good.parquet", "--top", "0"], "--top must be at least 1"),
        (["stats"], "required"),
        (["export", "good.parquet", "out.xyz"], "out.xyz: unknown file extension"),
        (["export", "missing.json", "out.parquet"], "missing.json: no such trace file"),
        (["gantt", "good.parquet", "--step", "nope"], "no span named 'nope'"),
        (["gantt", "good.parquet", "--width", "3"], "--width must be at least 10"),
        (["report", "corrupt.parquet"], "corrupt.parquet"),
        (["compare", "good.parquet", "missing.parquet"], "missing.parquet: no such trace file"),
        (["compare", "good.parquet", "good.parquet", "--threshold", "-1"], "--threshold"),
        (["run", "missing.py"], "missing.py: no such script"),
        (["run", "-m", "no_such_module_here"], "no_such_module_here"),
        (["run", "-o", "t.unknown", "prog.py"], "t.unknown: unknown file extension"),
        (["stats", "good.parquet", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message, tmp_path, traces):
    _, paths = traces
    (tmp_path / "good.parquet").write_bytes(paths[".parquet"].read_bytes())
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "corrupt.json").write_text('{"traceEvents": [{"ph": ')
    (tmp_path / "trace.txt").write_text("hello")
    (tmp_path / "prog.py").write_text("")
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    "command", ["stats", "export", "gantt", "report", "compare", "run", "demo"]
)
def test_every_command_has_help_with_an_example(cli, command):
    proc = cli(command, "--help")
    assert (
        proc.returncode == 0 and "example:" in proc.stdout and f"hotspan {command}" in proc.stdout
    )


def test_a_corrupt_trace_in_a_fresh_interpreter_is_one_line_no_traceback(tmp_path):
    (tmp_path / "bad.arrow").write_bytes(b"ARROW1 but not")
    proc = hotspan_cli("gantt", "bad.arrow", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("hotspan gantt: bad.arrow")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
