"""``hotspan completion bash|zsh|fish``: a shell completion script, generated from the parsers.

The script lists the commands and each command's options as the parsers define them now,
so it never misses a new option (regenerate it after an upgrade); arguments complete as
file names.
"""

from __future__ import annotations

import argparse
import re
import sys

from ._common import add_command

__all__ = ["SHELLS", "bash_script", "cmd_completion", "fish_script", "register", "zsh_script"]

SHELLS = ("bash", "zsh", "fish")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan completion`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        "Print the completion script of SHELL for hotspan's commands and options on stdout. Load it in your "
        "shell's start-up file as the examples show.",
        'eval "$(hotspan completion bash)"                      # in ~/.bashrc\n'
        'eval "$(hotspan completion zsh)"                       # in ~/.zshrc (after compinit)\n'
        "hotspan completion fish > ~/.config/fish/completions/hotspan.fish",
        cmd_completion,
    )
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    return parser


def _commands(
    parser: argparse.ArgumentParser,
) -> dict[str, tuple[str, list[tuple[list[str], str, bool]]]]:
    """command -> (its help, [(option strings, help, takes a value)])."""
    out: dict[str, tuple[str, list[tuple[list[str], str, bool]]]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                options = [
                    (list(a.option_strings), a.help or "", a.nargs != 0)
                    for a in sub._actions
                    if a.option_strings
                ]
                out[name] = (helps.get(name, ""), options)
    return out


def _global_options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings]


def _plain(text: str, length: int = 70) -> str:
    """Help text safe inside any of the three shells' quoting: no quotes, brackets or colons."""
    text = re.sub(r"[\"'`\[\]:$\\]", "", text.replace("%%", "%")).replace("\n", " ")
    return text if len(text) <= length else text[: length - 1] + "…"


def bash_script(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    cases = "\n".join(
        f'        {name}) opts="{" ".join(s for o, _h, _v in options for s in o)}" ;;'
        for name, (_help, options) in commands.items()
    )
    return f"""# bash completion for hotspan (hotspan completion bash)
_hotspan() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} command="" opts="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in -*) ;; *) command=${{COMP_WORDS[i]}}; break ;; esac
    done
    if [[ -z $command ]]; then
        COMPREPLY=($(compgen -W "{" ".join(commands)} {" ".join(_global_options(parser))}" -- "$cur"))
        return
    fi
    case $command in
{cases}
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _hotspan hotspan
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    described = "\n".join(
        f"        '{name}:{_plain(help)}'" for name, (help, _o) in commands.items()
    )
    cases = []
    for name, (_help, options) in commands.items():
        specs = []
        for strings, help, takes_value in options:
            for s in strings:
                specs.append(f"'{s}[{_plain(help)}]{':value:' if takes_value else ''}'")
        cases.append(f"        {name}) _arguments -s {' '.join(specs)} '*:file:_files' ;;")
    return f"""#compdef hotspan
# zsh completion for hotspan (hotspan completion zsh)
_hotspan() {{
    local -a commands
    commands=(
{described}
    )
    if (( CURRENT == 2 )); then
        _describe 'hotspan command' commands
        return
    fi
    words=("${{(@)words[2,-1]}}")
    (( CURRENT-- ))
    case $words[1] in
{chr(10).join(cases)}
    esac
}}
compdef _hotspan hotspan
"""


def fish_script(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    lines = ["# fish completion for hotspan (hotspan completion fish)", "complete -c hotspan -f"]
    for name, (help, _options) in commands.items():
        lines.append(f"complete -c hotspan -n __fish_use_subcommand -a {name} -d '{_plain(help)}'")
    for name, (_help, options) in commands.items():
        lines.append(f"complete -c hotspan -n '__fish_seen_subcommand_from {name}' -F")
        for strings, help, takes_value in options:
            flags = []
            for s in strings:
                flags.append(f"-l {s[2:]}" if s.startswith("--") else f"-s {s[1:]}")
            lines.append(
                f"complete -c hotspan -n '__fish_seen_subcommand_from {name}' {' '.join(flags)}"
                f"{' -r' if takes_value else ''} -d '{_plain(help)}'"
            )
    return "\n".join(lines) + "\n"


def cmd_completion(args: argparse.Namespace) -> int:
    parser = args.root_parser  # set by commands.build_parser
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell](parser)
    sys.stdout.write(script)
    return 0
