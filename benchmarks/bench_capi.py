"""Cost of one span recorded from native code through hotspan.h (the C API capsule), as a
CUDA host extension or a C++ data loader would record them, against the floor of any
timed span: two bare rdtsc reads in the same loop.

    python benchmarks/bench_capi.py [--n 50000] [--rounds 20] [--json out.json]

Builds, with the system C compiler, a small extension module (in a temporary directory)
whose C loops run N times either ``hs->begin(site, i, 1); hs->end(0);`` or two
``__rdtsc()`` reads kept alive through a volatile sink, each timed by clock_gettime around
the whole loop. Prints one JSON line: ns per span, ns per rdtsc pair, and the difference
(target: <= 25 ns per span on the project's 2-core VM).

Each round records N spans, then drains them outside the timed loop, so the ring never
fills (a full ring takes the cheaper drop path and would flatter the result); the best
round of each case is kept (a shared VM's speed wanders; the best is the least disturbed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import hotspan

C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>
#include <hotspan.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t ticks(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t ticks(void) { uint64_t v; __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v)); return v; }
#else
#error "bench_capi: no cycle counter for this architecture"
#endif

static const hotspan_api *hs;
static void *site;
static volatile uint64_t sink;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* spans(n) -> ns for n begin/end pairs through the C API */
static PyObject *spans(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n < 0 && PyErr_Occurred()) return NULL;
    int64_t t0;
    Py_BEGIN_ALLOW_THREADS  /* as a native caller would: no GIL needed to record */
    t0 = now_ns();
    for (long i = 0; i < n; i++) {
        hs->begin(site, i, 1);
        hs->end(0);
    }
    t0 = now_ns() - t0;
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(t0);
}

/* rdtsc_pairs(n) -> ns for n iterations of two bare counter reads: the floor of a span */
static PyObject *rdtsc_pairs(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n < 0 && PyErr_Occurred()) return NULL;
    int64_t t0;
    Py_BEGIN_ALLOW_THREADS
    t0 = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t a = ticks();
        uint64_t b = ticks();
        sink = b - a + (uint64_t)i;  /* volatile: the reads can't be dropped or hoisted */
    }
    t0 = now_ns() - t0;
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(t0);
}

static PyMethodDef methods[] = {
    {"spans", spans, METH_O, NULL},
    {"rdtsc_pairs", rdtsc_pairs, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_hs_bench_capi", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hs_bench_capi(void) {
    hs = hotspan_import();
    if (!hs) return NULL;
    site = hs->site("native_span", "bench");
    if (!site) return PyErr_NoMemory();
    return PyModule_Create(&def);
}
"""


def build(directory: Path):
    """Compile the extension with the system compiler and import it."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench_capi: needs a C compiler (cc or gcc, or $CC)")
    src = directory / "bench_capi.c"
    src.write_text(C_SOURCE)
    out = directory / ("_hs_bench_capi" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [
        cc,
        "-O2",
        "-shared",
        "-fPIC",
        "-std=gnu11",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{hotspan.get_include()}",
        str(src),
        "-o",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_capi: compiling failed:\n{' '.join(cmd)}\n{done.stderr}")
    spec = importlib.util.spec_from_file_location("_hs_bench_capi", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="spans per round (default 50000)")
    parser.add_argument(
        "--rounds", type=int, default=20, help="rounds of each case, interleaved (default 20)"
    )
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    args = parser.parse_args(argv)

    hotspan.enable()
    hotspan.configure(capacity=max(1 << 16, 2 * args.n))  # one round never fills a ring
    with tempfile.TemporaryDirectory(prefix="hotspan-bench-capi-") as tmp:
        ext = build(Path(tmp))
        hotspan.drain()
        dropped_before = hotspan.dropped()
        best_span = best_floor = float("inf")
        recorded = 0
        for _ in range(args.rounds):
            best_floor = min(best_floor, ext.rdtsc_pairs(args.n) / args.n)
            best_span = min(best_span, ext.spans(args.n) / args.n)
            recorded += hotspan.drain().num_rows  # outside the timed loop
        dropped = hotspan.dropped() - dropped_before
    result = {
        "bench": "capi",
        "n": args.n,
        "rounds": args.rounds,
        "ns_per_span": round(best_span, 2),
        "ns_per_rdtsc_pair": round(best_floor, 2),
        "ns_over_floor": round(best_span - best_floor, 2),
        "target_ns_per_span": 25,
        "meets_target": best_span <= 25,
        "spans_recorded": recorded,
        "spans_dropped": dropped,
    }
    line = json.dumps(result)
    print(line)
    if args.json:
        args.json.write_text(line + "\n")
    if recorded != args.n * args.rounds or dropped:
        print(
            f"bench_capi: expected {args.n * args.rounds} spans, drained {recorded}, dropped {dropped}",
            file=sys.stderr,
        )
    return result


if __name__ == "__main__":
    main()
