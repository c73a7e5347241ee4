"""After ``%load_ext hotspan``, a cell ending in the table ``stats``, ``phases`` or
``compare`` returns shows it as HTML (issue 32, item 5): an IPython formatter registered by
the type's name, no pyarrow imported for it and nothing of pyarrow's patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from IPython.core.interactiveshell import InteractiveShell

import hotspan


@pytest.fixture
def shell():
    shell = InteractiveShell.instance()
    assert shell.run_cell("%load_ext hotspan").success
    yield shell
    shell.run_cell("%unload_ext hotspan")


@pytest.fixture(scope="module")
def spans():
    hotspan.enable()
    hotspan.drain()
    for _ in range(3):
        with hotspan.span("step", "train"):
            with hotspan.span("forward", "compute"):
                sum(range(1_000))
            with hotspan.span("test_matmul[param]", "comms"):
                pass
    return hotspan.drain()


def shown(shell, expression: str, namespace: dict) -> dict:
    """What the shell's display hook would send a front end for a cell ending in
    ``expression``: its value run through the shell's own display formatter."""
    shell.user_ns.update(namespace)
    result = shell.run_cell(expression, store_history=False)
    assert result.success, result.error_in_exec
    data, _ = shell.display_formatter.format(result.result)
    return data


def test_stats_phases_and_compare_show_as_html(shell, spans):
    names = {"hotspan": hotspan, "t": spans}
    stats_html = shown(shell, "hotspan.stats(t)", names)["text/html"]
    assert (
        stats_html.startswith('<table class="hotspan"') and "hotspan stats: 3 groups" in stats_html
    )
    assert ">test_matmul[param]</td>" in stats_html and ">self %</th>" in stats_html
    phases_html = shown(shell, "hotspan.phases(t)", names)["text/html"]
    assert "hotspan phases" in phases_html and ">% of phase</th>" in phases_html
    assert ">train/compute</td>" in phases_html
    compare_html = shown(shell, "hotspan.compare(t, t)", names)["text/html"]
    assert "hotspan compare: " in compare_html and ">same</td>" in compare_html
    # any other table keeps pyarrow's own text, and pyarrow is not patched
    other = shown(shell, "t.select(['name'])", names)
    assert "text/html" not in other and "pyarrow.Table" in other["text/plain"]
    import pyarrow as pa

    assert "_repr_html_" not in vars(pa.Table)


def test_unload_takes_the_formatter_back(shell, spans):
    shell.run_cell("%unload_ext hotspan")
    assert "text/html" not in shown(shell, "hotspan.stats(t)", {"hotspan": hotspan, "t": spans})
    shell.run_cell("%load_ext hotspan")
    shell.run_cell("%load_ext hotspan")  # twice: still one formatter
    assert "text/html" in shown(shell, "hotspan.stats(t)", {"hotspan": hotspan, "t": spans})


def test_loading_the_extension_imports_no_pyarrow():
    code = textwrap.dedent(
        """
        import json, sys
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        ok = shell.run_cell("%load_ext hotspan").success
        print(json.dumps([ok, sorted(m for m in ("pyarrow", "numpy") if m in sys.modules)]))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, []]
