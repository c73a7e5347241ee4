"""The codecs' layout, read from their Cython source: each a scanner and an assembler in
functions of at most 100 lines, the Chrome reader's key loop written once (issue 34, item 4).
Like ``tests/test_layout.py`` for the Python modules, from the text, without building."""

from __future__ import annotations

import re
from pathlib import Path

FORMATS = Path(__file__).resolve().parents[2] / "src" / "hotspan" / "formats"
CYTHON = sorted([*FORMATS.glob("*.pyx"), *FORMATS.glob("*.pxd")])
LONGEST = 100

_HEAD = re.compile(
    r"^(?P<indent>\s*)(?:cpdef|cdef|def)\s+(?!(?:class|struct|extern|enum|union|packed)\b)"
)


def functions(path: Path) -> list[tuple[str, int, int, str]]:
    """(name, first line, lines, header) of each function (``def``, ``cdef``, ``cpdef``),
    from its header to its last indented line (blank and comment lines after it left out)."""
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        match = _HEAD.match(lines[i])
        if not match or "(" not in lines[i]:
            i += 1
            continue
        # The header may span lines: up to where its parentheses close.
        j, header = i, lines[i]
        while header.count("(") > header.count(")") and j + 1 < len(lines):
            j += 1
            header += " " + lines[j].strip()
        if not header.split("#")[0].rstrip().endswith(":"):
            i += 1  # a declaration (``cdef int (*f)(int)``, ``cdef T x = f(...)``)
            continue
        name = re.search(r"(\w+)\s*\(", header[match.end() :])
        assert name, header
        indent, last, k = len(match.group("indent")), j, j + 1
        while k < len(lines):
            text = lines[k]
            if text.strip() and not text.lstrip().startswith("#"):
                if len(text) - len(text.lstrip()) <= indent:
                    break
                last = k
            k += 1
        found.append((name.group(1), i + 1, last - i + 1, header))
        i = j + 1
    return found


def test_the_walk_sees_the_codecs_functions():
    names = {path.name: {f[0] for f in functions(path)} for path in CYTHON}
    assert {"_chrome_codec.pyx", "_perfetto_codec.pyx", "_trace_order.pxd"} <= set(names)
    assert {"encode", "member", "own_row", "scan_any", "assemble", "feed"} <= names[
        "_chrome_codec.pyx"
    ]
    assert {"encode", "event", "scan_event", "put_begin"} <= names["_perfetto_codec.pyx"]
    # A declaration with parentheses is not a function; a header over several lines is one.
    chrome = {f[0]: f for f in functions(FORMATS / "_chrome_codec.pyx")}
    assert "flow_in=None" in chrome["encode"][3]  # the header's last line, joined
    assert all(f[2] >= 2 for f in chrome.values())


def test_no_codec_function_is_over_100_lines():
    long = [
        f"{path.name}:{line} {name} ({count} lines)"
        for path in CYTHON
        for name, line, count, _ in functions(path)
        if count > LONGEST
    ]
    assert not long, "split these into a scanner and an assembler: " + ", ".join(long)


def test_the_chrome_key_loop_is_written_once():
    """Every JSON object the Chrome reader walks (events, their args, skipped values, the
    top level) reads its keys through one ``cdef inline`` function, and the comma or brace
    after a value through another: no copy of the loop elsewhere."""
    source = (FORMATS / "_chrome_codec.pyx").read_text()
    heads = {f[0]: f[3] for f in functions(FORMATS / "_chrome_codec.pyx")}
    assert heads["member"].lstrip().startswith("cdef inline")
    assert heads["after_member"].lstrip().startswith("cdef inline")
    # The complaints only the key loop makes, and the key shortcut: each in one place.
    assert source.count('"a key"') == 1
    assert source.count("\"':'\"") == 1
    assert source.count("self.plain_key(") == 1
    assert source.count("self.member(") >= 4  # events, args, skip_value (twice), top level
