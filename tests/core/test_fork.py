"""fork(): the child starts empty with its own drain thread; the parent keeps its spans."""

from __future__ import annotations

import os

import pytest

from _util import run_python

pytestmark = [
    pytest.mark.usefixtures("fresh"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only"),
]


@pytest.mark.slow
def test_fork_child_starts_empty_and_parent_keeps_its_spans():
    code = r"""
import json, os, threading, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: we test exactly that
import hotspan

for i in range(50):
    with hotspan.span("parent_before", arg=i):
        pass
# another thread with undrained spans of its own
th = threading.Thread(target=lambda: [hotspan.instant("other_thread") for _ in range(20)])
th.start(); th.join()

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    early = hotspan.drain().num_rows              # nothing of the parent's
    for i in range(100_000):                      # enough to need the child's drain thread
        with hotspan.span("child", arg=i):
            pass
    t = hotspan.drain()
    out = {"early": early, "rows": t.num_rows, "dropped": hotspan.dropped(),
           "ids": t.column("span_id").to_pylist()[:1000] + t.column("span_id").to_pylist()[-1000:],
           "names": sorted(set(t.column("name").to_pylist())),
           "pids": sorted(set(t.column("pid").to_pylist())), "pid": os.getpid()}
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
os.waitpid(pid, 0)
child = json.loads(data)
for i in range(1000):
    with hotspan.span("parent_after"):
        pass
t = hotspan.drain()
parent_ids = set(t.column("span_id").to_pylist())
names = t.column("name").to_pylist()
print(json.dumps({"child": child, "parent_before": names.count("parent_before"),
                  "other": names.count("other_thread"), "parent_after": names.count("parent_after"),
                  "child_in_parent": names.count("child"), "pids": sorted(set(t.column("pid").to_pylist())),
                  "pid": os.getpid(), "shared_ids": len(parent_ids & set(child["ids"]))}))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    child = out["child"]
    assert child["early"] == 0
    assert child["rows"] == 100_000 and child["dropped"] == 0
    assert child["names"] == ["child"] and child["pids"] == [child["pid"]]
    assert out["parent_before"] == 50 and out["other"] == 20 and out["parent_after"] == 1000
    assert (
        out["shared_ids"] == 0
    )  # parent and child go on recording on the same thread: ids stay apart
    assert out["child_in_parent"] == 0 and out["pids"] == [out["pid"]]


@pytest.mark.slow
def test_span_open_across_fork_closes_in_both():
    code = r"""
import json, os, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import hotspan
with hotspan.span("around_fork"):
    pid = os.fork()
if pid == 0:
    t = hotspan.drain()
    os._exit(0 if t.column("name").to_pylist() == ["around_fork"] else 3)
_, status = os.waitpid(pid, 0)
t = hotspan.drain()
print(os.waitstatus_to_exitcode(status), t.column("name").to_pylist())
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 ['around_fork']"


@pytest.mark.slow
def test_multiprocessing_fork_pool_works():
    code = r"""
import multiprocessing as mp, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import hotspan

def work(n):
    for i in range(n):
        with hotspan.span("task", arg=i):
            pass
    return hotspan.drain().num_rows

if __name__ == "__main__":
    with hotspan.span("main"):
        pass
    with mp.get_context("fork").Pool(2) as pool:
        print(sum(pool.map(work, [1000] * 4)), hotspan.drain().num_rows)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["4000", "1"]
