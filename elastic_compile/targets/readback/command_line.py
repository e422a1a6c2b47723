"""The training container's command line, read: its launcher unwrapped, its settings and the program.

``torchrun``, ``python -m torch.distributed.run`` (or ``.launch``), ``elastic-launch`` with
our options (or the bundled launcher), and a plain ``sh -c`` script running one of them
(cd, export and set before it). What cannot be read is a located error in the draft.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from elastic_compile import contract
from elastic_compile.schema.launchers import (
    LauncherCall,
    LauncherSyntaxError,
    launcher_kind,
    nested_launcher,
    node0_torchrun,
    parse_torchrun,
)
from elastic_compile.targets.readback.draft import Draft, Path


@dataclass
class Launch:
    """The training container's command, read: the launcher, its settings and the program.

    ``settings`` maps torchrun's option names (``nnodes``, ``rdzv_conf``, ...; for
    elastic-launch also ``join_timeout`` and ``function``) to ``(text, argv index)``.
    ``launcher`` is None when the command runs no launcher (one process per pod).
    """

    argv: list[str]
    launcher: str | None = None
    settings: dict[str, tuple[str | bool, int]] = field(default_factory=dict)
    program: list[str] = field(default_factory=list)
    program_at: int | None = None
    function: str | None = None
    function_args: list[str] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list)  # from a shell script's export / K=V prefix
    working_dir: str | None = None  # from a shell script's cd
    shell_at: int | None = None  # the argv index of an unwrapped shell script
    bundled: bool = False  # elastic-launch as launcher: bundled runs it, from its ConfigMap
    compiled: bool = False  # torchrun as the compiler writes it for launcher: torchrun


_SHELLS = ("sh", "bash", "dash", "zsh", "ash")
_SHELL_CONTROL = frozenset({"|", "||", "&", "(", ")", "<", ">", ">>", "<<", ";;", "<&", ">&", "&>", "|&"})
_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def read_launch(argv: list[str], at: Callable[[int], Path], draft: Draft) -> Launch:
    """Read the container's command line; problems and notes go to ``draft`` (located by ``at``)."""
    launch = Launch(argv)
    if not argv:
        return launch
    node0 = node0_torchrun(argv)
    if node0 is not None:
        # The compiled TrainJob's torchrun, run by a shell that makes node 0 the store host.
        words, where = node0
        return read_launch(words, lambda i: at(where[min(i, len(where) - 1)]), draft)
    head = PurePosixPath(argv[0]).name
    if head in _SHELLS:
        return _read_shell(argv, at, draft)
    kind = launcher_kind(argv)
    if kind is None:
        launch.program = list(argv)
        launch.program_at = 0
        nested = nested_launcher(argv)
        if nested is not None:
            draft.fail(at(nested[0]), "a launcher the import cannot unwrap; write command: by hand")
        return launch
    if kind[0] == contract.LAUNCHER:
        launch.bundled = head != contract.LAUNCHER
        _read_elastic_launch(launch, argv, at, draft, kind[1])
    else:
        _read_torchrun(launch, argv, at, draft)
    if launch.program:
        inner = launcher_kind(launch.program) if launch.program else None
        nested = nested_launcher(launch.program)
        if inner is not None or nested is not None:
            draft.fail(
                at(launch.program_at or 0),
                f"{kind[0]} runs another launcher, so every worker would start its own; "
                "the import cannot tell which one you meant: write command: by hand",
            )
    return launch


def _read_torchrun(launch: Launch, argv: list[str], at: Callable[[int], Path], draft: Draft) -> None:
    try:
        call: LauncherCall = parse_torchrun(argv)
    except LauncherSyntaxError as e:
        draft.fail(at(e.index), str(e), argv[e.index] if 0 <= e.index < len(argv) else None)
        return
    launch.launcher = call.launcher
    launch.settings = {name: (value, call.where[name]) for name, value in call.options.items()}
    launch.program = list(call.program)
    launch.program_at = call.program_at
    # The compiler's torchrun form (launcher.torchrun_args) is the only one that takes its local
    # address from our downward-API variable: it becomes launcher: torchrun again.
    launch.compiled = call.launcher == contract.TORCHRUN and call.options.get("local_addr") == (
        f"$({contract.ENV_POD_IP})"
    )
    if not launch.compiled:
        draft.note(at(0), f"{call.launcher} unwrapped: elastic-launch is the launcher in the compiled job", "command")


def _read_elastic_launch(
    launch: Launch, argv: list[str], at: Callable[[int], Path], draft: Draft, start: int = 1
) -> None:
    """elastic-launch's options and command; ``start``: the index of its first option (2 when bundled)."""
    from elastic_compile.entrypoint.settings import UsageError, parse_options

    try:
        opts, command = parse_options(argv[start:])
    except UsageError as e:
        draft.fail(at(0), f"elastic-launch: {e}")
        return
    launch.launcher = contract.LAUNCHER
    given = {k: v for k, v in vars(opts).items() if v not in (None, False)}
    for name, value in given.items():
        opt = "--" + name.replace("_", "-")
        index = next((i for i, w in enumerate(argv) if w == opt or w.startswith(opt + "=")), 0)
        launch.settings[name] = (value, index)
    split = argv.index("--") + 1 if "--" in argv else len(argv)
    if opts.function is not None:
        launch.function = opts.function
        launch.function_args = list(command or [])
        launch.program_at = split if command else None
        launch.settings.pop("function", None)
    elif command:
        launch.program = list(command)
        launch.program_at = split
    else:
        draft.fail(at(0), "elastic-launch without a command after -- or --function")


def _read_shell(argv: list[str], at: Callable[[int], Path], draft: Draft) -> Launch:
    """``sh -c SCRIPT``: unwrap a launcher from a plain script (cd, export and set before it, nothing else)."""
    launch = Launch(argv, program=list(argv), program_at=0)
    index = next((i for i, w in enumerate(argv[1:], start=1) if not w.startswith("-")), None)
    flags = argv[1:index] if index is not None else argv[1:]
    if index is None or not any(f.startswith("-") and not f.startswith("--") and "c" in f for f in flags):
        return launch  # a script file: we cannot see inside it
    script = argv[index]
    nested = nested_launcher(argv)
    if nested is None:
        return launch  # no launcher inside: the shell command stays as it is
    words = _simple_script(script)
    if words is None:
        draft.fail(
            at(index),
            "runs a launcher inside a shell script the import cannot unwrap (only cd, export and set may come "
            "before it, joined by && or ;, without pipes, redirections, subshells or $(command)); "
            "write command: by hand",
        )
        return launch
    pre, last = words
    for command in pre:
        if command[0] == "cd" and len(command) == 2:
            launch.working_dir = command[1]
        elif command[0] == "export":
            for word in command[1:]:
                m = _ASSIGN.match(word)
                if m is None:
                    draft.fail(at(index), f"export {word}: the import reads only export NAME=VALUE")
                    return launch
                launch.env.append((m[1], m[2]))
    while last and (m := _ASSIGN.match(last[0])):
        launch.env.append((m[1], m[2]))
        last = last[1:]
    if last[:1] == ["exec"]:
        last = last[1:]
    if launcher_kind(last) is None:
        draft.fail(at(index), "the launcher is not the script's last command; write command: by hand")
        return launch
    inner = read_launch(last, lambda _i: at(index), draft)
    inner.shell_at = index
    inner.env = launch.env
    inner.working_dir = launch.working_dir
    # Positions inside the script are all the script's own word.
    inner.settings = {k: (v, index) for k, (v, _i) in inner.settings.items()}
    inner.program_at = index if inner.program_at is not None else None
    draft.note(at(index), f"the {PurePosixPath(argv[0]).name} script unwrapped", "command")
    return inner


def _simple_script(script: str) -> tuple[list[list[str]], list[str]] | None:
    """``(leading commands, last command)`` of a script of simple commands, or None.

    Kubernetes' ``$(NAME)`` references are kept (the kubelet expands them before the
    shell runs); the shell's own ``$NAME`` and ``${NAME}`` become ``$(NAME)``, which the
    kubelet expands from the same container environment. Anything else that needs a
    shell (pipes, redirections, subshells, other expansions) gives None.
    """
    refs: list[str] = []

    def hide(name: str) -> str:
        refs.append(f"$({name})")
        return f"\x00{len(refs) - 1}\x00"

    text = _K8S_REF.sub(lambda m: hide(m[1]), script)
    text = _SHELL_VAR.sub(lambda m: hide(m[1] or m[2]), text)
    if "$" in text or "`" in text:
        return None
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", ";"):
            commands.append([])
        elif token in _SHELL_CONTROL or (token and token.strip(";&|()<>") == ""):
            return None
        else:
            commands[-1].append(re.sub("\x00([0-9]+)\x00", lambda m: refs[int(m[1])], token))
    commands = [c for c in commands if c]
    if not commands:
        return None
    *pre, last = commands
    for command in pre:
        if command[0] not in ("cd", "export", "set"):
            return None
    return pre, last


def container_argv(container: Mapping[str, Any]) -> tuple[list[str], Callable[[int], Path]]:
    """``command + args`` of a container, and the manifest path (relative) of each word."""
    command = [str(w) for w in container.get("command") or []]
    args = [str(w) for w in container.get("args") or []]

    def at(i: int) -> Path:
        if i < len(command):
            return ("command", i)
        if args:
            return ("args", min(i - len(command), len(args) - 1))
        return ("command",) if command else ()

    return command + args, at


def entrypoint_argv(
    draft: Draft, container: Mapping[str, Any], path: Path, entrypoint: Sequence[str] | None
) -> tuple[list[str] | None, Callable[[int], Path]]:
    """``command + args`` of the training container at ``path``, and the manifest path of each word.

    Without ``command`` the image's ENTRYPOINT runs with the container's ``args``: the import
    takes it from ``entrypoint`` (``import --entrypoint``), else the container cannot be read
    (None, and a located error).
    """
    if container.get("command") or entrypoint is None:
        argv, relative = container_argv(container)
        if not container.get("command"):
            draft.fail(
                path,
                "the container has no command, so the image's entrypoint runs and the manifest does not say what it "
                "is; give it with --entrypoint 'WORDS' (the Dockerfile's ENTRYPOINT), or add the command to the "
                "manifest",
            )
            return None, lambda i: path
        return argv, lambda i: (*path, *relative(i))
    args = [str(w) for w in container.get("args") or []]
    draft.note(path, f"the image's entrypoint runs ({shlex.join(entrypoint)}, from --entrypoint)", "command")

    def at(i: int) -> Path:
        return path if i < len(entrypoint) else (*path, "args", i - len(entrypoint))

    return [*entrypoint, *args], at
