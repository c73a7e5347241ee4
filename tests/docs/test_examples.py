"""Every ```python example of the documentation (docs/**/*.md) and of README.md runs.

Each page's examples run in order, in one fresh interpreter (a page's examples build on
each other), in a fresh temporary working directory. An example that needs what a test
machine has not got (a CUDA GPU, object storage, a launcher) is preceded by a comment
saying so, ``<!-- skip: needs a CUDA GPU -->``, and is skipped with that reason; one that
needs an optional package, ``<!-- requires: mlx -->``, runs where it is installed. The
skipped examples are reported, never hidden.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md"])
FENCE = re.compile(
    r"^(?:<!-- skip: (?P<reason>[^>]*?) -->\n|<!-- requires: (?P<module>[\w.]+) -->\n)?"
    r"```python[^\n]*\n(?P<code>.*?)^```\s*$",
    re.MULTILINE | re.DOTALL,
)

# Runs the examples of one page, in order, in one namespace; says which one failed. The
# namespace is the __main__ module's, as a script's is: pickle finds a function an example
# defines there (a pool's function is sent to its workers by name).
RUNNER = r"""
import json, sys, traceback, types
examples = json.load(sys.stdin)
main = sys.modules["__main__"] = types.ModuleType("__main__")
namespace = main.__dict__
for line, code in examples:
    try:
        exec(compile(code, f"{sys.argv[1]}:{line}", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"EXAMPLE FAILED: {sys.argv[1]}, the example at line {line}", file=sys.stderr)
        sys.exit(1)
"""


def examples(page: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(examples to run, examples skipped with their reasons), as (line, code/reason)."""
    text = page.read_text(encoding="utf-8")
    run, skipped = [], []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        module = match.group("module")
        if match.group("reason"):
            skipped.append((line, match.group("reason")))
        elif module and importlib.util.find_spec(module.split(".")[0]) is None:
            skipped.append((line, f"needs {module}, not installed"))
        else:
            run.append((line, match.group("code")))
    return run, skipped


def test_the_pages_have_examples():
    counted = {page.relative_to(ROOT).as_posix(): len(examples(page)[0]) for page in PAGES}
    assert counted["README.md"] >= 1
    assert sum(counted.values()) >= 30, counted


# Only the pages with a python block: a page of prose has nothing to run (not a skip).
PAGES_WITH_EXAMPLES = [page for page in PAGES if FENCE.search(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_run(page, tmp_path):
    run, skipped = examples(page)
    if not run:
        pytest.skip(
            f"no example to run ({len(skipped)} skipped: {'; '.join(r for _l, r in skipped)})"
            if skipped
            else "no example"
        )
    # Not recording the examples' process into wherever the test run's HOTSPAN_OUT points.
    env = {
        k: v for k, v in os.environ.items() if k not in ("HOTSPAN_OUT", "HOTSPAN_RECORD_CHILDREN")
    } | {"COLUMNS": "100"}
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, page.relative_to(ROOT).as_posix()],
        input=json.dumps(run),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]


def test_the_readmes_first_example_needs_only_what_pip_install_brings(tmp_path):
    """`pip install .` brings pyarrow, numpy, rich and duckdb, not pandas: the README's first
    example must run without it (``table.to_pandas()`` there failed after the first command)."""
    first_line, first = examples(ROOT / "README.md")[0][0]
    blocker = (
        "import sys\nsys.modules['pandas'] = None  # as if not installed: importing it fails\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocker + first],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"README.md:{first_line}: {result.stderr[-2000:]}"
