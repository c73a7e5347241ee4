"""One way to stop things: every handle hotspan gives back (record(), live(), subscribe(),
on_event(), the collector) stops with close() and is a context manager; the old names
(stop, remove, shutdown) do the same."""

from __future__ import annotations

import io

import pytest
from _util import wait_until

import hotspan
from hotspan.recording._collector import CollectorServer


def test_record_closes_with_close_and_its_file_is_then_written(tmp_path):
    rec = hotspan.record(tmp_path / "t.parquet").start()
    with hotspan.span("work", "c"):
        pass
    rec.close()
    assert not rec.running
    assert "work" in hotspan.load(tmp_path / "t.parquet").column("name").to_pylist()


def test_live_closes_with_close_and_stop_is_the_same():
    out = io.StringIO()
    log = hotspan.live(file=out)
    assert log.stop == log.close
    with log, hotspan.span("seen-live", "c"):
        pass
    assert "seen-live" in out.getvalue()
    with hotspan.span("after-close", "c"):
        pass
    log.close()  # twice: nothing happens
    assert "after-close" not in out.getvalue()


def test_subscription_and_event_handle_close_and_are_context_managers():
    batches = []
    with hotspan.subscribe(batches.append) as subscription:
        with hotspan.span("to-subscriber", "c"):
            pass
        hotspan.drain()
        wait_until(
            lambda: any("to-subscriber" in b.column("name").to_pylist() for b in batches),
            what="the subscriber's batch",
        )
    subscription.close()  # closed already: nothing happens
    events = []
    with hotspan.on_event(events.append) as handle:
        assert handle.remove == handle.close


@pytest.mark.parametrize("name", ["close", "shutdown"])
def test_a_collector_stops_with_close_or_its_old_name(tmp_path, name):
    server = CollectorServer(tmp_path / "run", "grpc://127.0.0.1:0")
    getattr(server, name)()
    with CollectorServer(tmp_path / "run2", "grpc://127.0.0.1:0") as second:
        assert second.url.startswith("grpc://")
