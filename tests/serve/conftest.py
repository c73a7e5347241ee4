"""A directory of real runs and a real ``hotspan serve`` process (uvicorn on 127.0.0.1, a
free port) over it, queried with httpx."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip(
    "fastapi", reason="hotspan serve needs the serve extra: pip install 'hotspan[serve]'"
)
pytest.importorskip("httpx")

from hotspan.formats import export  # noqa: E402
from hotspan.formats.dataset import write_part  # noqa: E402

from ._serving import Server, record_steps, with_rank  # noqa: E402


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    """base/trace.parquet, new/trace.json (slower compute), a two-rank dataset, and files
    that are not traces under broken/."""
    root = tmp_path_factory.mktemp("runs")
    base = record_steps(12, fail_at=2)
    # 20x the base's work: a difference no machine load hides (5x read "same" on a
    # machine with load average in the hundreds).
    new = record_steps(12, work=400_000)
    for sub in ("base", "new", "broken"):
        (root / sub).mkdir()
    export(base, root / "base" / "trace.parquet")
    export(new, root / "new" / "trace.json")
    write_part(base, root / "job", rank=0, pid=1000, seq=0)
    write_part(with_rank(record_steps(6), 1), root / "job", rank=1, pid=1001, seq=0)
    (root / "broken" / "bad.pftrace").write_bytes(b"\x00not a trace at all" * 10)
    # Parquet, but not spans: another tool's table, and span ids written as text.
    pq.write_table(
        pa.table({"a": [1, 2], "start_ns": [1, 2], "end_ns": [3, 4]}),
        root / "broken" / "foreign.parquet",
    )
    text_ids = base.set_column(0, "span_id", base["span_id"].cast(pa.string()))
    pq.write_table(text_ids, root / "broken" / "text_ids.parquet")
    return root


@pytest.fixture(scope="session")
def server(runs_dir):
    srv = Server(runs_dir)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server):
    with server.client() as c:
        yield c


@pytest.fixture(scope="session")
def ids(client) -> dict[str, str]:
    """Relative path -> run id."""
    return {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}
