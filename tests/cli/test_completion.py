"""``hotspan completion bash|zsh|fish``: scripts generated from the parsers, run by the shells."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hotspan.cli import main
from hotspan.cli._commands import COMMANDS


def script(shell: str, capsys) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def bash_complete(text: str, words: list[str], tmp_path) -> list[str]:
    """What bash's completion function offers for ``words`` (the last one being typed)."""
    (tmp_path / "completion.bash").write_text(text)
    program = (
        f"source {tmp_path / 'completion.bash'}; COMP_WORDS=({' '.join(words)}); "
        f"COMP_CWORD={len(words) - 1}; _hotspan; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    return result.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_options_and_files(capsys, tmp_path):
    text = script("bash", capsys)
    names = [module.__name__.rsplit(".", 1)[1].lstrip("_") for module in COMMANDS]
    assert bash_complete(text, ["hotspan", "''"], tmp_path) == sorted(
        names + ["-h", "--help", "--version"], key=(names + ["-h", "--help", "--version"]).index
    )
    assert bash_complete(text, ["hotspan", "st"], tmp_path) == ["stats"]
    assert bash_complete(text, ["hotspan", "stats", "--so"], tmp_path) == ["--sort"]
    assert "--perfetto-ui" in bash_complete(text, ["hotspan", "serve", "--"], tmp_path)
    (tmp_path / "trace.parquet").write_bytes(b"")
    assert bash_complete(text, ["hotspan", "stats", "tra"], tmp_path) == ["trace.parquet"]


@pytest.mark.parametrize(
    "shell, check", [("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])]
)
def test_zsh_and_fish_scripts_parse_and_name_every_command(shell, check, capsys, tmp_path):
    text = script(shell, capsys)
    for module in COMMANDS:
        assert module.__name__.rsplit(".", 1)[1].lstrip("_") in text
    assert "--perfetto-ui" in text or "-l perfetto-ui" in text
    if shutil.which(check[0]) is None:
        pytest.skip(f"{check[0]} is not installed: the script's syntax is not checked")
    path = tmp_path / f"hotspan.{shell}"
    path.write_text(text)
    result = subprocess.run([*check, str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_unknown_shell(capsys):
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_commands_and_options(capsys, tmp_path):
    path = tmp_path / "hotspan.fish"
    path.write_text(script("fish", capsys))
    program = f"source {path}; complete -C 'hotspan st'; complete -C 'hotspan stats --so'"
    lines = subprocess.run(
        ["fish", "-c", program], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["stats", "--sort"]
