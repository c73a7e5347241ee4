"""A process that forks before it records anything still gives each child its own span ids.

A DataLoader's parent records nothing, but its first drain (a recorder's metadata part)
draws the span id base; its workers, forked before the fork handlers were registered (at
the first span), kept that base: two workers wrote the same ids."""

from __future__ import annotations

import pytest

import json

from _util import run_python


@pytest.mark.slow
def test_children_of_a_parent_that_drained_before_any_span_get_their_own_ids():
    proc = run_python("""
        import json, os, hotspan
        hotspan.drain()  # draws the id base, as a recorder's first drain does; no span yet
        pipes = []
        for _ in range(4):
            r, w = os.pipe()
            if os.fork() == 0:
                os.close(r)
                for _ in range(10):
                    with hotspan.span("child"):
                        pass
                ids = hotspan.drain().column("span_id").to_pylist()
                os.write(w, json.dumps(ids).encode())
                os._exit(0)
            os.close(w)
            pipes.append(r)
        ids = []
        for r in pipes:
            with os.fdopen(r) as f:
                ids += json.loads(f.read())
        for _ in range(4):
            os.wait()
        print(json.dumps(ids))
    """)
    assert proc.returncode == 0, proc.stderr
    ids = json.loads(proc.stdout)
    assert len(ids) == 40 and len(set(ids)) == 40
