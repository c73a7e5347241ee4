"""The C core's layers, read from the source (as tests/test_layout.py reads the Python imports):
each unit of ``csrc/`` (``hs_x.c`` with its header ``hs_x.h``) depends only on the units below
it in ``LAYERS``: through an ``#include``, a call of a function or a use of a global another
unit defines. Nothing below calls a plug-in by name (they install themselves through hooks),
and the graph has no loop."""

from __future__ import annotations

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "csrc"

#: Bottom first. A unit may use the units of the layers before its own, never those after it
#: nor those beside it in its own layer (so a layer's units are independent of each other).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("hs_compiler",),  # HS_LIKELY, HS_HOT...: macros only
    (
        "hs_clock",
        "hs_ring",
        "hs_selftime",
    ),  # ticks -> ns; blocks and the single-writer rings; self time
    ("hs_intern",),  # strings, category paths, (name, path) pairs
    ("hs_registry",),  # per-thread state, chains, span id ranges, switches and hooks
    ("hs_recorder",),  # the hot path: enter/exit/instant
    ("hs_live",),  # the live log's queue, fed by the drain
    ("hs_counters",),  # counter values the drain copies out of the blocks; memory samples
    ("hs_rawlog",),  # record(dir)'s raw log: the records the drain moves, appended to a file
    ("hs_drain",),  # the drain thread and the segment store
    ("hs_columns",),  # segments -> Arrow-ready columns
    ("hs_device",),  # the device plug-ins' hook table (device spans call through it)
    (
        "hs_cuda",
        "hs_flight",
        "hs_nvtx",
        "hs_signals",
        "hs_tasks",
    ),  # plug-ins, installed through hooks
    ("hs_fork",),  # the one pthread_atfork: every unit's prepare/parent/child
    ("hs_types",),  # the Python types
    ("hs_module",),  # the Python module: installs the plug-ins
)
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
PLUG_INS = {"hs_cuda", "hs_flight", "hs_nvtx", "hs_signals", "hs_tasks"}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def strip_strings(text: str) -> str:
    """String literals emptied (no names in them); #include lines kept whole."""
    return "\n".join(
        line if line.lstrip().startswith("#") else re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
        for line in text.split("\n")
    )


def units() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(CSRC.glob("hs_*.[ch]")):
        found.setdefault(path.stem, []).append(path)
    return found


UNITS = units()
SOURCES = {
    path: strip_strings(strip_comments(path.read_text()))
    for paths in UNITS.values()
    for path in paths
}

# A function defined at the top level (in a .c, or static inline in a header), or a global
# defined in a .c: `type name(args) {`, `type name = ...;`, `type name[...]...;`, `type name;`.
FUNCTION_DEF = re.compile(
    r"^[A-Za-z_][\w \t\*]*?\b(hs_\w+)\s*\([^;{}]*\)\s*(?:__attribute__\(\([^;{}]*\)\)\s*)?\{",
    re.MULTILINE,
)
GLOBAL_DEF = re.compile(
    r"^(?!static\b|extern\b|typedef\b|return\b)[A-Za-z_][\w \t\*]*?\b(hs_\w+)\s*(?:\[[^\]]*\]\s*)*"
    r"(?:__attribute__\(\([^;]*\)\)\s*)?(?:=|;)",
    re.MULTILINE,
)
INCLUDE = re.compile(r'^\s*#\s*include\s+"(?:\./)?(hs_\w+)\.h"', re.MULTILINE)
NAME = re.compile(r"\bhs_\w+\b")


def definitions() -> dict[str, str]:
    """Each function or global name -> the unit that defines it."""
    owner: dict[str, str] = {}
    for unit, paths in UNITS.items():
        for path in paths:
            text = SOURCES[path]
            for match in FUNCTION_DEF.finditer(text):
                line = text[match.start() : text.index("(", match.start())]
                if path.suffix == ".c" and re.match(r"\s*static\b", line):
                    continue  # private to its file
                owner[match.group(1)] = unit
            if path.suffix == ".c":
                for match in GLOBAL_DEF.finditer(text):
                    owner.setdefault(match.group(1), unit)
    return owner


DEFINED = definitions()


def edges() -> dict[str, dict[str, str]]:
    """unit -> {unit it depends on: the first reason found (file:line what)}."""
    graph: dict[str, dict[str, str]] = {unit: {} for unit in UNITS}
    for unit, paths in UNITS.items():
        for path in paths:
            text = SOURCES[path]
            for lineno, line in enumerate(text.split("\n"), 1):
                for match in INCLUDE.finditer(line):
                    target = match.group(1)
                    if target != unit:
                        graph[unit].setdefault(
                            target, f'{path.name}:{lineno} #include "{target}.h"'
                        )
                for match in NAME.finditer(line):
                    target = DEFINED.get(match.group(0))
                    if target is not None and target != unit:
                        graph[unit].setdefault(target, f"{path.name}:{lineno} {match.group(0)}")
    return graph


GRAPH = edges()


def test_the_reader_sees_the_core():
    assert {"hs_recorder", "hs_registry", "hs_ring", "hs_drain", "hs_module"} <= set(UNITS)
    assert DEFINED["hs_enter"] == "hs_recorder" and DEFINED["hs_tstate_register"] == "hs_registry"
    assert DEFINED["hs_enabled"] == "hs_registry"
    assert "hs_registry" in GRAPH["hs_recorder"]


def test_every_unit_has_a_layer_and_a_header():
    assert not set(UNITS) - set(RANK), (
        f"units with no place in LAYERS: {sorted(set(UNITS) - set(RANK))}"
    )
    lonely = [
        unit
        for unit, paths in UNITS.items()
        if unit != "hs_module" and not any(p.suffix == ".h" for p in paths)
    ]
    assert not lonely, f"units with no header of their own: {lonely}"


def test_no_unit_depends_on_a_unit_above_or_beside_it():
    found = []
    for unit, targets in GRAPH.items():
        for target, why in targets.items():
            if target in RANK and RANK[target] >= RANK.get(unit, -1):
                kind = (
                    "a plug-in, by name"
                    if target in PLUG_INS
                    else "up"
                    if RANK[target] > RANK[unit]
                    else "beside"
                )
                found.append(f"{why}: {unit} -> {target} ({kind})")
    assert not found, (
        "dependencies against the layers (use a hook, or move the code down):\n"
        + "\n".join(sorted(found))
    )


def test_the_dependency_graph_has_no_loop():
    state: dict[str, int] = {}
    path: list[str] = []
    loops = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in GRAPH.get(node, {}):
            if state.get(target) == 1:
                loops.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for unit in sorted(GRAPH):
        if unit not in state:
            visit(unit)
    assert not loops, "loops between the C units:\n" + "\n".join(loops)
