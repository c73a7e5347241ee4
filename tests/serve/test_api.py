"""The JSON API of ``hotspan serve``, through a real uvicorn process, against the library's
own answers for the same runs."""

from __future__ import annotations

import shutil
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats import export

from ._serving import Server, record_steps, with_rank


@pytest.mark.slow
def test_the_list_holds_every_run_and_the_corrupt_one_as_an_error(client, runs_dir):
    response = client.get("/v1/traces")
    assert response.status_code == 200
    traces = {t["path"]: t for t in response.json()["traces"]}
    assert set(traces) == {
        "base/trace.parquet",
        "new/trace.json",
        "job",
        "broken/bad.pftrace",
        "broken/foreign.parquet",
        "broken/text_ids.parquet",
    }
    base = hotspan.load(runs_dir / "base" / "trace.parquet")
    entry = traces["base/trace.parquet"]
    assert entry["spans"] == base.num_rows and entry["ranks"] == [0] and entry["error"] is None
    assert entry["start_ns"] == pc.min(base["start_ns"]).as_py()
    assert entry["duration_ns"] == pc.max(base["end_ns"]).as_py() - pc.min(base["start_ns"]).as_py()
    assert (
        entry["host"] == base.schema.metadata[b"hotspan.host"].decode()
        and "pytest" in entry["command"]
    )
    job = traces["job"]
    assert job["kind"] == "dataset" and job["ranks"] == [0, 1]
    assert job["spans"] == hotspan.load(runs_dir / "job").num_rows > base.num_rows
    assert (
        traces["new/trace.json"]["spans"] == hotspan.load(runs_dir / "new" / "trace.json").num_rows
    )
    broken = traces["broken/bad.pftrace"]
    assert broken["error"] and "bad.pftrace" in broken["error"] and broken["spans"] is None
    assert "missing column(s) span_id" in traces["broken/foreign.parquet"]["error"]
    assert "'span_id' holds string, not integers" in traces["broken/text_ids.parquet"]["error"]
    # Ids are stable: the same on every listing.
    again = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}
    assert again == {p: t["id"] for p, t in traces.items()}


@pytest.mark.parametrize(
    "broken", ["broken/bad.pftrace", "broken/foreign.parquet", "broken/text_ids.parquet"]
)
def test_a_corrupt_run_answers_409_and_the_others_still_answer(client, ids, broken):
    for path in (
        "/v1/traces/{}",
        "/v1/traces/{}/stats",
        "/v1/traces/{}/spans",
        "/v1/traces/{}/download",
    ):
        response = client.get(path.format(ids[broken]))
        assert response.status_code == 409, path
        assert broken.split("/")[1] in response.json()["detail"]
    assert client.get(f"/v1/traces/{ids['job']}").status_code == 200


def test_detail_has_the_phases_per_rank(client, ids, runs_dir):
    response = client.get(f"/v1/traces/{ids['job']}")
    assert response.status_code == 200
    body = response.json()
    assert body["path"] == "job" and body["ranks"] == [0, 1]
    expected = hotspan.phases(hotspan.load(runs_dir / "job")).to_pylist()
    assert [(r["rank"], r["phase"]) for r in body["phases"]] == [
        (r["rank"], r["phase"]) for r in expected
    ]
    assert [r["time_ns"] for r in body["phases"]] == pytest.approx([r["time_ns"] for r in expected])
    assert {r["rank"] for r in body["phases"]} == {0, 1, None}  # None: the mean over ranks


@pytest.mark.parametrize("by", ["category,name", "rank,name", "thread_name"])
def test_stats_are_the_librarys(client, ids, runs_dir, by):
    response = client.get(f"/v1/traces/{ids['job']}/stats", params={"by": by})
    assert response.status_code == 200
    body = response.json()
    keys = by.split(",")
    assert body["by"] == keys
    expected = hotspan.stats(hotspan.load(runs_dir / "job"), by=keys).to_pylist()
    assert len(body["rows"]) == len(expected)
    for got, want in zip(body["rows"], expected):
        assert [got[k] for k in keys] == [want[k] for k in keys]
        for column in ("count", "total_ns", "self_ns", "min_ns", "max_ns", "errors"):
            assert got[column] == want[column]
        assert got["p99_ns"] == pytest.approx(want["p99_ns"])


def test_bad_values_are_422_naming_the_parameter(client, ids):
    rid = ids["base/trace.parquet"]
    cases = [
        (f"/v1/traces/{rid}/stats", {"by": "nope"}, "by"),
        (f"/v1/traces/{rid}/stats", {"by": "name,name"}, "by"),
        (f"/v1/traces/{rid}/spans", {"limit": 10_001}, "limit"),
        (f"/v1/traces/{rid}/spans", {"limit": 0}, "limit"),
        (f"/v1/traces/{rid}/spans", {"offset": -1}, "offset"),
        (f"/v1/traces/{rid}/spans", {"min_ns": "soon"}, "min_ns"),
        (f"/v1/traces/{rid}/spans", {"rank": "x"}, "rank"),
        (f"/v1/traces/{rid}/download", {"format": "zip"}, "format"),
        ("/v1/compare", {"base": rid}, "new"),
    ]
    for path, params, parameter in cases:
        response = client.get(path, params=params)
        assert response.status_code == 422, (path, params, response.text)
        assert [d["loc"][-1] for d in response.json()["detail"]] == [parameter], response.text


def test_unknown_ids_are_404_json(client):
    for path in (
        "/v1/traces/0123456789abcdef",
        "/v1/traces/nope/stats",
        "/v1/traces/nope/spans",
        "/v1/traces/nope/download",
    ):
        response = client.get(path)
        assert (
            response.status_code == 404 and response.headers["content-type"] == "application/json"
        )
        assert "no run with this id" in response.json()["detail"]
    assert client.get("/v1/compare", params={"base": "nope", "new": "nope"}).status_code == 404


def test_spans_pages_cover_the_filtered_run_in_a_stable_order(client, ids, runs_dir):
    rid = ids["job"]
    table = hotspan.load(runs_dir / "job")
    category = table["category"].cast(pa.string())
    wanted = table.filter(
        pc.and_(
            pc.equal(table["rank"], 1),
            pc.or_(pc.equal(category, "train"), pc.starts_with(category, "train/")),
        )
    )
    seen, offset, pages = [], 0, 0
    while offset is not None:
        response = client.get(
            f"/v1/traces/{rid}/spans",
            params={"offset": offset, "limit": 7, "rank": 1, "category": "train"},
        )
        assert response.status_code == 200
        body = response.json()
        assert len(body["spans"]) <= 7
        seen += body["spans"]
        offset = body["next_offset"]
        pages += 1
    assert pages > 2
    assert [s["span_id"] for s in seen] == wanted[
        "span_id"
    ].to_pylist()  # every span once, in file order
    assert all(s["rank"] == 1 and s["category"].startswith("train") for s in seen)
    # Self time as the library computes it (not left for the client to work out).
    assert [s["self_ns"] for s in seen] == wanted["self_ns"].to_pylist()
    assert any(s["self_ns"] < s["duration_ns"] for s in seen)
    # The same page twice is the same page.
    first = client.get(f"/v1/traces/{rid}/spans", params={"offset": 3, "limit": 5}).json()["spans"]
    assert (
        first
        == client.get(f"/v1/traces/{rid}/spans", params={"offset": 3, "limit": 5}).json()["spans"]
    )
    assert [s["span_id"] for s in first] == table["span_id"].to_pylist()[3:8]


def test_spans_filters_by_name_and_min_ns(client, ids, runs_dir):
    rid = ids["base/trace.parquet"]
    table = hotspan.load(runs_dir / "base" / "trace.parquet")
    forward = table.filter(pc.equal(table["name"], "forward"))
    floor = int(pc.approximate_median(forward["duration_ns"]).as_py())
    body = client.get(
        f"/v1/traces/{rid}/spans", params={"name": "forward", "min_ns": floor, "limit": 10_000}
    ).json()
    want = forward.filter(pc.greater_equal(forward["duration_ns"], floor))
    assert [s["span_id"] for s in body["spans"]] == want["span_id"].to_pylist() and body[
        "next_offset"
    ] is None
    errors = client.get(f"/v1/traces/{rid}/spans", params={"name": "flaky"}).json()["spans"]
    assert len(errors) == 1 and errors[0]["error"] is True


@pytest.mark.parametrize("fmt", ["pftrace", "json", "json.gz", "parquet"])
def test_downloads_load_back_with_every_span(client, ids, runs_dir, tmp_path, fmt):
    for path in ("job", "new/trace.json"):
        response = client.get(f"/v1/traces/{ids[path]}/download", params={"format": fmt})
        assert response.status_code == 200
        assert (
            f'.{fmt}"' in response.headers["content-disposition"]
            or f".{fmt}" in response.headers["content-disposition"]
        )
        target = tmp_path / f"down.{fmt}"
        target.write_bytes(response.content)
        got = hotspan.load(target)
        want = hotspan.load(runs_dir / path)
        assert got.num_rows == want.num_rows
        assert pc.sum(got["duration_ns"]).as_py() == pc.sum(want["duration_ns"]).as_py()


def test_compare_flags_the_slower_compute(client, ids):
    response = client.get(
        "/v1/compare", params={"base": ids["base/trace.parquet"], "new": ids["new/trace.json"]}
    )
    assert response.status_code == 200
    rows = {(r["category"], r["name"]): r for r in response.json()["rows"]}
    assert rows[("train/compute", "forward")]["verdict"] == "slower"
    assert rows[("train/compute", "forward")]["p50_ns_change"] > 0.5
    assert rows[("train/compute", "flaky")]["verdict"] == "gone"


@pytest.mark.slow
def test_new_and_changed_runs_show_without_a_restart(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    srv = Server(root)
    try:
        with srv.client() as c:
            assert c.get("/v1/traces").json()["traces"] == []
            table = record_steps(2)
            (root / "later").mkdir()
            export(table, root / "later" / "one.parquet")
            traces = c.get("/v1/traces").json()["traces"]
            assert [(t["path"], t["spans"]) for t in traces] == [
                ("later/one.parquet", table.num_rows)
            ]
            rid = traces[0]["id"]
            bigger = record_steps(5)
            time.sleep(0.01)  # a new modification time on coarse file systems too
            export(bigger, root / "later" / "one.parquet")
            assert c.get(f"/v1/traces/{rid}").json()["spans"] == bigger.num_rows
            assert c.get(f"/v1/traces/{rid}/stats").json()["rows"][0]["count"] in (
                r["count"] for r in hotspan.stats(bigger).to_pylist()
            )
            shutil.rmtree(root / "later")
            assert c.get(f"/v1/traces/{rid}").status_code == 404
    finally:
        srv.stop()


@pytest.mark.slow
def test_a_dataset_being_written_grows_in_the_list(tmp_path):
    from hotspan.formats.dataset import write_part

    root = tmp_path / "runs"
    table = record_steps(2)
    write_part(table, root / "live", rank=0, pid=1, seq=0)
    srv = Server(root)
    try:
        with srv.client() as c:
            assert [t["spans"] for t in c.get("/v1/traces").json()["traces"]] == [table.num_rows]
            write_part(with_rank(record_steps(2), 3), root / "live", rank=3, pid=2, seq=0)
            (entry,) = c.get("/v1/traces").json()["traces"]
            assert entry["spans"] == 2 * table.num_rows and entry["ranks"] == [0, 3]
    finally:
        srv.stop()


def test_openapi_document_lists_the_api(client):
    doc = client.get("/openapi.json").json()
    assert {
        "/v1/traces",
        "/v1/traces/{id}",
        "/v1/traces/{id}/stats",
        "/v1/traces/{id}/spans",
        "/v1/traces/{id}/download",
        "/v1/compare",
    } <= set(doc["paths"])
    limit = next(
        p
        for p in doc["paths"]["/v1/traces/{id}/spans"]["get"]["parameters"]
        if p["name"] == "limit"
    )
    assert limit["schema"]["maximum"] == 10_000
    assert not any(path.startswith(("/runs", "/static")) for path in doc["paths"])


@pytest.mark.slow
def test_a_part_without_a_rank_column_takes_its_directorys(tmp_path):
    import pyarrow.parquet as pq

    table = record_steps(2)
    part = tmp_path / "runs" / "norank" / "rank=2" / "part-1-000000.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(table.drop_columns(["rank"]), part)
    srv = Server(tmp_path / "runs")
    try:
        with srv.client() as c:
            (entry,) = c.get("/v1/traces").json()["traces"]
            assert (
                entry["ranks"] == [2]
                and entry["spans"] == table.num_rows
                and entry["error"] is None
            )
            spans = c.get(
                f"/v1/traces/{entry['id']}/spans", params={"rank": 2, "limit": 10_000}
            ).json()
            assert len(spans["spans"]) == table.num_rows and {
                s["rank"] for s in spans["spans"]
            } == {2}
            assert (
                c.get(f"/v1/traces/{entry['id']}/spans", params={"rank": 0}).json()["spans"] == []
            )
            assert (
                c.get(f"/v1/traces/{entry['id']}/stats", params={"by": "rank"}).json()["rows"][0][
                    "rank"
                ]
                == 2
            )
    finally:
        srv.stop()


def test_the_timeline_answers_what_the_library_computes(client, ids, runs_dir):
    """GET /v1/traces/{id}/timeline is the library's timeline of the run's parts: the whole
    run by default, a window and ranks when asked, each span counted once."""
    from hotspan.analysis.timeline import timeline

    job = hotspan.load(runs_dir / "job")
    # 64 pixels: whole bins of the run's timeline index, whose answer is then the spans' own
    # (the server answers from the index once it is built, from the spans before)
    whole = client.get(f"/v1/traces/{ids['job']}/timeline", params={"width": 64})
    assert whole.status_code == 200
    body = whole.json()
    assert body["id"] == ids["job"] and body["width"] == 64
    assert body["start_ns"] == pc.min(job["start_ns"]).as_py()
    assert body["end_ns"] == pc.max(job["end_ns"]).as_py()
    expected = timeline(job, width=64)
    assert body["tracks"] == expected["tracks"]
    counted = sum(len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in body["tracks"])
    assert counted == job.num_rows
    assert {t["rank"] for t in body["tracks"]} == {0, 1}
    # a window whose pixels are shorter than the index's bins: read from the spans, exactly
    middle = (body["start_ns"] + body["end_ns"]) // 2
    end = middle + (body["end_ns"] - body["start_ns"]) // 1000
    window = {"start_ns": middle, "end_ns": end, "width": 80, "rank": "1"}
    part = client.get(f"/v1/traces/{ids['job']}/timeline", params=window).json()
    assert part["tracks"] == timeline(job, middle, end, 80, ranks=[1])["tracks"]
    assert {t["rank"] for t in part["tracks"]} <= {1}
    # a file run (converted to Parquet once) answers too
    trace = client.get(f"/v1/traces/{ids['new/trace.json']}/timeline", params={"width": 10})
    assert trace.status_code == 200 and trace.json()["tracks"]


def test_the_timeline_sent_as_text_is_what_its_documented_model_describes(client, ids):
    """The timeline's answer is sent as the library writes it (not through the response
    model, which took seconds on a large run): it is still JSON that the model the OpenAPI
    document gives for it accepts, field for field, in the model's order."""
    from hotspan.serve.app import TimelineResponse

    response = client.get(f"/v1/traces/{ids['job']}/timeline", params={"width": 2})
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert TimelineResponse.model_validate(body).model_dump() == body
    assert list(body) == list(TimelineResponse.model_fields)
    track = next(t for t in body["tracks"] if t["pixels"])  # 2 pixels: summaries
    assert list(track) == ["rank", "pid", "thread_id", "lane", "spans", "pixels"]
    assert list(track["pixels"][0]) == ["x", "count", "name", "depth", "time_ns"]
    operation = client.get("/openapi.json").json()["paths"]["/v1/traces/{id}/timeline"]["get"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/TimelineResponse"}


@pytest.mark.parametrize(
    "params, parameter",
    [
        ({"width": 0}, "width"),
        ({"width": 100_000}, "width"),
        ({"start_ns": 10, "end_ns": 10}, "end_ns"),
        ({"rank": "one"}, "rank"),
    ],
)
def test_a_bad_timeline_request_names_its_parameter(client, ids, params, parameter):
    response = client.get(f"/v1/traces/{ids['job']}/timeline", params=params)
    assert response.status_code == 422
    assert any(d["loc"][-1] == parameter for d in response.json()["detail"])


def test_the_timeline_of_a_corrupt_run_is_409_and_of_no_run_404(client, ids):
    assert client.get(f"/v1/traces/{ids['broken/bad.pftrace']}/timeline").status_code == 409
    assert client.get("/v1/traces/0123456789abcdef/timeline").status_code == 404
