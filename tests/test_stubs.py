"""The type stubs of the compiled modules (.pyi) name exactly what the modules hold, so a
function added in C or Cython without its stub (or a stub left after a removal) fails here."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

import hotspan

PACKAGE = Path(hotspan.__file__).parent

#: Names a stub declares for typing only, absent from the module on purpose.
TYPE_ONLY = {
    # a TypeVar and a buffer alias of the stubs
    "_F",
    "_Buffer",
    # the class of span(..., device="cuda") objects: returned by span(), never exported
    "device_span",
}
#: Module attributes a stub leaves out on purpose.
NOT_API = {
    "_i",  # _chrome_codec's module-level loop variable (filling its digit table)
}


def stub_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            # "from x import y as y": an explicit re-export
            names.update(a.asname for a in node.names if a.asname and a.asname == a.name)
    return names


def module_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not (name.startswith("__") and name.endswith("__"))
        and not name.startswith("__pyx_")  # Cython's own helpers (pickling support)
        and not isinstance(value, types.ModuleType)
        and name not in NOT_API
    }


@pytest.mark.parametrize(
    "module_name",
    [
        "hotspan._native",
        "hotspan._span_tree",
        "hotspan.analysis._scan_kernel",
        "hotspan.formats._chrome_codec",
        "hotspan.formats._perfetto_codec",
    ],
)
def test_stub_names_match_the_compiled_module(module_name):
    module = importlib.import_module(module_name)
    # next to the package's .py files (an editable install keeps the .so elsewhere)
    stub = PACKAGE.joinpath(*module_name.split(".")[1:]).with_suffix(".pyi")
    assert stub.is_file(), f"{module_name} has no stub next to it"
    in_stub = stub_names(stub) - TYPE_ONLY
    in_module = module_names(module)
    assert sorted(in_module - in_stub) == [], f"in {module_name} but not in {stub.name}"
    assert sorted(in_stub - in_module) == [], f"in {stub.name} but not in {module_name}"
