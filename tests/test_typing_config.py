"""The type gate's configuration: ``mypy src/hotspan`` (.ci/run) checks the whole package
strictly. Only third-party libraries (no type information) get overrides of their own; a
``# type: ignore`` in the package always names the error it silences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the gate is the same on 3.10

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "hotspan"
#: Our modules an override may relax: none.
RELAXED_FOR_NOW: set[str] = set()


def mypy_config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def test_the_whole_package_is_checked_strictly():
    config = mypy_config()
    assert config.get("strict") is True
    assert config.get("files") == ["src/hotspan"]
    for name in ("ignore_errors", "follow_imports"):
        assert name not in config, f"[tool.mypy] {name} would let modules of ours through"


def test_overrides_are_for_third_party_libraries_only():
    for override in mypy_config().get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        ours = {m for m in modules if m == "hotspan" or m.startswith("hotspan.")}
        assert ours <= RELAXED_FOR_NOW, f"an override for {sorted(ours - RELAXED_FOR_NOW)}"
        if not ours:  # a library without type information: only told to be skipped
            assert set(override) == {"module", "ignore_missing_imports"}, override
        assert not override.get("ignore_errors"), override


def test_every_type_ignore_names_its_error_code():
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"#\s*type:\s*ignore(?!\[)", line):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "a type: ignore without its error code:\n" + "\n".join(bare)
