"""The rendering test's two paths without a browser: a one-line skip naming the package to
install, or, with HOTSPAN_REQUIRE_BROWSER=1 (as in .ci/run), a failure, never a skip."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
from pathlib import Path

HTML_TEST = Path(__file__).with_name("test_report_html.py")


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def path_without_browser(tmp_path) -> str:
    """PATH as it is, except that a folder holding a browser is replaced by a copy (of
    links) without it: the editable install's rebuild still finds cmake and the compiler."""
    folders = []
    for i, folder in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        entries = os.listdir(folder) if os.path.isdir(folder) else []
        if not any(name in entries for name in BROWSERS):
            folders.append(folder)
            continue
        shadow = tmp_path / f"path{i}"
        shadow.mkdir()
        for name in entries:
            if name not in BROWSERS:
                (shadow / name).symlink_to(os.path.join(folder, name))
        folders.append(str(shadow))
    return os.pathsep.join(folders)


def run_without_browser(tmp_path, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "HOTSPAN_REQUIRE_BROWSER"}
    environment.update(PATH=path_without_browser(tmp_path), **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(HTML_TEST),
            "-k",
            "chromium",
            "-m",
            "slow or not slow",  # the browser tests are in the slow tier
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=HTML_TEST.parents[2],
        timeout=300,
    )


@pytest.mark.slow
def test_missing_browser_skips_with_the_package_to_install(tmp_path):
    result = run_without_browser(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout and "failed" not in result.stdout
    reason = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(reason) == 1 and reason[0].endswith(
        "headless Chromium not on PATH: apt-get install chromium"
    ), result.stdout


@pytest.mark.slow
def test_missing_browser_fails_when_required(tmp_path):
    result = run_without_browser(tmp_path, HOTSPAN_REQUIRE_BROWSER="1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout and "skipped" not in result.stdout
    assert "apt-get install chromium (HOTSPAN_REQUIRE_BROWSER=1 requires it)" in result.stdout
