"""``import hotspan`` loads the recorder alone: pyarrow and numpy load on first use, never
at import (each check in a fresh interpreter, since this one has them loaded already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("pyarrow", "numpy")

#: Prints which of HEAVY are loaded, as JSON, under a label.
PRELUDE = textwrap.dedent(
    """
    import json, sys
    def loaded(label):
        print(label, json.dumps(sorted(m for m in %r if m in sys.modules)))
    """
    % (HEAVY,)
)


def run(code: str, env: dict | None = None, timeout: float = 120) -> dict[str, list[str]]:
    """Run ``code`` (after PRELUDE) in a fresh interpreter; ``{label: [heavy modules loaded]}``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}
    environment.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = {}
    for line in result.stdout.splitlines():
        label, _, value = line.partition(" ")
        found[label] = json.loads(value)
    return found


def test_import_and_spans_load_neither_pyarrow_nor_numpy():
    found = run(
        """
        import hotspan
        loaded("import")
        with hotspan.span("step", "train"):
            with hotspan.span("forward", "compute", arg=3):
                hotspan.instant("mark")
        hotspan.end(hotspan.begin("io"))
        @hotspan.traced
        def f():
            return 1
        f()
        hotspan.set_thread_name("main")
        hotspan.configure(capacity=1 << 12)
        hotspan.dropped(); hotspan.enabled(); hotspan.rank()
        loaded("spans")
        """
    )
    assert found == {"import": [], "spans": []}


@pytest.mark.parametrize(
    "first_use",
    [
        "hotspan.drain()",
        "hotspan.export(hotspan.drain(), os.path.join(tmp, 't.parquet'))",
        "hotspan.stats(hotspan.drain())",
        "hotspan.load(os.path.join(tmp, 'x.parquet'))",
    ],
)
@pytest.mark.slow
def test_first_drain_export_load_stats_loads_them(first_use, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hotspan._schema import SPAN_SCHEMA

    pq.write_table(pa.Table.from_pylist([], schema=SPAN_SCHEMA), tmp_path / "x.parquet")
    found = run(
        f"""
        import os
        tmp = {str(tmp_path)!r}
        import hotspan
        with hotspan.span("step"):
            pass
        loaded("before")
        {first_use}
        loaded("after")
        """
    )
    assert found == {"before": [], "after": ["numpy", "pyarrow"]}


@pytest.mark.slow
def test_hotspan_out_records_from_import_and_loads_pyarrow_on_its_flush_thread(tmp_path):
    out = tmp_path / "run.parquet"
    found = run(
        """
        import sys, threading, time
        # Which thread imports pyarrow first: a finder that only watches, never finds.
        class Watch:
            thread = None
            def find_spec(self, name, path=None, target=None):
                if name == "pyarrow" and Watch.thread is None:
                    Watch.thread = threading.current_thread().name
                return None
        sys.meta_path.insert(0, Watch())
        import hotspan
        from hotspan.recording import recorder
        assert recorder.active() is not None, "HOTSPAN_OUT did not start recording at import"
        with hotspan.span("step"):
            pass
        deadline = time.monotonic() + 60
        while "pyarrow" not in sys.modules and time.monotonic() < deadline:
            time.sleep(0.01)
        loaded("flushed")
        print("thread", json.dumps(Watch.thread))
        """,
        env={"HOTSPAN_OUT": str(out), "HOTSPAN_FLUSH_INTERVAL": "0.05"},
    )
    # (whether the flusher has loaded it by the time import returns is a race: who loads
    # it is not)
    assert "pyarrow" in found["flushed"]
    assert found["thread"] == "hotspan-record"
    import pyarrow.parquet as pq

    assert "step" in pq.read_table(out).column("name").to_pylist()


SUBMODULES = ["analysis", "cli", "formats", "recording", "report", "serve", "testing"]
FUNCTIONS = [
    "stats",
    "live",
    "record",
    "export",
    "load",
    "phases",
    "compare",
    "collectives",
    "stragglers",
    "critical_path",
]


def test_every_subpackage_imports_as_a_module_and_the_functions_stay_functions():
    found = run(
        f"""
        import importlib, types
        import hotspan
        kinds = {{}}
        for name in {FUNCTIONS!r}:
            kinds[name] = callable(getattr(hotspan, name)) and not isinstance(getattr(hotspan, name), types.ModuleType)
        for name in {SUBMODULES!r}:
            module = importlib.import_module("hotspan." + name)
            kinds[name] = isinstance(module, types.ModuleType) and module.__name__ == "hotspan." + name
        # after every subpackage is loaded, the public functions are still the functions
        for name in {FUNCTIONS!r}:
            kinds[name] = kinds[name] and callable(getattr(hotspan, name)) and not isinstance(getattr(hotspan, name), types.ModuleType)
        print("kinds", json.dumps(kinds))
        """
    )
    assert found["kinds"] == {name: True for name in FUNCTIONS + SUBMODULES}


def test_every_public_name_is_a_plain_attribute_without_pyarrow():
    """No module ``__getattr__`` (CPython would not specialise ``hotspan.span`` in a loop with
    one), yet every public name is there after ``import hotspan`` and costs no pyarrow."""
    found = run(
        """
        import hotspan
        assert "__getattr__" not in vars(hotspan), "a module __getattr__ slows hotspan.X"
        missing = [n for n in hotspan.__all__ if n not in vars(hotspan)]
        assert not missing, missing
        assert hotspan.events.Flushed and hotspan.sync.__name__ == "hotspan.sync"
        loaded("names")
        from hotspan.schema import SPAN_SCHEMA
        assert hotspan.load.__doc__ and "span_id" in SPAN_SCHEMA.names
        loaded("schema")
        """
    )
    assert found == {"names": [], "schema": ["numpy", "pyarrow"]}


#: Standard-library modules that ``import hotspan`` must not load: together they were half
#: of its import time (dataclasses brings inspect, ast, dis and tokenize; logging brings
#: traceback and string; pathlib brings re, fnmatch, urllib.parse and ipaddress: 15 of the
#: 47 modules it loaded). They load with the first handler, log line, recording or analysis.
SLOW_STDLIB = (
    "dataclasses",
    "inspect",
    "ast",
    "tokenize",
    "logging",
    "traceback",
    "pathlib",
    "re",
    "urllib",
    "ipaddress",
)


def test_import_loads_no_slow_stdlib_module():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json; before = set(sys.modules); import hotspan; "
            f"print(json.dumps(sorted(m for m in {SLOW_STDLIB!r} if m in sys.modules and m not in before)))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_modules_loaded_at_import_import_typing_only_for_the_type_checker():
    """A fresh interpreter (no site packages preloading it) has not loaded ``typing``: the
    modules ``import hotspan`` loads import it only under ``if TYPE_CHECKING`` (a name
    bound to ``False``), so the package costs no typing import of its own."""
    import ast
    import importlib

    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json, hotspan; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'hotspan')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    offenders = []
    for name in json.loads(listed.stdout):
        path = getattr(importlib.import_module(name), "__file__", None)
        if not path or not path.endswith(".py"):
            continue  # the compiled module
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        for node in tree.body:  # module level only: function bodies import on call
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            if any(
                m.split(".")[0] in ("typing", "dataclasses", "logging", "inspect") for m in modules
            ):
                offenders.append(f"{name}: line {node.lineno}")
    assert offenders == []


#: Every module ``import hotspan`` loads of its own: the recorder, its lifecycle and the
#: recording machinery that ``hotspan.Recorder`` (the real class) needs. A module added here
#: costs every program that imports hotspan, on every rank: load it on first use instead
#: (benchmarks/bench_import.py holds the time, <= 10 ms over a bare interpreter).
IMPORT_MODULES = [
    "hotspan",
    "hotspan._api",
    "hotspan._lifecycle",
    "hotspan._machine",
    "hotspan._native",
    "hotspan._version",
    "hotspan.events",
    "hotspan._quiet_threads",
    "hotspan.recording",
    "hotspan.recording._children",
    "hotspan.recording._hub",
    "hotspan.recording.recorder",
    "hotspan.recording._sinks",
    "hotspan.sync",
]

#: The standard library ``import hotspan`` may use beyond a bare interpreter's, with what
#: they load in turn: nothing else (``signal`` is read through ``_signal``: its three
#: IntEnum conversions were a sixth of the import; ``__future__`` is what ``from __future__
#: import annotations`` loads).
CHEAP_STDLIB = (
    "__future__",
    "atexit",
    "collections",
    "collections.abc",
    "contextlib",
    "threading",
    "time",
)


@pytest.fixture(scope="module")
def wheel_layout(tmp_path_factory):
    """(PYTHONPATH, environment) importing hotspan as a wheel lays it out. An editable
    install's finder rebuilds on import (loading subprocess, selectors, locale...): a
    development convenience, not what a user pays, so the package is staged beside its
    compiled module (benchmarks/bench_import.py measures the same copy)."""
    import shutil
    from pathlib import Path

    import hotspan
    from hotspan import _native

    environment = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}
    finder = next(
        (f for f in sys.meta_path if type(f).__name__ == "ScikitBuildRedirectingFinder"), None
    )
    if finder is None:
        return environment  # installed as a wheel: measured as it is
    stage = tmp_path_factory.mktemp("wheel-layout")
    package = Path(hotspan.__file__).parent
    shutil.copytree(package, stage / "hotspan", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(_native.__file__, stage / "hotspan")
    environment["PYTHONPATH"] = str(stage)
    environment["SKBUILD_EDITABLE_SKIP"] = str(finder.path)  # the finder's rebuild check off
    return environment


def test_import_loads_the_listed_modules_and_nothing_else(wheel_layout):
    """The import's cost held as a list of modules (a timed test would measure the machine):
    hotspan's own modules are IMPORT_MODULES exactly, and beyond what a bare interpreter
    and CHEAP_STDLIB load, nothing from the standard library or any other package."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, json; import {', '.join(CHEAP_STDLIB)}; before = set(sys.modules); "
            "import hotspan; assert hotspan.__file__.startswith(sys.argv[1]), hotspan.__file__; "
            "print(json.dumps(sorted(set(sys.modules) - before)))",
            wheel_layout.get("PYTHONPATH", ""),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=wheel_layout,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert [m for m in loaded if m.split(".")[0] == "hotspan"] == sorted(IMPORT_MODULES)
    assert [m for m in loaded if m.split(".")[0] != "hotspan"] == []
