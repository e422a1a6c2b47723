"""Shell completion for ``elastic-compile``: bash, zsh and fish scripts generated from its parsers.

The scripts come from shtab, which reads the same ``argparse`` parsers the commands parse
with, so an option added to a command is completed without anyone writing completion code.
The command line dispatches its first word by hand (``schema``, ``import``, ``doctor``,
``run``, ``completion``, else specs to compile); for shtab those become subcommands of the
compile parser. The script is static: a Tab runs no Python.
"""

from __future__ import annotations

import argparse
from typing import Any

#: Shells a script is generated for.
SHELLS = ("bash", "zsh", "fish")


def _complete(action: argparse.Action, what: Any) -> None:
    action.complete = what  # type: ignore[attr-defined]  # shtab reads this attribute


def completion_parser() -> argparse.ArgumentParser:
    """The whole command line as one parser: compile options and specs, the other commands as subcommands."""
    import shtab

    from elastic_compile.compiler import cli
    from elastic_compile.localrun.cli import build_parser as run_parser

    paths: dict[str, Any] = {
        "specs": shtab.FILE,
        "output": shtab.DIRECTORY,
        "check": shtab.FILE,
        "templates": shtab.DIRECTORY,
        "root": shtab.DIRECTORY,
        "manifest": shtab.FILE,
        "manifests": shtab.FILE,
        "source": shtab.FILE,
        "workdir": shtab.DIRECTORY,
        "python": shtab.FILE,
        "kubeconfig": shtab.FILE,
    }
    root = cli._parser()
    commands = {
        "schema": cli._schema_parser(),
        "import": cli._import_parser(),
        "doctor": cli._doctor_parser(),
        "run": run_parser(),
        "completion": cli._completion_parser(),
        "apply": cli._apply_parser(),
    }
    for parser in (root, *commands.values()):
        for action in parser._actions:
            if action.dest in paths:
                _complete(action, paths[action.dest])
    # The first word is a command or a spec, and shtab completes one positional there: the
    # commands. Where none matches, the shells fall back to file names (bash's -o bashdefault,
    # zsh's and fish's file completion), which is what a spec is.
    specs = next(action for action in root._actions if action.dest == "specs")
    root._remove_action(specs)
    root._positionals._group_actions.remove(specs)
    sub = root.add_subparsers(dest="command", metavar="COMMAND")
    for name, parser in commands.items():
        sub.add_parser(name, parents=[parser], add_help=False, help=parser.description, description=parser.description)
    return root


def script(shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    import shtab

    text: str = shtab.complete(completion_parser(), shell=shell)
    return text if text.endswith("\n") else text + "\n"
