"""The C core's layers, read from the source (as tests/test_layout.py reads the Python imports):
each unit of ``csrc/`` (``hs_x.c`` with its header ``hs_x.h``) depends only on the units below
it in ``LAYERS``: through an ``#include``, a call of a function or a use of a global another
unit defines. Nothing below calls a unit above by name, and the graph has no loop.

Where a layer calls up (the registry into the drain, the flight file and the Python glue; the
ring into the flight file's blocks; ...), it declares ONE operations struct in its header
(``OPS``), which one place, the module's init, writes whole and installs once: no unit has a
global function pointer, none assigns another unit's ops or fills one field by field."""

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
    ("hs_registry",),  # per-thread state, chains, span id ranges, switches
    ("hs_recorder",),  # the hot path: enter/exit/instant
    ("hs_live",),  # the live log's queue, fed by the drain
    ("hs_counters",),  # counter values the drain copies out of the blocks; memory samples
    ("hs_rawlog",),  # record(dir)'s raw log: the records the drain moves, appended to a file
    ("hs_drain",),  # the drain thread and the segment store
    ("hs_columns",),  # segments -> Arrow-ready columns
    ("hs_device",),  # the device plug-in's ops (device spans call through them)
    (
        "hs_cuda",
        "hs_flight",
        "hs_nvtx",
        "hs_signals",
        "hs_tasks",
    ),  # plug-ins, joined to the layers below through their ops structs
    ("hs_fork",),  # the one pthread_atfork: every unit's prepare/parent/child
    ("hs_types",),  # the Python types
    ("hs_module",),  # the Python module: writes and installs every ops struct
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
        "dependencies against the layers (call up through the layer's ops struct, or move the code down):\n"
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


# ---- callbacks: one operations struct per layer called back into ---------------------------

#: Each layer that units above it call back into: the ONE operations struct its header
#: declares, and the units whose functions fill it (the module's init writes each whole, in
#: ``INSTALLER``, and installs it once through ``<layer>_set_ops``).
OPS: dict[str, tuple[str, frozenset[str]]] = {
    "hs_ring": ("hs_ring_ops", frozenset({"hs_flight"})),  # block memory from the file
    "hs_intern": ("hs_intern_ops", frozenset({"hs_flight"})),  # the file's copy of the tables
    "hs_registry": (  # a thread's name, context, slot, stack edits, start and exit
        "hs_registry_ops",
        frozenset({"hs_module", "hs_tasks", "hs_flight", "hs_drain"}),
    ),
    "hs_recorder": ("hs_recorder_ops", frozenset({"hs_nvtx"})),  # the NVTX passthrough
    "hs_counters": ("hs_counters_ops", frozenset({"hs_cuda"})),  # devices' memory in use
    "hs_drain": ("hs_drain_ops", frozenset({"hs_flight", "hs_module"})),  # tick, drained, drops
    "hs_device": ("hs_device_ops", frozenset({"hs_cuda"})),  # device spans' events
}
INSTALLER = "hs_module"

OPS_TYPEDEF = re.compile(r"^typedef\s+struct\s+(hs_\w+_ops)\s*\{", re.MULTILINE)
# A file-scope (column 0) function pointer that is not static: `void (*name)(...)`.
FUNCTION_POINTER = re.compile(
    r"^(?!static\b|typedef\b)[A-Za-z_][\w \t\*]*?\(\s*\*\s*(?:const\s+)?(\w+)\s*\)\s*\(",
    re.MULTILINE,
)
# A file-scope global holding ops: `[extern] [const] hs_x_ops [*] name [= ...];`.
OPS_GLOBAL = re.compile(
    r"^(?!static\b|typedef\b)(?:extern\s+)?(?:const\s+)?(hs_\w+_ops)\b[\s\*]*(?:const\s+)?(\w+)\s*(?:=|;)",
    re.MULTILINE,
)
# A variable (or parameter) of an ops type: `hs_x_ops [*] name`.
OPS_VARIABLE = re.compile(r"\b(hs_\w+_ops)\b[\s\*]*(?:const\s+)?([A-Za-z_]\w*)\s*[;=,)\[]")
ASSIGNMENT = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*((?:(?:\.|->)\s*\w+\s*)*)=(?!=)")


def callback_violations(sources: dict[str, dict[str, str]]) -> list[str]:
    """What breaks "one ops struct, installed whole": a global function pointer; a unit
    assigning another unit's function pointer or ops; a unit filling an ops struct of
    another unit's type field by field. ``sources``: unit -> {file name: source without
    comments and strings}."""
    found: list[str] = []
    ops_owner: dict[str, str] = {}  # ops type -> the unit whose header declares it
    holders: dict[str, str] = {}  # global function pointer or ops variable -> its unit
    for unit, files in sources.items():
        for name, text in files.items():
            if name.endswith(".h"):
                for match in OPS_TYPEDEF.finditer(text):
                    ops_owner[match.group(1)] = unit
            for match in FUNCTION_POINTER.finditer(text):
                holders.setdefault(match.group(1), unit)
                if name.endswith(".c") or "extern" in match.group(0):
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(
                        f"{name}:{line} {match.group(1)}: a global function pointer "
                        "(put it in the layer's ops struct)"
                    )
            for match in OPS_GLOBAL.finditer(text):
                holders.setdefault(match.group(2), unit)
    for unit, files in sources.items():
        for name, text in files.items():
            mine = {
                m.group(2): m.group(1)
                for m in OPS_VARIABLE.finditer(text)
                if ops_owner.get(m.group(1), unit) != unit
            }
            for lineno, line in enumerate(text.split("\n"), 1):
                for match in ASSIGNMENT.finditer(line):
                    target, fields = match.group(1), match.group(2).strip()
                    owner = holders.get(target)
                    if owner is not None and owner != unit:
                        what = "fills field by field" if fields else "assigns"
                        found.append(f"{name}:{lineno} {unit} {what} {owner}'s {target}{fields}")
                    elif fields and target in mine:
                        found.append(
                            f"{name}:{lineno} {unit} fills {ops_owner[mine[target]]}'s "
                            f"{mine[target]} field by field ({target}{fields})"
                        )
    return found


SOURCES_BY_UNIT = {
    unit: {path.name: SOURCES[path] for path in paths} for unit, paths in UNITS.items()
}


def test_the_callback_reader_sees_the_old_hooks():
    """The reader, on the coupling csrc/ had before the ops structs (a hook of the ring set
    by the flight file; a struct of the registry filled from the drain)."""
    old = {
        "hs_ring": {
            "hs_ring.h": "extern hs_block *(*hs_block_alloc_hook)(uint64_t records, uint64_t *bytes);\n",
            "hs_ring.c": "hs_block *(*hs_block_alloc_hook)(uint64_t records, uint64_t *bytes) = NULL;\n",
        },
        "hs_registry": {
            "hs_registry.h": "typedef struct hs_registry_ops {\n    void (*thread_exited)(void);\n"
            "} hs_registry_ops;\nextern hs_registry_ops hs_registry_now;\n",
            "hs_registry.c": "hs_registry_ops hs_registry_now;\n",
        },
        "hs_flight": {
            "hs_flight.c": "void hs_flight_install(void) {\n    hs_block_alloc_hook = hs_flight_block_alloc;\n}\n"
        },
        "hs_drain": {
            "hs_drain.c": "void hs_drain_install(void) {\n    hs_registry_now.thread_exited = f;\n"
            "    hs_registry_ops o = {0};\n    o.thread_exited = f;\n    hs_registry_set_ops(&o);\n}\n"
        },
    }
    found = callback_violations(old)
    assert any("hs_ring.c:1 hs_block_alloc_hook: a global function pointer" in f for f in found)
    assert any("hs_ring.h:1 hs_block_alloc_hook: a global function pointer" in f for f in found)
    assert "hs_flight.c:2 hs_flight assigns hs_ring's hs_block_alloc_hook" in found
    assert (
        "hs_drain.c:2 hs_drain fills field by field hs_registry's hs_registry_now.thread_exited"
        in found
    )
    assert any(
        f.startswith("hs_drain.c:4 hs_drain fills hs_registry's hs_registry_ops") for f in found
    )
    assert len(found) == 5, found


def test_no_global_function_pointer_and_no_ops_written_from_another_unit():
    found = callback_violations(SOURCES_BY_UNIT)
    assert not found, "callbacks not joined through one ops struct:\n" + "\n".join(found)


def test_each_layer_called_back_into_declares_one_ops_struct():
    declared: dict[str, list[str]] = {}
    for unit, files in SOURCES_BY_UNIT.items():
        for name, text in files.items():
            if name.endswith(".h"):
                for match in OPS_TYPEDEF.finditer(text):
                    declared.setdefault(unit, []).append(match.group(1))
    assert declared == {unit: [ops] for unit, (ops, _) in OPS.items()}, (
        "the ops structs differ from OPS (one per layer, each stated there)"
    )
    for unit, (ops, _) in OPS.items():
        header = SOURCES_BY_UNIT[unit][f"{unit}.h"]
        setter = f"{unit}_set_ops"
        assert re.search(rf"\bvoid\s+{setter}\s*\(\s*const\s+{ops}\s*\*", header), (
            f"{unit}.h declares no {setter}(const {ops} *)"
        )


def test_the_module_writes_each_ops_struct_whole_and_installs_it_once():
    for unit, (ops, implementers) in OPS.items():
        setter = f"{unit}_set_ops"
        calls = [
            (name, text[m.end() :].split(")")[0].strip())
            for files in SOURCES_BY_UNIT.values()
            for name, text in files.items()
            if not name.endswith(".h")
            for m in re.finditer(rf"(?<!void ){setter}\s*\(", text)
        ]
        assert len(calls) == 1 and calls[0][0] == f"{INSTALLER}.c", (
            f"{setter} must be called once, by {INSTALLER}.c's init: {calls}"
        )
        argument = calls[0][1]
        assert argument.startswith("&"), f"{setter}({argument}): a struct written whole"
        module = SOURCES_BY_UNIT[INSTALLER][f"{INSTALLER}.c"]
        body = re.search(
            rf"^static\s+const\s+{ops}\s+{re.escape(argument[1:])}\s*=\s*\{{(.*?)^\}};",
            module,
            re.MULTILINE | re.DOTALL,
        )
        assert body, f"{argument[1:]}: a static const {ops} written whole in {INSTALLER}.c"
        functions = re.findall(r"\.(\w+)\s*=\s*([A-Za-z_]\w*)", body.group(1))
        assert functions, f"{argument[1:]} fills no field"
        units = {DEFINED.get(fn, INSTALLER) for _, fn in functions}
        assert units == implementers, (
            f"{ops} is filled by {sorted(units)}, OPS says {sorted(implementers)}"
        )
        assert all(RANK[u] > RANK[unit] for u in units), f"{ops}: a callback must go up"
