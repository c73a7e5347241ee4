"""Every row an exporter writes loads back, or the exporter refuses it before writing a
byte: a span name of megabytes (a repr, a generated SQL statement) through every format.

pyarrow's CSV and JSON readers parse a block (1 MiB) at a time and refuse a line longer
than one ("straddling object"); Perfetto packets are refused past 64 MiB on load."""

from __future__ import annotations

import pyarrow as pa
import pytest

from hotspan.formats import export, load
from hotspan.formats._registry import EXTENSIONS, FORMATS, READABLE_EXTENSIONS

from conftest import assert_same_spans, plain


def huge(size: int) -> str:
    return "n" * (size - 1) + "x"


def with_huge_strings(
    spans: pa.Table, size: int, category: bool = True, leaf: bool = False
) -> pa.Table:
    """``spans`` with one span's name (and another's category) ``size`` bytes long; ``leaf``:
    the name on a span with no children and time of its own (a flame view repeats a name on
    every stack below it, and leaves out spans without self time)."""
    table = plain(spans)
    names = table.column("name").to_pylist()
    categories = table.column("category").to_pylist()
    at = len(names) // 2
    if leaf:
        parents = set(table.column("parent_id").to_pylist())
        ids, durations = (
            table.column("span_id").to_pylist(),
            table.column("duration_ns").to_pylist(),
        )
        at = max((i for i in range(len(ids)) if ids[i] not in parents), key=durations.__getitem__)
    names[at] = huge(size)
    if category:
        categories[len(categories) // 3] = "c" * size
    table = table.set_column(
        table.schema.get_field_index("name"), "name", pa.array(names, pa.string())
    )
    return table.set_column(
        table.schema.get_field_index("category"), "category", pa.array(categories, pa.string())
    )


def round_trip(table: pa.Table, path) -> None:
    """Export then load gives the same rows, or the export refuses up front (a ValueError
    naming the problem, no file left behind)."""
    exporter = FORMATS[
        next(
            ext
            for ext in sorted(READABLE_EXTENSIONS, key=len, reverse=True)
            if str(path).endswith(ext)
        )
    ]
    try:
        export(table, path)
    except ValueError as exc:
        assert "bytes" in str(exc) and "\n" not in str(exc)
        assert not path.exists()
        assert not list(path.parent.iterdir()), "a refused export left a file"
        return
    back = load(path)
    # The formats that keep their own metadata and nesting give back every column; the
    # rest are compared where they hold the value (CSV has no metadata, that's all).
    assert_same_spans(table, back, keep_order=exporter.keeps_row_order)


@pytest.mark.parametrize("extension", READABLE_EXTENSIONS)
def test_a_3_mb_name_and_category_load_back_from_every_format(spans, extension, tmp_path):
    round_trip(with_huge_strings(spans, 3 << 20), tmp_path / f"huge{extension}")


@pytest.mark.slow
@pytest.mark.parametrize("extension", READABLE_EXTENSIONS)
def test_a_64_mib_name_loads_back_or_is_refused_up_front(spans, extension, tmp_path):
    round_trip(with_huge_strings(spans, 64 << 20), tmp_path / f"huge{extension}")


def test_perfetto_refuses_a_name_past_its_packet_limit_before_writing(spans, tmp_path):
    path = tmp_path / "huge.pftrace"
    with pytest.raises(ValueError, match=r"a span name of 67,108,864 bytes .*at most 64 MiB"):
        export(with_huge_strings(spans, 64 << 20, category=False), path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "extension",
    [ext for ext in EXTENSIONS if ext not in READABLE_EXTENSIONS],  # written, never loaded
)
def test_the_export_only_formats_write_a_3_mb_name_whole(spans, extension, tmp_path):
    path = tmp_path / f"huge{extension}"
    export(with_huge_strings(spans, 3 << 20, category=False, leaf=True), path)
    assert huge(3 << 20).encode() in path.read_bytes()
