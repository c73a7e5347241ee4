"""hotspan.analysis.timeline: a view bounded by its width, checked span by span against a
plain-Python reference on generated spans, from a table and from a run's Parquet parts."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis.timeline import timeline, window_of
from hotspan.formats.dataset import write_part


def generated(seed: int, tracks: int = 3, per_track: int = 3000) -> pa.Table:
    """Nested spans on ``tracks`` threads: roots of random length, each with children
    of a tenth of it and instants, names drawn from a few; spread over about a second."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = defaultdict(list)
    span_id = 1
    for track in range(tracks):
        t = 1_700_000_000_000_000_000 + int(rng.integers(0, 1_000_000))
        made = 0
        while made < per_track:
            length = int(rng.integers(1_000, 2_000_000))
            root = span_id
            spans = [(root, None, "step", t, t + length, 0)]
            span_id += 1
            child_start = t
            for _ in range(int(rng.integers(0, 5))):
                child_length = max(1, length // 10)
                if child_start + child_length > t + length:
                    break
                spans.append(
                    (
                        span_id,
                        root,
                        str(rng.choice(["fwd", "bwd", "io"])),
                        child_start,
                        child_start + child_length,
                        1,
                    )
                )
                span_id += 1
                child_start += child_length + 1
            if rng.random() < 0.2:
                spans.append((span_id, root, "mark", t + length // 2, t + length // 2, 1))
                span_id += 1
            for sid, parent, name, start, end, depth in spans:
                rows["span_id"].append(sid)
                rows["parent_id"].append(parent)
                rows["name"].append(name)
                rows["category"].append("train")
                rows["start_ns"].append(start)
                rows["end_ns"].append(end)
                rows["duration_ns"].append(end - start)
                rows["depth"].append(depth)
                rows["thread_id"].append(1000 + track)
                rows["thread_name"].append(f"t{track}")
                rows["pid"].append(77)
                rows["rank"].append(track % 2)
                rows["arg"].append(None)
                rows["error"].append(False)
            made += len(spans)
            t += length + int(rng.integers(0, 50_000))
    arrays = []
    for field in TRACE_SCHEMA:
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(rows[field.name], pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(rows[field.name], field.type))
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def reference(table: pa.Table, start: int, end: int, width: int) -> dict:
    """The answer, span by span in plain Python: {track: (exact span ids, {x: (count,
    {name: time}, least depth)})}."""
    per_pixel = (end - start) / width
    by_track: dict[tuple, list[dict]] = defaultdict(list)
    for row in table.to_pylist():
        s, e = row["start_ns"], row["end_ns"]
        if s < end and (e > start or s >= start):
            by_track[(row["rank"], row["pid"], row["thread_id"], 0)].append(row)
    out = {}
    for key, rows in by_track.items():
        if len(rows) <= width:
            out[key] = ({r["span_id"] for r in rows}, {})
            continue
        exact = {r["span_id"] for r in rows if r["end_ns"] - r["start_ns"] >= per_pixel}
        pixels: dict[int, list] = {}
        for r in rows:
            if r["span_id"] in exact:
                continue
            clipped = max(r["start_ns"], start)
            x = min(int((clipped - start) / per_pixel), width - 1)
            count, names, depth = pixels.get(x, (0, defaultdict(int), 1 << 60))
            names[r["name"]] += min(r["end_ns"], end) - clipped
            pixels[x] = (count + 1, names, min(depth, r["depth"]))
        out[key] = (exact, pixels)
    return out


def check(answer: dict, expected: dict, width: int) -> None:
    got = {(t["rank"], t["pid"], t["thread_id"], t["lane"]): t for t in answer["tracks"]}
    assert set(got) == set(expected)
    for key, (exact, pixels) in expected.items():
        track = got[key]
        ids = [s["span_id"] for s in track["spans"]]
        assert len(ids) == len(set(ids))  # listed once
        assert set(ids) == exact
        assert len(track["pixels"]) <= width
        assert {p["x"] for p in track["pixels"]} == set(pixels)
        for p in track["pixels"]:
            count, names, depth = pixels[p["x"]]
            assert p["count"] == count
            assert p["depth"] == depth
            assert names[p["name"]] == max(names.values())  # the busiest name
            assert p["time_ns"] == sum(names.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_whole_run_counts_each_span_once(seed):
    table = generated(seed)
    start, end = window_of(table)
    answer = timeline(table, width=300)
    assert (answer["start_ns"], answer["end_ns"]) == (start, end)
    check(answer, reference(table, start, end, 300), 300)
    counted = sum(len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in answer["tracks"])
    assert counted == table.num_rows


def test_a_window_counts_what_overlaps_it_and_zoomed_in_every_span_is_exact():
    table = generated(3)
    first, last = window_of(table)
    mid = (first + last) // 2
    for start, end, width in [
        (first + (last - first) // 7, mid, 500),  # a wide window: summaries
        (mid, mid + 20_000_000, 800),  # zoomed in: a few hundred spans a track, all exact
    ]:
        answer = timeline(table, start, end, width)
        expected = reference(table, start, end, width)
        check(answer, expected, width)
    assert all(not t["pixels"] for t in answer["tracks"])  # the last one: exact only
    assert sum(len(t["spans"]) for t in answer["tracks"]) > 0


def test_the_answer_is_bounded_by_the_width_not_the_spans():
    small, large = generated(4, per_track=2000), generated(4, per_track=20000)
    sizes = []
    for table in (small, large):
        answer = timeline(table, width=200)
        sizes.append(
            sum(len(t["pixels"]) for t in answer["tracks"]),
        )
        for track in answer["tracks"]:
            assert len(track["pixels"]) <= 200
            # exact spans are at least a pixel long: on one track at most ~width a depth
            depths = {s["depth"] for s in track["spans"]}
            assert len(track["spans"]) <= (200 + 1) * max(1, len(depths))
    assert sizes[1] <= 200 * 3


def test_parquet_parts_give_the_table_s_answer(tmp_path):
    """The same kernel over a run directory's parts, read in batches with the window pushed
    down, gives exactly the answer of the table in memory."""
    table = generated(5)
    run = tmp_path / "run"
    run.mkdir()
    for i, piece in enumerate(table.to_batches(max_chunksize=2500)):
        write_part(pa.Table.from_batches([piece]), run, rank=0, pid=77, seq=i)
    first, last = window_of(run)
    assert (first, last) == window_of(table)
    for start, end, width in [(first, last, 400), (first + 10**8, first + 2 * 10**8, 700)]:
        a = timeline(table, start, end, width)
        b = timeline(run, start, end, width)
        assert a == b
    ranks = timeline(run, width=100, ranks=[1])
    assert {t["rank"] for t in ranks["tracks"]} == {1}


def test_bad_windows_and_widths_are_refused():
    table = generated(6, tracks=1, per_track=10)
    with pytest.raises(ValueError, match="width"):
        timeline(table, width=0)
    with pytest.raises(ValueError, match="empty"):
        timeline(table, 10, 10, 100)


def test_an_index_answers_zoomed_out_views_as_the_spans_do():
    """Where the view's pixels are whole bins of the index, its answer is the spans' own,
    exactly; at any other width each span is still counted once; pixels shorter than a
    bin are not answered from the index."""
    from hotspan.analysis.timeline import TimelineIndex

    table = pa.concat_tables([generated(7), generated(8, tracks=1, per_track=40)])
    index = TimelineIndex(table, bins=1024)
    for width in (64, 256, 1024):  # 16, 4 and 1 bins a pixel
        assert index.view(width=width) == timeline(table, width=width)
    first, last = index.window
    bin_ns = index.bin_ns
    # a window of whole bins: the index counts the spans shorter than a bin that start in
    # it (one that starts before and reaches into it is in the spans' pixel 0, not the
    # index's) and the longer ones that overlap it
    a, b = first + math.ceil(100 * bin_ns), first + math.ceil(612 * bin_ns)
    view = index.view(a, b, width=128)
    starts, ends = table["start_ns"].to_numpy(), table["end_ns"].to_numpy()
    long = (ends - starts) >= bin_ns  # rows of the index: counted where they overlap, as exactly
    counted = sum(p["count"] for t in view["tracks"] for p in t["pixels"]) + sum(
        len(t["spans"]) for t in view["tracks"]
    )
    short_in = ~long & (starts >= a) & (starts < b)
    long_over = long & (starts < b) & (ends > a)
    assert counted == int(short_in.sum() + long_over.sum())
    for width in (100, 333, 1000):
        view = index.view(width=width)
        counted = sum(
            len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in view["tracks"]
        )
        assert counted == table.num_rows
        assert all(len(t["pixels"]) <= width for t in view["tracks"])
    assert index.view(first, first + int(bin_ns * 10), width=100) is None  # finer than a bin
    ranks = index.view(width=64, ranks=[1])
    assert ranks == timeline(table, width=64, ranks=[1])


def test_overlapping_asyncio_tasks_get_lanes_as_the_exports_give_them():
    """Tasks under gather overlap on their thread: their span trees are drawn on lanes of
    the thread (lane 0 its own, then one a tree that overlaps), and on each lane spans nest."""
    import asyncio
    import json

    import hotspan

    async def task(k: int) -> None:
        with hotspan.span("fetch", "io"):
            await asyncio.sleep(0.002 * (1 + k % 3))
            with hotspan.span("parse", "cpu"):
                sum(range(2000))

    async def main() -> None:
        with hotspan.span("batch", "io"):
            await asyncio.gather(*(task(k) for k in range(6)))

    hotspan.drain()
    asyncio.run(main())
    table = hotspan.drain()
    view = timeline(table, width=2000)  # 13 spans: every one exact
    assert json.loads(timeline(table, width=2000, encoded=True)) == view  # serve's text too
    lanes = [t for t in view["tracks"]]
    assert len(lanes) > 1 and [t["lane"] for t in lanes] == list(range(len(lanes)))
    assert sum(len(t["spans"]) for t in lanes) == table.num_rows
    for track in lanes:
        by_depth: dict[int, list] = defaultdict(list)
        for s in track["spans"]:
            by_depth[s["depth"]].append((s["start_ns"], s["end_ns"]))
        for intervals in by_depth.values():
            intervals.sort()
            assert all(a[1] <= b[0] for a, b in zip(intervals, intervals[1:]))  # no overlap


def test_a_saved_index_reads_back_as_it_was_and_only_for_its_version(tmp_path):
    """An index saved and loaded answers every view as the index built from the spans does
    (bins, names, long spans, tracks kept whole); loaded with another version of the run, or
    from a file that is not an index, there is none (the caller builds it again)."""
    from hotspan.analysis.timeline import TimelineIndex

    table = pa.concat_tables([generated(7), generated(8, tracks=1, per_track=40)])
    built = TimelineIndex(table, bins=1024)
    path = tmp_path / "index.npz"
    built.save(path, "v1")
    loaded = TimelineIndex.load(path, "v1")
    assert loaded is not None
    first, last = built.window
    for window in ((None, None), (first + (last - first) // 3, last - (last - first) // 5)):
        for width in (64, 300, 1024):
            assert loaded.view(*window, width=width) == built.view(*window, width=width)
    assert loaded.view(width=64, ranks=[1]) == timeline(table, width=64, ranks=[1])
    assert TimelineIndex.load(path, "v2") is None  # another version of the run
    assert TimelineIndex.load(tmp_path / "none.npz", "v1") is None
    (tmp_path / "bad.npz").write_bytes(b"not an index")
    assert TimelineIndex.load(tmp_path / "bad.npz", "v1") is None


def test_a_runs_version_changes_with_its_parts(tmp_path):
    """The version a saved index is keyed by changes when a part is added or removed."""
    from hotspan.analysis.timeline import run_version

    a = write_part(generated(1, tracks=1, per_track=50), tmp_path, rank=0, pid=1, seq=0)
    one = run_version([a])
    b = write_part(generated(2, tracks=1, per_track=50), tmp_path, rank=0, pid=1, seq=1)
    assert run_version([a, b]) != one
    assert run_version([b, a]) == run_version([a, b])  # the order listed does not matter
    assert run_version([a]) == one


def test_an_index_with_span_blocks_answers_finer_views_as_the_spans_do(tmp_path):
    """Built with span blocks, an index answers views whose pixels are shorter than a bin
    from the blocks a window reaches: the answer :func:`timeline` gives from the parts, to
    the last span and pixel, down to windows of exact spans, for some ranks too; saved and
    loaded, the same; with its blocks file gone or changed, it has none (None again)."""
    from hotspan.analysis import _timeline_blocks as module
    from hotspan.analysis.timeline import TimelineIndex

    run = tmp_path / "run"
    tables = [generated(11), generated(12, tracks=2, per_track=2000)]
    for rank, table in enumerate(tables):
        for i, piece in enumerate(table.to_batches(1500)):
            write_part(pa.Table.from_batches([piece]), run, rank=rank, pid=70 + rank, seq=i)
    files = sorted(str(p) for p in run.rglob("part-*.parquet"))
    blocks = tmp_path / "index.blocks"
    saved_rows = module.BLOCK_ROWS
    module.BLOCK_ROWS = 700  # many blocks, so that a window reads some and not others
    try:
        index = TimelineIndex(files, bins=256, blocks=blocks)
    finally:
        module.BLOCK_ROWS = saved_rows
    assert index.blocks is not None and len(index.blocks.directory) > 10
    first, last = index.window
    total = last - first
    rng = np.random.default_rng(3)
    windows = []
    for scale in (300, 3_000, 30_000, 300_000):
        for _ in range(3):
            length = max(total // scale, 2)
            low = first + int(rng.integers(0, total - length))
            windows.append((low, low + length))
    exact = 0
    for low, high in windows:
        for ranks in (None, [1]):
            got = index.view(low, high, width=400, ranks=ranks)
            assert got == timeline(files, low, high, 400, ranks=ranks), (low, high, ranks)
            exact += sum(len(t["spans"]) for t in got["tracks"] if not t["pixels"])
    assert exact > 0  # some windows were exact spans
    low, high = windows[-1]  # no rank asked (serve's `rank=` empty): no track, as the spans say
    assert index.view(low, high, width=400, ranks=[]) == timeline(files, low, high, 400, ranks=[])
    path = tmp_path / "index.npz"
    index.save(path, "v1")
    loaded = TimelineIndex.load(path, "v1")
    low, high = windows[5]
    assert loaded.blocks is not None
    assert loaded.view(low, high, width=400) == timeline(files, low, high, 400)
    with open(blocks, "ab") as out:
        out.write(b"more")
    assert TimelineIndex.load(path, "v1").blocks is None
    assert TimelineIndex.load(path, "v1").view(low, high, width=400) is None


def test_the_answer_as_json_text_is_the_answer(tmp_path):
    """``encoded=True`` writes the answer as JSON straight from its columns (what serve sends):
    parsed, it is the dict answer exactly, for pixels, exact spans, lanes, names that need
    escaping, an empty window and an index's views (bins and span blocks)."""
    import json

    from hotspan.analysis.timeline import TimelineIndex

    table = generated(13)
    names = table["name"].combine_chunks()
    odd = pa.array(
        ['say "hi"\\', "naïve ✓", "tab\there"], pa.string()
    )  # quotes, backslash, non-ASCII, control
    table = table.set_column(
        table.schema.get_field_index("name"),
        "name",
        pa.DictionaryArray.from_arrays(names.indices, pa.concat_arrays([odd, names.dictionary])),
    )
    first, last = window_of(table)
    mid = (first + last) // 2
    for window, width in [
        ((None, None), 300),
        ((first + (last - first) // 7, mid), 500),
        ((mid, mid + 20_000_000), 800),
        ((last + 10, last + 20), 50),  # nothing in it
    ]:
        text = timeline(table, *window, width, encoded=True)
        assert isinstance(text, bytes)
        assert json.loads(text) == timeline(table, *window, width)
    run = tmp_path / "run"
    for i, piece in enumerate(table.to_batches(max_chunksize=2500)):
        write_part(pa.Table.from_batches([piece]), run, rank=0, pid=77, seq=i)
    index = TimelineIndex(run, bins=256, blocks=tmp_path / "index.blocks")
    for window in ((None, None), (mid, mid + 20_000_000)):
        expected = index.view(*window, width=128)
        assert json.loads(index.view(*window, width=128, encoded=True)) == expected
    assert any(t["pixels"] for t in timeline(table, width=300)["tracks"])


def test_each_level_of_an_index_is_the_spans_own_view_at_its_width(tmp_path):
    """An index keeps its bins at coarser levels too (half as many bins each, down to 256):
    a view of the whole run at any level's width is the spans' own answer, exactly, saved
    and loaded as built; at other widths each span is still counted once; a window holding
    a few bins of the finest level is answered from it, as the spans count it."""
    from hotspan.analysis.timeline import TimelineIndex

    table = pa.concat_tables([generated(14), generated(15, tracks=1, per_track=40)])
    index = TimelineIndex(table, bins=4096)
    assert [level.width for level in index.levels] == [4096, 2048, 1024, 512, 256]
    index.save(tmp_path / "index.npz", "v1")
    loaded = TimelineIndex.load(tmp_path / "index.npz", "v1")
    assert [level.width for level in loaded.levels] == [4096, 2048, 1024, 512, 256]
    for width in (4096, 2048, 1024, 512, 256, 64):
        expected = timeline(table, width=width)
        assert index.view(width=width) == expected
        assert loaded.view(width=width) == expected
    for width in (300, 1000, 3000):
        for view in (index.view(width=width), loaded.view(width=width)):
            counted = sum(
                len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in view["tracks"]
            )
            assert counted == table.num_rows
    first, _last = index.window
    a, b = first + math.ceil(1000 * index.bin_ns), first + math.ceil(1016 * index.bin_ns)
    assert loaded.view(a, b, width=16) == timeline(table, a, b, width=16)


def test_an_index_saved_in_an_earlier_format_is_not_read(tmp_path):
    """A file of the first format (one level, names unsorted) under the right version is
    not an index of this one: load gives None, so the caller builds it again."""
    import json

    from hotspan.analysis.timeline import TimelineIndex

    table = generated(16, tracks=1, per_track=300)
    path = tmp_path / "index.npz"
    TimelineIndex(table, bins=512).save(path, "v1")
    assert TimelineIndex.load(path, "v1") is not None
    arrays = dict(np.load(path))
    head = json.loads(arrays["head"].tobytes())
    head["format"] = 1
    arrays["head"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    np.savez(path, **arrays)
    assert TimelineIndex.load(path, "v1") is None


def _padded(table: pa.Table, bins: int) -> pa.Table:
    """``table`` with a 1 ns span that makes its window a whole number of nanoseconds a bin at
    ``bins`` bins (so that a window of whole bins has pixels of exactly a bin)."""
    first, last = window_of(table)
    end = first + bins * -(-(last - first) // bins)
    row = table.slice(0, 1).to_pylist()[0]
    row.update(span_id=10**9, parent_id=None, name="pad", start_ns=end - 1, end_ns=end)
    row.update(duration_ns=1, self_ns=1, depth=0)
    pad = pa.Table.from_pylist([row], schema=table.schema)
    return pa.concat_tables([table, pad])


def test_fine_levels_answer_zooms_finer_than_the_index_as_the_spans_do(tmp_path):
    """Views with pixels shorter than the index's bins but holding many spans a track are
    answered from the fine levels (fine_bins, its half, its quarter..., built from the span
    blocks):
    at each fine level's width the whole run is the spans' own answer, built and read back;
    a window of whole fine bins gives the spans' pixels (past its first, which the spans
    begun before the window also reach) and counts each span once; without the fine files
    the same views come from the blocks, as the spans answer them."""
    from hotspan.analysis.timeline import TimelineIndex

    table = pa.concat_tables(
        [generated(21, per_track=20_000), generated(22, tracks=1, per_track=40)]
    )
    table = _padded(table, 4096)
    index = TimelineIndex(table, bins=256, blocks=tmp_path / "index.blocks", fine_bins=2048)
    assert index.fine is not None and index.fine.widths == [512, 1024, 2048]
    index.save(tmp_path / "index.npz", "v1")
    loaded = TimelineIndex.load(tmp_path / "index.npz", "v1")
    assert loaded.fine is not None and loaded.fine.widths == [512, 1024, 2048]
    for width in (2048, 1024, 512, 256):
        expected = timeline(table, width=width)
        assert index.view(width=width) == expected
        assert loaded.view(width=width) == expected
    for width in (300, 700, 1500):  # pixels of one to two fine bins: each span once
        view = loaded.view(width=width)
        counted = sum(
            len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in view["tracks"]
        )
        assert counted == table.num_rows
    first, _last = loaded.window
    starts, ends = table["start_ns"].to_numpy(), table["end_ns"].to_numpy()
    for level in loaded.fine.levels:
        bin_ns = int(level.ns_per_pixel)
        assert bin_ns == level.ns_per_pixel
        a, b = first + 100 * bin_ns, first + 164 * bin_ns
        view, spans = loaded.view(a, b, width=64), timeline(table, a, b, width=64)
        for got, want in zip(view["tracks"], spans["tracks"], strict=True):
            assert got["spans"] == want["spans"]
            # past the first pixel (spans begun before the window reach it) and before the
            # last (the spans' time is cut at the window's end, a bin's is not)
            assert got["pixels"][1:-1] == want["pixels"][1:-1]
        long = (ends - starts) >= bin_ns  # listed where they overlap
        counted = sum(
            len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in view["tracks"]
        )
        short_in = ~long & (starts >= a) & (starts < b)
        assert counted == int(short_in.sum() + (long & (starts < b) & (ends > a)).sum())
    # levels of 3 x 2^k bins (between the index's powers of two), as the server keeps them
    thirds = TimelineIndex(table, bins=256, blocks=tmp_path / "thirds.blocks", fine_bins=1536)
    assert thirds.fine is not None and thirds.fine.widths == [384, 768, 1536]
    for width in (1536, 768, 384):
        assert thirds.view(width=width) == timeline(table, width=width)
    # the fine rows cut short (not those written with the index): not read
    rows = (tmp_path / "index.rows").read_bytes()
    (tmp_path / "index.rows").write_bytes(rows[:-100])
    assert TimelineIndex.load(tmp_path / "index.npz", "v1").fine is None
    (tmp_path / "index.rows").write_bytes(rows)
    assert TimelineIndex.load(tmp_path / "index.npz", "v1").fine is not None
    # the fine files gone: not read; the same views from the span blocks
    (tmp_path / "index.fine").unlink()
    again = TimelineIndex.load(tmp_path / "index.npz", "v1")
    assert again.fine is None
    assert again.view(width=2048) == timeline(table, width=2048)


def test_the_first_pass_names_are_held_in_a_map_while_the_fine_levels_are_built(tmp_path):
    """The index's names of its first pass (per track, every name's time in each bin: 18 M of
    them on the 200 M-span run) are not what the fine levels are built from: they are moved to
    a file and mapped back before the fine levels are built rank by rank (so the build's peak
    memory is the first pass's bins and one rank's fine levels), that file removed at once
    (nothing left beside the index), and every answer is the spans' own, built and read back."""
    import mmap

    from hotspan.analysis.timeline import TimelineIndex

    table = _padded(generated(31, tracks=4, per_track=5000), 4096)
    index = TimelineIndex(table, bins=256, blocks=tmp_path / "index.blocks", fine_bins=2048)
    assert index.fine is not None
    for code in range(len(index.levels[0].tracks)):
        for names in index.levels[0].name_parts[code][0]:
            owner = names
            while owner is not None and not isinstance(owner, (np.memmap, mmap.mmap)):
                owner = getattr(owner, "base", None)
            assert owner is not None, "a track's names held in memory"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "index.blocks",
        "index.fine",
        "index.rows",
    ]
    index.save(tmp_path / "index.npz", "v1")
    loaded = TimelineIndex.load(tmp_path / "index.npz", "v1")
    for width in (2048, 1024, 256, 128):
        expected = timeline(table, width=width)
        assert index.view(width=width) == expected
        assert loaded.view(width=width) == expected
