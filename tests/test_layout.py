"""The package's layout rules, read from the source with ``ast``: no module imports another
module's private (``_underscore``) names, the import graph has no cycle, and the folders
stand on floors (core, table, formats, analysis, report, recording, then the faces: cli,
serve and the modules that put the package together), each module importing only from its
own floor or those below (every static import counted, those inside functions too; ``if
TYPE_CHECKING:`` blocks, which never run, are not)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "hotspan"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# Compiled modules (no .py): importable as modules, never cycles (they import no Python of ours).
# Compiled modules: the core (a .pyi stub beside it) and the Cython codecs (their .pyx).
NATIVE = {
    module_name(p.with_name(p.name.split(".")[0] + ".py")) for p in PACKAGE.rglob("*.pyi")
} | {module_name(p.with_suffix(".py")) for p in PACKAGE.rglob("*.pyx")}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def is_module(name: str) -> bool:
    return name in MODULES or name in NATIVE


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def resolve(importer: str, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` refers to in ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if importer not in PACKAGES:
        base = base[:-1]  # a module's relative imports start from its package
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(name: str) -> list[tuple[int, str, str | None]]:
    """(line, module imported, name imported from it or None) for each import that runs."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(name, node.level, node.module)
            found.extend((node.lineno, target, alias.name) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def edges(name: str) -> list[tuple[int, str]]:
    """(line, our module) for each of our modules ``name`` imports: ``from x import y`` is
    an edge to ``x.y`` when that is a module, else to ``x``."""
    out = []
    for line, target, imported in imports(name):
        if not (target == "hotspan" or target.startswith("hotspan.")):
            continue
        if imported is not None and is_module(f"{target}.{imported}"):
            target = f"{target}.{imported}"
        if target in MODULES:
            out.append((line, target))
    return out


def test_the_walk_sees_the_package():
    assert {"hotspan", "hotspan._api", "hotspan.formats._base", "hotspan.cli"} <= set(MODULES)
    assert "hotspan._native" in NATIVE


def test_no_module_imports_another_modules_private_names():
    found = []
    for name in MODULES:
        for line, target, imported in imports(name):
            if not target.startswith("hotspan") or imported is None or not is_private(imported):
                continue
            if is_module(f"{target}.{imported}"):
                continue  # a private module itself (_native, _schema, _table, _api, ...): fine
            if target in NATIVE:
                continue  # the compiled core's underscored functions: its interface to our Python
            if target == name:
                continue
            found.append(
                f"{MODULES[name].relative_to(SRC)}:{line}: from {target} import {imported}"
            )
    assert not found, (
        "private names imported across modules (make them public or move them):\n"
        + "\n".join(found)
    )


def test_the_import_graph_has_no_cycle():
    graph = {name: edges(name) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[tuple[str, int]] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        for line, target in graph[node]:
            if target == node:
                continue
            path.append((node, line))
            if state.get(target) == 1:
                start = next(i for i, (n, _) in enumerate(path) if n == target)
                cycles.append(" -> ".join(f"{n}:{ln}" for n, ln in path[start:]) + f" -> {target}")
            elif target not in state:
                visit(target)
            path.pop()
        state[node] = 2

    for name in sorted(MODULES):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles (module:line of each import):\n" + "\n".join(cycles)


#: The floors, lowest first, and the modules on each (a folder by its prefix). A module
#: imports only from its own floor and those below: a format never an analysis, an analysis
#: never the recording machinery, the recorder's core never a recording.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "core",  # the compiled recorder, its Python face and what it stands on
        (
            "hotspan._api",
            "hotspan._asyncio_steps",
            "hotspan._callbacks",
            "hotspan._core_drops",
            "hotspan._lifecycle",
            "hotspan._machine",
            "hotspan._public_api",
            "hotspan._run",
            "hotspan._schema",
            "hotspan._selftime",
            "hotspan._table",
            "hotspan._version",
            "hotspan._devices",
            "hotspan.events",
            "hotspan.instrumentation",
            "hotspan.proxy",
            "hotspan._quiet_threads",
            "hotspan.schema",
            "hotspan.sync",
            "hotspan._units",
        ),
    ),
    # a span table's columns and stacks; which spans are one collective across ranks
    ("table", ("hotspan._columns", "hotspan._flame", "hotspan._collective_match")),
    # counters: their table, files and per-span figures, beside the formats that write them
    ("formats", ("hotspan.formats", "hotspan.counters")),
    ("analysis", ("hotspan.analysis",)),
    ("report", ("hotspan.report",)),
    ("recording", ("hotspan.recording",)),
    (
        "faces",
        (
            "hotspan.cli",
            "hotspan.serve",
            "hotspan.__main__",
            "hotspan._demo",
            "hotspan.notebook",
            "hotspan.pytest_plugin",
            "hotspan.testing",
        ),
    ),
]
#: ``hotspan`` itself (its ``__init__``) is the package's face: it imports from every floor.
FACE = "hotspan"


def floor_of(name: str) -> int | None:
    if name == FACE:
        return len(FLOORS) - 1
    for level, (_floor, prefixes) in enumerate(FLOORS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return level
    return None


def test_every_module_stands_on_a_floor():
    assert [name for name in MODULES if floor_of(name) is None] == []


def test_modules_import_only_from_their_floor_and_below():
    up = []
    for name in MODULES:
        for line, target in edges(name):
            here, there = floor_of(name), floor_of(target)
            if here is not None and there is not None and there > here:
                up.append(
                    f"{MODULES[name].relative_to(SRC)}:{line}: {FLOORS[here][0]} imports "
                    f"{target} ({FLOORS[there][0]})"
                )
    assert not up, "imports from a floor above:\n" + "\n".join(up)


def test_every_public_module_says_what_it_offers():
    # __all__ in every module whose name has no underscored part (issue 34: "a smaller
    # face"), each name in it defined or imported there
    missing, unknown = [], []
    for name, path in MODULES.items():
        if any(is_private(part) for part in name.split(".")) or name.endswith("__main__"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        declared = None
        defined: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        defined.add(target.id)
                        if target.id == "__all__" and node in tree.body:
                            declared = ast.literal_eval(node.value)
        if declared is None:
            missing.append(str(path.relative_to(SRC)))
        else:
            unknown += [f"{path.relative_to(SRC)}: {n}" for n in declared if n not in defined]
    assert missing == [], "modules without __all__"
    assert unknown == [], "names in __all__ the module does not have"
