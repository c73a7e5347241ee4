"""The public API is listed in one place (``hotspan._public_api.PUBLIC_API``) and stays that
list: every module whose name has no underscored part is in it with exactly its
``__all__``, each name importable; every other module is internal (underscored, or named in
``tools/underscore_modules.py``'s mapping until the lead runs it); and the API reference
page documents exactly the listed modules."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hotspan._public_api import PUBLIC_API

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGE = ROOT / "docs" / "reference" / "modules.md"


def underscore_tool():
    spec = importlib.util.spec_from_file_location(
        "underscore_modules", ROOT / "tools" / "underscore_modules.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def module_names() -> set[str]:
    names = set()
    for path in (SRC / "hotspan").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.add(".".join(parts))
    return names


def is_internal(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")) or name.endswith("__main__")


def test_every_module_is_public_and_listed_or_internal():
    pending = set(underscore_tool().MAPPING)  # internal, still to be underscored

    def is_pending(name: str) -> bool:  # it or a package above it
        parts = name.split(".")
        return any(".".join(parts[: i + 1]) in pending for i in range(len(parts)))

    not_listed = sorted(
        name
        for name in module_names()
        if not is_internal(name) and name not in PUBLIC_API and not is_pending(name)
    )
    assert not_listed == [], (
        "modules neither in hotspan/_public_api.py (public) nor underscored/in "
        "tools/underscore_modules.py (internal): decide which"
    )
    both = sorted(set(PUBLIC_API) & pending)
    assert both == [], "listed as public and mapped to be underscored"


def test_every_listed_module_exists_and_is_public():
    names = module_names()
    assert sorted(name for name in PUBLIC_API if name not in names) == []
    assert sorted(name for name in PUBLIC_API if is_internal(name)) == []


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_each_public_module_offers_exactly_its_listed_names(name):
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert declared is not None, f"{name} has no __all__"
    assert len(declared) == len(set(declared)), f"{name}.__all__ names a name twice"
    assert sorted(declared) == sorted(PUBLIC_API[name]), (
        f"{name}.__all__ differs from hotspan/_public_api.py: a public name added or removed"
    )
    missing = [n for n in declared if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what it does not have"


def test_the_reference_page_documents_exactly_the_public_modules():
    documented = re.findall(r"^::: (hotspan[\w.]*)\s*$", PAGE.read_text(), re.MULTILINE)
    assert sorted(documented) == sorted(PUBLIC_API)


def test_no_old_name_of_an_underscored_module_is_left():
    """After a merge, code written against an internal module's old name (the name without
    its underscore) fails here, naming the files, until ``python tools/underscore_modules.py``
    is run again."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tool reads git's list of files")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "underscore_modules.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
