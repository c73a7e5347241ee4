"""Many readers: drain(), record(), live() and subscribers each see every span once."""

from __future__ import annotations

import io
import logging
import shutil
import re
import threading
import time

import pyarrow as pa
import pytest

import hotspan
from hotspan import _api, events

from _util import wait_until

pytestmark = pytest.mark.usefixtures("fresh")

THREADS = 4
PER_THREAD = 1500
LIVE_NAME = re.compile(r" (s\d+-\d+) \[")


def _record_unique(
    tag: str, threads: int = THREADS, per_thread: int = PER_THREAD, pause_every: int = 200
) -> set[str]:
    """Spans with a unique name each, from several threads at once; returns the names."""

    def work(t: int) -> None:
        for i in range(per_thread):
            with hotspan.span(f"{tag}{t}-{i}", "work"):
                pass
            if i % pause_every == pause_every - 1:
                time.sleep(0.002)  # let the drain side interleave with the recording

    workers = [threading.Thread(target=work, args=(t,), name=f"worker-{t}") for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {f"{tag}{t}-{i}" for t in range(threads) for i in range(per_thread)}


def _names(table: pa.Table) -> list[str]:
    return table.column("name").to_pylist()


def test_every_consumer_gets_every_span_once(tmp_path):
    dropped_before = hotspan.dropped()
    out = io.StringIO()
    seen_by_sub: list[str] = []
    drained: list[str] = []
    stop_draining = threading.Event()

    def user_drains() -> None:  # a user's drain() loop while record() streams
        while not stop_draining.is_set():
            drained.extend(_names(hotspan.drain()))
            time.sleep(0.003)

    rec = hotspan.record(tmp_path / "run", flush_interval=0.05).start()
    log = hotspan.live(file=out)
    sub = hotspan.subscribe(lambda batch: seen_by_sub.extend(batch.column("name").to_pylist()))
    drainer = threading.Thread(target=user_drains)
    drainer.start()
    try:
        expected = _record_unique("s")
    finally:
        sub.close()
        log.stop()
        rec.stop()
        stop_draining.set()
        drainer.join()
    drained.extend(_names(hotspan.drain()))
    assert hotspan.dropped() == dropped_before  # no consumer's pace made the core drop

    written = _names(hotspan.load(tmp_path / "run"))
    live_names = LIVE_NAME.findall(out.getvalue())
    for label, got, dropped in (
        ("record", written, rec.dropped),
        ("drain", drained, 0),
        ("subscribe", seen_by_sub, sub.dropped),
        ("live", live_names, log.skipped),
    ):
        assert len(got) == len(set(got)), f"{label} got spans twice"
        assert dropped == 0, label
        assert set(got) == expected, f"{label}: {len(expected - set(got))} missing"
        assert len(expected) == len(got) + dropped
    assert _api.drain_hook() is None  # nothing streams any more: drain() reads the core directly


def test_drain_while_recording_returns_spans_since_the_previous_drain(tmp_path):
    with hotspan.record(tmp_path / "trace.parquet", flush_interval=0.01) as rec:
        with hotspan.span("before"):
            pass
        wait_until(lambda: rec.spans >= 1, what='the recorder to take "before"')
        first = hotspan.drain()
        with hotspan.span("after"):
            pass
        second = hotspan.drain()
    assert _names(first) == ["before"]
    assert _names(second) == ["after"]
    assert sorted(_names(hotspan.load(tmp_path / "trace.parquet"))) == ["after", "before"]


def test_drain_without_streaming_consumers_is_the_core_drain():
    with hotspan.span("x"):
        pass
    assert _api.drain_hook() is None
    assert _names(hotspan.drain()) == ["x"]


def test_subscriber_filters_and_delivers_the_rest_at_close():
    got: list[pa.RecordBatch] = []
    threads: set[str] = set()

    def collect(batch: pa.RecordBatch) -> None:
        threads.add(threading.current_thread().name)
        got.append(batch)

    with hotspan.subscribe(
        collect, min_ns=2_000_000, names=["slow", "other"], categories=["io"]
    ) as sub:
        with hotspan.span("outer", "sync"):
            with hotspan.span("slow", "io"):  # category path sync/io: matches "io"
                time.sleep(0.003)
        with hotspan.span("slow", "io"):  # too short
            pass
        with hotspan.span("slow", "compute"):  # wrong category
            time.sleep(0.003)
        with hotspan.span("unnamed", "io"):  # wrong name
            time.sleep(0.003)
    rows = pa.Table.from_batches(got).to_pylist() if got else []
    assert [(r["name"], r["category"]) for r in rows] == [("slow", "sync/io")]
    assert all(isinstance(b, pa.RecordBatch) for b in got)
    assert threading.current_thread().name not in threads and threads == {"hotspan-subscriber"}
    assert sub.delivered == 1 and sub.received == 5


def test_failing_callback_is_reported_once_and_keeps_being_called(caplog):
    calls: list[int] = []
    good: list[int] = []
    seen: list[events.Event] = []

    def broken(batch: pa.RecordBatch) -> None:
        calls.append(batch.num_rows)
        raise ValueError("boom")

    handle = hotspan.on_event(seen.append)
    with caplog.at_level(logging.INFO, logger="hotspan"):
        with hotspan.subscribe(broken) as bad, hotspan.subscribe(lambda b: good.append(b.num_rows)):
            for i in range(3):
                with hotspan.span("x"):
                    pass
                wait_until(
                    lambda i=i: sum(calls) == i + 1, what=f"delivery {i + 1}"
                )  # a delivery each
            wait_until(lambda: sum(good) == 3, what="the good subscriber's deliveries")
        wait_until(
            lambda: any(isinstance(e, events.CallbackFailed) for e in seen),
            what="the CallbackFailed event",
        )
        handle.close()
    assert len(calls) >= 2 and sum(calls) == 3 and bad.errors == len(calls)
    assert sum(good) == 3
    failed = [e for e in seen if isinstance(e, events.CallbackFailed)]
    assert (
        len(failed) == 1
        and "broken" in failed[0].callback
        and isinstance(failed[0].error, ValueError)
    )
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert (
        len(errors) == 1
        and errors[0].exc_info
        and "boom" in caplog.text
        and "Traceback" in caplog.text
    )


def test_slow_subscriber_drops_its_oldest_and_reports_it(caplog):
    dropped_before = hotspan.dropped()
    hotspan.configure(memory_cap=256 << 10)
    release = threading.Event()
    fast: list[int] = []
    slow_rows: list[int] = []

    def slow(batch: pa.RecordBatch) -> None:
        slow_rows.append(batch.num_rows)
        release.wait(10)  # stuck until the recording is over

    with caplog.at_level(logging.WARNING, logger="hotspan"):
        with (
            hotspan.subscribe(slow) as sub,
            hotspan.subscribe(lambda b: fast.append(b.num_rows)) as quick,
        ):
            recorded = 0
            for _round in range(40):
                for i in range(500):
                    with hotspan.span("x", arg=i):
                        pass
                recorded += 500
                # the hub pumps in between (waited for): the core never holds much
                wait_until(lambda n=recorded: quick.received >= n, what="the hub to take the round")
            release.set()
    core_dropped = hotspan.dropped() - dropped_before
    assert core_dropped == 0
    assert sub.dropped > 0 and quick.dropped == 0
    assert sum(fast) == recorded
    assert sum(slow_rows) + sub.dropped == recorded
    warned = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "fell behind" in r.getMessage()
    ]
    assert warned and "subscribe(" in warned[0].getMessage()


def test_slow_subscriber_does_not_delay_recording():
    started = threading.Event()

    def stuck(batch: pa.RecordBatch) -> None:
        started.set()
        time.sleep(0.5)

    with hotspan.subscribe(stuck):
        with hotspan.span("first"):
            pass
        assert started.wait(5)
        t0 = time.perf_counter()
        for _ in range(10_000):
            with hotspan.span("x"):
                pass
        hotspan.drain()  # the user's cursor: not held up by the callback either
        elapsed = time.perf_counter() - t0
    assert elapsed < 0.4, elapsed


def test_events_are_logged_and_handled(tmp_path, caplog):
    seen: list[events.Event] = []
    handler_threads: set[str] = set()

    def handler(event: events.Event) -> None:
        handler_threads.add(threading.current_thread().name)
        seen.append(event)

    with caplog.at_level(logging.INFO, logger="hotspan"), hotspan.on_event(handler):
        with hotspan.record(tmp_path / "run", flush_interval=0.02):
            with hotspan.span("x"):
                pass
            wait_until(  # an interval flush while recording
                lambda: sum(e.spans for e in seen if isinstance(e, events.Flushed)) >= 1,
                what="the Flushed event with the span",
            )
    kinds = [type(e) for e in seen]
    assert kinds[0] is events.RecordingStarted and seen[0].dest == str(tmp_path / "run")
    flushed = [e for e in seen if isinstance(e, events.Flushed)]
    assert sum(e.spans for e in flushed) == 1 and flushed[0].bytes > 0 and flushed[0].seconds >= 0
    assert handler_threads == {"hotspan-events"}
    assert any(
        r.levelno == logging.INFO and "recording to" in r.getMessage() for r in caplog.records
    )
    with pytest.raises(Exception):
        seen[0].dest = "elsewhere"  # frozen


def test_flush_failure_is_an_event_at_error(tmp_path, caplog):
    seen: list[events.Event] = []
    target = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="hotspan"), hotspan.on_event(seen.append):
        rec = hotspan.record(target, flush_interval=60).start()
        try:
            rec.flush()  # the run's metadata part is written at start: let it land first
            with hotspan.span("x"):
                pass
            # A regular file where the run's directory was: the write fails.
            shutil.rmtree(target, ignore_errors=True)
            target.write_text("in the way")
            rec.flush()
        finally:
            rec.stop()
        wait_until(
            lambda: any(isinstance(e, events.FlushFailed) for e in seen),
            what="the FlushFailed event",
        )
        wait_until(
            lambda: any(r.levelno == logging.ERROR for r in caplog.records), what="the error logged"
        )
    failed = [e for e in seen if isinstance(e, events.FlushFailed)]
    assert failed and failed[0].dest == str(target) and isinstance(failed[0].error, OSError)
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


def test_failing_event_handler_is_isolated(tmp_path):
    good: list[events.Event] = []

    def broken(event: events.Event) -> None:
        raise RuntimeError("handler bug")

    with hotspan.on_event(broken) as bad, hotspan.on_event(good.append):
        events.emit(events.CollectorRestored("grpc://x:1", 1.5))
        events.emit(events.CollectorRestored("grpc://x:1", 2.5))
        wait_until(
            lambda: (
                bad.errors == 3
                and any(isinstance(e, events.CallbackFailed) for e in good)
                and sum(isinstance(e, events.CollectorRestored) for e in good) == 2
            ),
            what="both events and the CallbackFailed delivered",
        )
    assert bad.errors == 3  # both events, and the CallbackFailed about itself
    restored = [e for e in good if isinstance(e, events.CollectorRestored)]
    assert [e.seconds_lost for e in restored] == [1.5, 2.5]
    assert sum(isinstance(e, events.CallbackFailed) for e in good) == 1  # reported once


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        hotspan.subscribe(42)
    with pytest.raises(ValueError, match="min_ns"):
        hotspan.subscribe(print, min_ns=-1)
    with pytest.raises(TypeError, match="names must be strings"):
        hotspan.subscribe(print, names=[1])
    with pytest.raises(TypeError, match="callable"):
        hotspan.on_event("nope")


def test_collector_lost_and_restored_are_events(tmp_path, caplog):
    import socket

    from hotspan.recording._collector import CollectorClient, CollectorServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here yet
    seen: list[events.Event] = []
    with hotspan.span("x"):
        pass
    table = hotspan.drain()
    with caplog.at_level(logging.INFO, logger="hotspan"), hotspan.on_event(seen.append):
        client = CollectorClient(f"grpc://127.0.0.1:{port}", timeout=2, backoff=(0.01, 0.05))
        client.send(table)
        client.send(table)  # a second failure in the same outage: no second event
        server = CollectorServer(tmp_path, f"grpc://127.0.0.1:{port}")
        try:
            client.close(timeout=10)
        finally:
            server.shutdown()
        wait_until(  # the handler runs on hotspan's event thread
            lambda: any(isinstance(e, events.CollectorRestored) for e in seen),
            what="the CollectorRestored event",
        )
    lost = [e for e in seen if isinstance(e, events.CollectorLost)]
    restored = [e for e in seen if isinstance(e, events.CollectorRestored)]
    assert (
        len(lost) == 1
        and lost[0].url == f"grpc://127.0.0.1:{port}"
        and isinstance(lost[0].error, Exception)
    )
    assert len(restored) == 1 and restored[0].seconds_lost > 0
    assert client.sent_spans == 2
    assert any(
        r.levelno == logging.ERROR and "lost the collector" in r.getMessage()
        for r in caplog.records
    )


def test_a_drain_cursor_left_unread_keeps_the_newest_and_reports_at_drain(tmp_path, caplog):
    hotspan.configure(memory_cap=256 << 10)
    dropped_before = hotspan.dropped()
    with caplog.at_level(logging.WARNING, logger="hotspan"):
        with hotspan.record(tmp_path / "run", flush_interval=0.01) as rec:
            recorded = 0
            for _round in range(40):
                for i in range(500):
                    with hotspan.span("x", arg=recorded + i):
                        pass
                recorded += 500
                # the recorder keeps up (waited for): it flushes every 10 ms
                wait_until(
                    lambda n=recorded: rec.spans >= n - (hotspan.dropped() - dropped_before),
                    what="the recorder to write the round",
                )
            assert not [
                r for r in caplog.records if "drain()" in r.getMessage()
            ]  # nobody asked yet
            table = hotspan.drain()
    core_dropped = hotspan.dropped() - dropped_before  # the tiny cap may make the core drop too
    written = set(hotspan.load(tmp_path / "run").column("arg").to_pylist())
    assert rec.dropped == 0 and len(written) == recorded - core_dropped
    args = table.column("arg").to_pylist()
    warned = [r.getMessage() for r in caplog.records if "drain() fell behind" in r.getMessage()]
    lost = sum(int(re.search(r"([\d,]+) spans", m).group(1).replace(",", "")) for m in warned)
    assert lost > 0 and len(args) + lost == len(written)
    assert set(args) <= written and max(written - set(args)) < min(args)  # the oldest went


def test_import_hotspan_with_events_loads_no_pyarrow():
    from _util import run_python

    proc = run_python("""
        import sys, hotspan
        seen = []
        h = hotspan.on_event(seen.append)
        hotspan.events.emit(hotspan.events.CollectorRestored("grpc://h:1", 1.0))
        h.close()
        assert type(seen[0]).__name__ == "CollectorRestored", seen
        assert callable(hotspan.subscribe) and callable(hotspan.wrap)
        print(sorted(m for m in ("pyarrow", "numpy") if m in sys.modules))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_forked_child_drains_its_own_spans_while_the_parent_subscribes():
    from _util import run_python

    proc = run_python("""
        import os, time, hotspan
        got = []
        with hotspan.subscribe(lambda b: got.extend(b.column("name").to_pylist())):
            pid = os.fork()
            if pid == 0:  # the child has no subscriber, no pump thread: drain() is the core's
                with hotspan.span("child"):
                    pass
                names = hotspan.drain().column("name").to_pylist()
                os._exit(0 if names == ["child"] else 3)
            with hotspan.span("parent"):
                pass
            _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), got)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 ['parent']"


def test_subscriber_hears_spans_without_the_native_drain_thread():
    hotspan.configure(drain_thread=False)
    got: list[str] = []
    with hotspan.subscribe(lambda b: got.extend(b.column("name").to_pylist())):
        with hotspan.span("x"):
            pass
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == ["x"]  # delivered while open, not only at close


def test_drain_while_streaming_gives_a_table_pyarrow_can_group(tmp_path):
    # The user's cursor joins several passes of the core's drain: one dictionary per column.
    with hotspan.record(tmp_path / "run", flush_interval=60) as rec:
        for i in range(3):
            with hotspan.span(f"name{i}", f"cat{i}"):
                pass
            rec.flush()  # one more pass of the core's drain queued for drain()
        table = hotspan.drain()
    grouped = table.group_by("name").aggregate([("duration_ns", "count")])
    assert sorted(grouped.column("name").to_pylist()) == ["name0", "name1", "name2"]
