"""Underscore hotspan's internal modules, as msgspec does: ``hotspan.formats.parquet`` becomes
``hotspan.formats._parquet``, and every spelling of the old name in the repository follows.

The mapping below names each internal module; the public ones are listed, with their names,
in ``src/hotspan/_public_api.py`` (``tests/test_public_api.py`` holds every module to be one
or the other). The script is idempotent: a module already moved is left alone, and a run
after other branches were merged moves what is left and rewrites the old spellings they
brought in. Run it from the repository root, then the tests::

    python tools/underscore_modules.py            # git mv + rewrite; prints what it did
    python tools/underscore_modules.py --check    # exit 1 if anything is left to do

What it rewrites, in the tracked files of src/, tests/, benchmarks/, docs/, examples/,
tools/ (but itself), README.md, CONTRIBUTING.md, pyproject.toml, mkdocs.yml, CMakeLists.txt
and .ci/ (CHANGELOG.md is history, left as written):

- ``from X import N`` (absolute or relative, one line or parenthesised): X's renamed parts,
  and a module N renamed to ``_N as N`` (its users' code keeps the name it had);
- any dotted ``hotspan.a.b`` spelling (``import`` lines, strings handed to
  ``importlib``/``monkeypatch``, ``::: hotspan.x`` in docs, mypy overrides, prose);
- source paths (``src/hotspan/formats/parquet.py``, ``formats/parquet.py``);
- the format registry's module column (``formats/registry.py``: ``("csv", "csv", ...)``).

Only whole names that resolve to a module of the mapping change: metadata keys such as
``b"hotspan.ranks"`` name no module and stay.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: Internal modules (old name -> new). Only the last part changes; a private package's
#: modules keep their names (``hotspan._devices.cuda``).
INTERNAL = [
    # analysis: the engines and kernels behind stats/phases/compare/ranks
    "hotspan.analysis.api",
    "hotspan.analysis.benchmark_comparison",
    "hotspan.analysis.duckdb_source",
    "hotspan.analysis.engine",
    "hotspan.analysis.group_batches",
    "hotspan.analysis.kernels",
    "hotspan.analysis.options",
    "hotspan.analysis.parquet_scan",
    "hotspan.analysis.phase_kernel",
    "hotspan.analysis.phase_parts",
    "hotspan.analysis.process_phases",
    "hotspan.analysis.queries",
    "hotspan.analysis.rank_arrays",
    "hotspan.analysis.rank_kernel",
    "hotspan.analysis.rank_reasons",
    "hotspan.analysis.rank_source",
    "hotspan.analysis.rank_workload",
    "hotspan.analysis.significance",
    "hotspan.analysis.spark",
    "hotspan.analysis.streamed_phases",
    "hotspan.analysis.streaming",
    "hotspan.analysis.timeline_index",
    "hotspan.analysis.timeline_kernel",
    "hotspan.analysis.timeline_source",
    "hotspan.analysis.timeline_store",
    "hotspan.analysis.timeline_fine",
    "hotspan.analysis.timeline_blocks",
    # cli: one module per command; the public face is hotspan.cli (main, build_parser)
    "hotspan.cli.collect",
    "hotspan.cli.commands",
    "hotspan.cli.common",
    "hotspan.cli.compact",
    "hotspan.cli.compare",
    "hotspan.cli.completion",
    "hotspan.cli.demo",
    "hotspan.cli.errors",
    "hotspan.cli.export",
    "hotspan.cli.gantt",
    "hotspan.cli.hang",
    "hotspan.cli.ranks",
    "hotspan.cli.recover",
    "hotspan.cli.report",
    "hotspan.cli.run",
    "hotspan.cli.runs",
    "hotspan.cli.serve",
    "hotspan.cli.stats",
    "hotspan.cli.tables",
    "hotspan.cli.top",
    # the package's helpers
    "hotspan.collective_match",
    "hotspan.demo",
    "hotspan.devices",
    "hotspan.quiet_threads",
    "hotspan.units",
    # formats: one module per format behind hotspan.export/load and hotspan.formats
    "hotspan.formats.arrow_ipc",
    "hotspan.formats.base",
    "hotspan.formats.chrome_json",
    "hotspan.formats.codec_inputs",
    "hotspan.formats.collector_client",
    "hotspan.formats.csv",
    "hotspan.formats.flight",
    "hotspan.formats.folded",
    "hotspan.formats.jsonl",
    "hotspan.formats.lanes",
    "hotspan.formats.parquet",
    "hotspan.formats.perfetto",
    "hotspan.formats.perfetto_counters",
    "hotspan.formats.registry",
    "hotspan.formats.speedscope",
    "hotspan.formats.uri",
    # instrumentation: loaded by name through hotspan.instrument()
    "hotspan.instrumentation.mlx",
    "hotspan.instrumentation.torch_distributed",
    # recording: the machinery behind record(), live(), subscribe()
    "hotspan.recording.children",
    "hotspan.recording.collector",
    "hotspan.recording.hub",
    "hotspan.recording.open_stacks",
    "hotspan.recording.rawlog",
    "hotspan.recording.sinks",
    "hotspan.recording.supervisor",
    # report: the pieces html_report and the CLI assemble
    "hotspan.report.flame",
    "hotspan.report.gantt",
    "hotspan.report.layout",
    # serve: its routes' helpers and the server; the face is hotspan.serve (Server, create_app)
    "hotspan.serve.pages",
    "hotspan.serve.queries",
    "hotspan.serve.runs",
    "hotspan.serve.server",
]


def underscored(name: str) -> str:
    head, _, last = name.rpartition(".")
    return f"{head}._{last}"


MAPPING: dict[str, str] = {old: underscored(old) for old in INTERNAL}
INVERSE = {new: old for old, new in MAPPING.items()}

ROOTS = ("src", "tests", "benchmarks", "docs", "examples", "tools", ".ci")
FILES = ("README.md", "CONTRIBUTING.md", "pyproject.toml", "mkdocs.yml", "CMakeLists.txt")
SUFFIXES = {".py", ".pyi", ".pyx", ".pxd", ".md", ".toml", ".yml", ".yaml", ".txt", ".sh", ".cfg"}
LEFT_ALONE = {"CHANGELOG.md", "tools/underscore_modules.py"}


def convert(name: str, table: dict[str, str]) -> str:
    """``name`` (dotted, module or module.attribute) with each prefix found in ``table``
    renamed, outermost first (a renamed package's modules follow it)."""
    parts = name.split(".")
    original = parts[:]
    for i in range(len(parts)):
        prefix = ".".join(original[: i + 1])
        if prefix in table:
            parts[i] = table[prefix].rpartition(".")[2]
    return ".".join(parts)


def renamed(name: str) -> str:
    """The new spelling of ``name``, whether it is spelled the old way or already the new."""
    return convert(convert(name, INVERSE), MAPPING)


def is_renamed_module(name: str) -> bool:
    return convert(name, INVERSE) in MAPPING


# ------------------------------------------------------------------------------- moving


def module_paths(name: str) -> list[Path]:
    """The files (or the package folder) of a module: ``x.py`` with its ``.pyi``/``.pyx``."""
    base = SRC.joinpath(*name.split("."))
    if base.is_dir():
        return [base]
    return [
        base.with_suffix(s) for s in (".py", ".pyi", ".pyx", ".pxd") if base.with_suffix(s).exists()
    ]


def move(dry: bool) -> list[str]:
    done = []
    # parents before children never matter: only last parts change, and a renamed package's
    # modules are not in the mapping themselves
    for old, new in MAPPING.items():
        sources = module_paths(old)
        targets = module_paths(new)
        if sources and targets:
            raise SystemExit(f"both {old} and {new} exist: merge them by hand first")
        for source in sources:
            target = source.with_name("_" + source.name)
            done.append(f"git mv {source.relative_to(ROOT)} {target.relative_to(ROOT)}")
            if not dry:
                subprocess.run(["git", "mv", str(source), str(target)], cwd=ROOT, check=True)
    return done


# ------------------------------------------------------------------------------ rewriting

DOTTED = re.compile(r"(?<![\w.])hotspan(?:\.\w+)+")
FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]+"
    r"(?P<names>\([^)]*\)|[^\n]*)",
    re.MULTILINE,
)
IMPORTED = re.compile(r"(?P<name>\w+)(?P<alias>[ \t]+as[ \t]+\w+)?")
PATH = re.compile(
    r"(?<![\w/.])(?P<prefix>(?:src/)?hotspan/)?(?P<path>(?:\w+/)+\w+|\w+)(?P<suffix>\.pyx?|\.pyi|/)(?!\w)"
)
REGISTRY_ROW = re.compile(r'(\(\s*"[\w-]+",\s*")(\w+)(",)')


def package_binds(package: str, name: str) -> bool:
    """Whether the package ``package``'s ``__init__`` binds ``name`` to something other than
    its submodule (``report/__init__.py``: ``from .gantt import gantt``, a function): then
    ``from package import name`` means that, and stays."""
    init = SRC.joinpath(*renamed(package).split(".")) / "__init__.py"
    if not init.is_file():
        init = SRC.joinpath(*convert(package, INVERSE).split(".")) / "__init__.py"
    if not init.is_file():
        return False
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, ast.ImportFrom):
            submodule = node.level == 1 and not node.module
            for alias in node.names:
                if (alias.asname or alias.name) == name and not (
                    submodule and alias.name.lstrip("_") == name.lstrip("_")
                ):
                    return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def module_of(path: Path) -> str | None:
    """The module a source file under src/ is (its name after any moves), else None."""
    try:
        parts = list(path.relative_to(SRC).with_suffix("").parts)
    except ValueError:
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(importer: str | None, is_package: bool, spec: str) -> tuple[str, int] | None:
    """(the absolute module ``from spec import`` names in ``importer``, the number of leading
    components that the dots stand for), or None where it is not ours."""
    level = len(spec) - len(spec.lstrip("."))
    rest = spec[level:]
    if level == 0:
        return (rest, 0) if rest == "hotspan" or rest.startswith("hotspan.") else None
    if importer is None:
        return None
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([rest] if rest else [])), len(base)


def rewrite_from(match: re.Match[str], importer: str | None, is_package: bool) -> str:
    spec = match["module"]
    found = resolve(importer, is_package, spec)
    if found is None:
        return match[0]
    absolute, dotted_parts = found
    new_absolute = renamed(absolute)
    if spec.startswith("."):
        level = len(spec) - len(spec.lstrip("."))
        tail = new_absolute.split(".")[dotted_parts:]
        new_spec = "." * level + ".".join(tail)
    else:
        new_spec = new_absolute

    def name(m: re.Match[str]) -> str:
        if m["name"] == "import" or m["name"] == "as":
            return m[0]
        full = f"{absolute}.{m['name']}"
        if is_renamed_module(full) and not package_binds(absolute, m["name"]):
            new = renamed(full).rpartition(".")[2]
            if new != m["name"]:
                return new + (m["alias"] or f" as {m['name']}")
        return m[0]

    names = match["names"]
    code, hash_, comment = names.partition("#") if not names.startswith("(") else (names, "", "")
    if names.startswith("("):
        # parenthesised: comments inside are kept line by line
        lines = []
        for line in names.split("\n"):
            code_part, h, comment_part = line.partition("#")
            lines.append(IMPORTED.sub(name, code_part) + h + comment_part)
        new_names = "\n".join(lines)
    else:
        new_names = IMPORTED.sub(name, code) + hash_ + comment
    head = match[0][: match.start("module") - match.start(0)]
    middle = match[0][match.end("module") - match.start(0) : match.start("names") - match.start(0)]
    return head + new_spec + middle + new_names


def rewrite_path(match: re.Match[str]) -> str:
    prefix, path, suffix = match["prefix"] or "", match["path"], match["suffix"]
    if not prefix and "/" not in path:
        return match[0]  # a bare file name (demo.py) is anyone's
    name = "hotspan." + path.replace("/", ".")
    if not is_renamed_module(name) and not any(
        is_renamed_module(".".join(name.split(".")[: i + 1])) for i in range(1, name.count(".") + 1)
    ):
        return match[0]
    new = renamed(name)[len("hotspan.") :].replace(".", "/")
    return prefix + new + suffix


def rewrite(path: Path, text: str) -> str:
    importer = module_of(path) if path.suffix in {".py", ".pyi", ".pyx", ".pxd"} else None
    if importer is not None:
        importer = renamed(importer)  # moved files resolve by their new names
    is_package = path.name == "__init__.py"
    if path.suffix in {".py", ".pyi", ".pyx", ".pxd"} or path.suffix == ".md":
        text = FROM_IMPORT.sub(lambda m: rewrite_from(m, importer, is_package), text)
    text = DOTTED.sub(lambda m: renamed(m[0]), text)
    text = PATH.sub(rewrite_path, text)
    if path.name in ("registry.py", "_registry.py") and path.parent.name == "formats":
        text = REGISTRY_ROW.sub(
            lambda m: (
                m[1] + renamed(f"hotspan.formats.{m[2]}").rpartition(".")[2] + m[3]
                if is_renamed_module(f"hotspan.formats.{m[2]}")
                else m[0]
            ),
            text,
        )
    return text


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *ROOTS, *FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    out = []
    for name in filter(None, listed):
        path = ROOT / name
        if name in LEFT_ALONE or not path.is_file():
            continue
        if path.suffix in SUFFIXES or path.name in FILES or name.startswith(".ci/"):
            out.append(path)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any is due")
    args = parser.parse_args()
    moves = move(dry=args.check)
    changed = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        new = rewrite(path, text)
        if new != text:
            changed.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for line in moves:
        print(line)
    for name in changed:
        print(f"rewrote {name}")
    print(
        f"{len(moves)} moved, {len(changed)} files rewritten"
        + (" (check only)" if args.check else "")
    )
    return 1 if args.check and (moves or changed) else 0


if __name__ == "__main__":
    sys.exit(main())
