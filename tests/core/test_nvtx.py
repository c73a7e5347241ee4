"""NVTX passthrough (configure(nvtx=True), HOTSPAN_NVTX=1), checked through NVTX's own
injection mechanism: a small NVTX tool built here (tests/core/csrc/nvtx_injection.c, as
Nsight Systems attaches one) is named by NVTX_INJECTION64_PATH and logs every range it
receives; a child process records spans, and the ranges must be the spans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

import hotspan
from hotspan import _native

ROOT = Path(__file__).resolve().parents[2]
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler to build the NVTX tool")

#: Nested spans on 2 threads through every entry point: span objects, @traced, begin/end,
#: an instant, an exception exit, a span without a category (inherits its parent's path),
#: and the C API (hotspan.h's table, reached through the capsule).
CHILD = textwrap.dedent(
    """
    import ctypes, json, sys, threading
    import hotspan
    from hotspan import _native

    class Api(ctypes.Structure):
        _fields_ = [
            ("version", ctypes.c_uint32),
            ("site", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)),
            ("begin", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int)),
            ("end", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ]
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    api = ctypes.cast(get(_native._C_API, b"hotspan._native._C_API"), ctypes.POINTER(Api)).contents
    gemm = api.site(b"gemm", b"kernel")

    mode = sys.argv[2]
    if mode == "configure":
        hotspan.configure(nvtx=True)
    step = hotspan.span("step", "train")

    @hotspan.traced
    def load(i):
        with hotspan.span("decode", "io", arg=i):
            hotspan.instant("tick")
        with hotspan.span("plain"):  # no category: its parent's path
            pass

    def work(k):
        hotspan.set_thread_name(f"worker-{k}")
        for i in range(4):
            with step:
                load(i)
                tok = hotspan.begin("phase", "compute", arg=k)
                api.begin(gemm, 1 << 20, 1)
                api.end(0)
                hotspan.end(tok)
                try:
                    with hotspan.span("boom", "compute"):
                        raise ValueError(i)
                except ValueError:
                    pass

    if mode == "toggle":
        # open while on, closed after off: still popped (balanced); opened while off: none
        hotspan.configure(nvtx=True)
        with hotspan.span("a", "x"):
            hotspan.configure(nvtx=False)
            with hotspan.span("b", "x"):
                pass
        with hotspan.span("c"):
            hotspan.configure(nvtx=True)
        with hotspan.span("d", "y"):
            pass
    else:
        pool = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    rows = hotspan.drain().select(
        ["span_id", "parent_id", "name", "category", "thread_id", "arg", "error", "duration_ns"]).to_pylist()
    with open(sys.argv[1], "w") as f:
        json.dump({"rows": rows, "nvtx": _native._nvtx()}, f)
    """
)


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    """The NVTX tool, built with the system C compiler against the vendored NVTX3 headers."""
    out = tmp_path_factory.mktemp("nvtx") / "libhs_nvtx_tool.so"
    cmd = [
        CC,
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-unused-parameter",
        f"-I{ROOT / 'csrc' / 'third_party'}",
        str(ROOT / "tests" / "core" / "csrc" / "nvtx_injection.c"),
        "-o",
        str(out),
        "-pthread",
    ]
    env = {
        k: v for k, v in os.environ.items() if k != "LD_PRELOAD"
    }  # the compiler, not the sanitizer's
    build = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert build.returncode == 0, build.stderr
    return out


def run_child(
    tmp_path: Path, tool: Path, mode: str, nvtx_env: str | None
) -> tuple[list[dict], bool, list[list[str]]]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out, log = tmp_path / "rows.json", tmp_path / "nvtx.log"
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(tool), HS_NVTX_LOG=str(log))
    env.pop("HOTSPAN_NVTX", None)
    env.pop("HOTSPAN_OUT", None)
    if nvtx_env is not None:
        env["HOTSPAN_NVTX"] = nvtx_env
    run = subprocess.run(
        [sys.executable, str(script), str(out), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    lines = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    return data["rows"], data["nvtx"], lines


def categories(lines: list[list[str]]) -> dict[int, str]:
    """NVTX category id -> name, each id named once and each name given one id."""
    named = [(int(f[2]), f[3]) for f in lines if f[0] == "category"]
    assert all(f[1] == "hotspan" for f in lines if f[0] == "category")
    ids = dict(named)
    assert len(ids) == len(named), f"a category named twice: {named}"
    assert len(set(ids.values())) == len(ids), f"one category under two ids: {named}"
    return ids


def expected_events(rows: list[dict]) -> dict[int, list[tuple]]:
    """Per thread, the push/pop/mark sequence the spans make: a depth-first walk of each
    thread's tree (children in span-id order, which is the order they were opened)."""
    children, roots = defaultdict(list), defaultdict(list)
    ids = {r["span_id"] for r in rows}
    for r in sorted(rows, key=lambda r: r["span_id"]):
        if r["parent_id"] in ids:
            children[r["parent_id"]].append(r)
        else:
            roots[r["thread_id"]].append(r)
    out: dict[int, list[tuple]] = {}

    def walk(r, seq):
        payload = "-" if r["arg"] is None else str(r["arg"])
        if r["name"] == "tick":
            seq.append(("mark", r["name"], r["category"], payload))
            return
        seq.append(("push", r["name"], r["category"], payload))
        for c in children[r["span_id"]]:
            walk(c, seq)
        seq.append(("pop",))

    for tid, rs in roots.items():
        seq: list[tuple] = []
        for r in rs:
            walk(r, seq)
        out[tid] = seq
    return out


def received_events(lines: list[list[str]]) -> dict[int, list[tuple]]:
    cats = categories(lines)
    out: dict[int, list[tuple]] = defaultdict(list)
    for f in lines:
        if f[0] in ("push", "mark"):
            _, tid, domain, cat, payload, msg = f
            assert domain == "hotspan", f
            out[int(tid)].append((f[0], msg, cats[int(cat)] if int(cat) else None, payload))
        elif f[0] == "pop":
            assert f[2] == "hotspan", f
            out[int(f[1])].append(("pop",))
    return dict(out)


@pytest.mark.parametrize("mode, nvtx_env", [("env", "1"), ("configure", None)])
def test_ranges_received_are_the_spans_recorded(tmp_path, tool, mode, nvtx_env):
    rows, on, lines = run_child(tmp_path, tool, mode, nvtx_env)
    assert on is True
    assert lines[0] == ["init"] and ["domain", "hotspan"] in lines
    assert sum(1 for f in lines if f[0] == "domain") == 1  # created once
    threads = {r["thread_id"] for r in rows}
    assert len(threads) == 2
    # 4 steps x (step, load, decode, tick, plain, phase, gemm, boom) on each thread
    assert len(rows) == 2 * 4 * 8
    assert sum(r["error"] for r in rows) == 2 * 4 and {r["name"] for r in rows if r["error"]} == {
        "boom"
    }
    assert {r["category"] for r in rows if r["name"] == "plain"} == {"train"}
    expected, received = expected_events(rows), received_events(lines)
    assert set(received) == threads
    for tid in threads:
        assert received[tid] == expected[tid]
    # NVTX was told hotspan's category paths, nested ones included (and the sites' own
    # categories, interned with them when the span objects were made)
    assert set(categories(lines).values()) >= {
        "train",
        "train/io",
        "train/compute",
        "train/compute/kernel",
    }
    assert {e[2] for seq in received.values() for e in seq if e[0] != "pop"} == {
        "train",
        "train/io",
        "train/compute",
        "train/compute/kernel",
    }


def test_switching_nvtx_while_spans_are_open_keeps_pushes_and_pops_balanced(tmp_path, tool):
    rows, on, lines = run_child(tmp_path, tool, "toggle", None)
    assert on is True and {r["name"] for r in rows} == {"a", "b", "c", "d"}
    events = [tuple(f[:1]) + tuple(f[5:]) for f in lines if f[0] in ("push", "pop")]
    assert events == [("push", "a"), ("pop",), ("push", "d"), ("pop",)]


@pytest.mark.slow
def test_without_nvtx_the_tool_receives_nothing(tmp_path, tool):
    rows, on, lines = run_child(tmp_path, tool, "env", None)
    assert on is False and len(rows) == 2 * 4 * 8
    assert lines == []  # not even loaded: hotspan made no NVTX call


@pytest.mark.slow
def test_hotspan_nvtx_0_is_off(tmp_path, tool):
    rows, on, lines = run_child(tmp_path, tool, "env", "0")
    assert on is False and lines == []


def test_configure_nvtx_type_and_state():
    assert _native._nvtx() is (os.environ.get("HOTSPAN_NVTX") == "1")
    with pytest.raises(TypeError, match="nvtx must be a bool"):
        hotspan.configure(nvtx="yes")
    before = _native._nvtx()
    hotspan.configure(nvtx=None)  # unchanged
    assert _native._nvtx() is before
