"""A launcher nested in ``command``: ``torchrun``, ``python -m torch.distributed.run``, ...

elastic-launch already is the launcher: one torch elastic agent per pod, starting
``nproc_per_node`` workers that run ``command``. A launcher inside ``command`` makes every one
of those workers an agent of its own, starting ``nproc_per_node`` more processes in a
rendezvous of their own: nproc_per_node² processes per pod, none of them in the job's world.
The fix is to give the script and move the launcher's options into the spec, so we say
exactly which command to write when we can tell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import NamedTuple

from elastic_compile import contract

# torch.distributed.run is torchrun; torch.distributed.launch its deprecated predecessor.
_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PROGRAMS = ("torchrun", "elastic-launch")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SHELLS = ("sh", "bash", "dash", "zsh", "ash")
# In a shell script: torchrun or elastic-launch as a word, or python -m <launcher module>.
_IN_SCRIPT = re.compile(
    r"(?:^|[\s;&|(`/])(?:torchrun|elastic-launch)(?:\s|$)|-m\s+torch\.distributed\.(?:run|launch)\b"
)
# torchrun's options that take no value (everything else starting with '-' takes one,
# unless written as --opt=value).
_FLAGS = frozenset(
    {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module",
     "--virtual-local-rank", "--virtual_local_rank"}
)  # fmt: skip


def nested_launcher(command: Sequence[str]) -> tuple[int, str] | None:
    """Where ``command`` nests a launcher (the index of the word) and what to write instead; None if it does not."""
    if not command:
        return None
    program = command[0]
    # PurePosixPath(...).name, without building a path for the common bare word ("." has no name).
    head = program if "/" not in program and program != "." else PurePosixPath(program).name
    if head == "elastic-launch" and "--" in command:
        return 0, _advice(head, command[command.index("--") + 1 :], program=True)
    if head in _PROGRAMS:
        return 0, _advice(head, command[1:])
    if _PYTHON.match(head) and command[1:2] == [contract.BUNDLE_PATH]:
        rest = command[command.index("--") + 1 :] if "--" in command else []
        return 1, _advice("the bundled elastic-launch", rest, program=True)
    if _PYTHON.match(head):
        for i, word in enumerate(command[1:-1], start=1):
            if word == "-m" and command[i + 1] in _MODULES:
                return i + 1, _advice(f"python -m {command[i + 1]}", command[i + 2 :])
            if not word.startswith("-"):
                break  # the script: what follows are its own arguments
        return None
    if head in _SHELLS:
        for i, word in enumerate(command[1:], start=1):
            if _IN_SCRIPT.search(word):
                return i, _advice(f"a launcher in the {head} script", ())
    return None


def _advice(what: str, rest: Sequence[str], *, program: bool = False) -> str:
    """The message: why, and the command to write (``rest`` is the launcher's arguments, or a whole command)."""
    why = (
        f"{what} would be a second launcher: elastic-launch already is one (an agent per pod starting "
        "nproc_per_node workers), so every worker would start its own (nproc_per_node² processes per pod, "
        "outside the job's rendezvous)"
    )
    script = list(rest) if program and rest else None if program else _script(rest)
    if script is None:
        return (
            f"{why}; give the training script itself, e.g. [python, train.py], and set nnodes, nproc_per_node and rdzv"
        )
    fix = ", ".join(_word(word) for word in (script if program else ["python", *script]))
    return f"{why}; write command: [{fix}] and set the launcher's options through nnodes, nproc_per_node and rdzv"


# A word printed as is in the suggested flow list; any other is quoted as JSON (valid YAML),
# so that a line break or a control character in it never breaks the one-line message.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./=:+@%~^-]+")


def _word(word: str) -> str:
    return word if _PLAIN_WORD.fullmatch(word) else json.dumps(word)


def _script(rest: Sequence[str]) -> list[str] | None:
    """What python runs after torchrun's options (the script or ``-m module``, and its arguments), or None."""
    module = False
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-"):
            break
        if word in ("--no-python", "--no_python"):
            return None  # the next word is a program, not a script: say so generally
        if word in ("-m", "--module"):
            module = True
        elif word not in _FLAGS and "=" not in word:
            i += 1  # the option's value
        i += 1
    if i >= len(rest):
        return None
    return ["-m", *rest[i:]] if module else list(rest[i:])


# --------------------------------------------------------------------------- parsing a launcher's command line

#: torchrun's options (torch 2.13 ``torch/distributed/run.py``), by the name argparse
#: stores them under, with whether each takes a value. Every one also has an underscore
#: spelling (``--nproc_per_node``); ``-m``, ``-r`` and ``-t`` are short forms.
TORCHRUN_OPTIONS: dict[str, bool] = {
    "nnodes": True, "nproc_per_node": True, "rdzv_backend": True, "rdzv_endpoint": True, "rdzv_id": True,
    "rdzv_conf": True, "standalone": False, "max_restarts": True, "monitor_interval": True,
    "start_method": True, "role": True, "event_log_handler": True, "module": False, "no_python": False,
    "run_path": False, "log_dir": True, "redirects": True, "tee": True, "local_ranks_filter": True,
    "duplicate_stdout_filters": True, "duplicate_stderr_filters": True, "node_rank": True,
    "master_addr": True, "master_port": True, "local_addr": True, "virtual_local_rank": False,
    "signals_to_handle": True, "shutdown_timeout": True, "logs_specs": True, "numa_binding": True,
    # torch.distributed.launch (deprecated) only: pass LOCAL_RANK in the env, not as --local-rank.
    "use_env": False,
}  # fmt: skip
_SHORT = {"-m": "module", "-r": "redirects", "-t": "tee"}


class LauncherSyntaxError(ValueError):
    """A launcher command line we cannot read; ``index`` is the word at fault."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class LauncherCall(NamedTuple):
    """A torchrun command line, read as torchrun's own argument parser reads it (without torch).

    ``options`` maps torchrun's option names (``nproc_per_node``) to their text, or to True
    for the flags; ``where`` gives the index in the parsed words of each option, for
    located messages. ``program`` is what every worker runs, as elastic-launch takes it
    after ``--``: ``[python, script, args...]``, ``[python, -m, module, args...]``, or with
    ``--no-python`` the program itself; ``program_at`` is the index of its first word
    written by the user (the script), or None when there is none.
    """

    launcher: str
    options: dict[str, str | bool]
    where: dict[str, int]
    program: tuple[str, ...]
    program_at: int | None


def launcher_kind(command: Sequence[str]) -> tuple[str, int] | None:
    """Which launcher ``command`` starts with and the index of its first option, or None.

    ``torchrun``; ``python -m torch.distributed.run`` (or ``.launch``), with python options
    before ``-m``; ``elastic-launch``, also as ``launcher: bundled`` runs it (``python3
    /opt/elastic-launch/elastic-launch.py``).
    """
    if not command:
        return None
    program = command[0]
    # PurePosixPath(...).name, without building a path for the common bare word ("." has no name).
    head = program if "/" not in program and program != "." else PurePosixPath(program).name
    if head in _PROGRAMS:
        return head, 1
    if _PYTHON.match(head) and list(command[1:2]) == [contract.BUNDLE_PATH]:
        return contract.LAUNCHER, 2
    if _PYTHON.match(head):
        for i, word in enumerate(command[1:-1], start=1):
            if word == "-m" and command[i + 1] in _MODULES:
                return f"{head} -m {command[i + 1]}", i + 2
            if not word.startswith("-"):
                return None
    return None


def parse_torchrun(command: Sequence[str], python: str = "python") -> LauncherCall:
    """Read ``command`` (``torchrun ...`` or ``python -m torch.distributed.run ...``) as torchrun would.

    ``python`` names the interpreter for the workers (torchrun uses its own,
    ``sys.executable``; ``python -m`` forms keep the name written). Raises
    :class:`LauncherSyntaxError` for an unknown option, a missing value or no script.
    """
    kind = launcher_kind(command)
    if kind is None or kind[0] == "elastic-launch":
        raise LauncherSyntaxError(0, "not a torchrun command line")
    launcher, i = kind
    if launcher != "torchrun":
        python = PurePosixPath(command[0]).name
    options: dict[str, str | bool] = {}
    where: dict[str, int] = {}
    while i < len(command):
        word = command[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, has_value, value = _option(word)
        if name is None:
            raise LauncherSyntaxError(i, f"{word}: not a torchrun option")
        if TORCHRUN_OPTIONS[name]:
            if not has_value:
                if i + 1 >= len(command):
                    raise LauncherSyntaxError(i, f"{word} needs a value")
                i += 1
                value = command[i]
            options[name] = value
        elif has_value:
            raise LauncherSyntaxError(i, f"{word.split('=', 1)[0]} takes no value")
        else:
            options[name] = True
        # The option's own word (its value may be the next one).
        where[name] = i - (1 if TORCHRUN_OPTIONS[name] and not has_value else 0)
        i += 1
    if i >= len(command):
        raise LauncherSyntaxError(len(command) - 1, "no training script after the launcher's options")
    rest = tuple(command[i:])
    if options.get("no_python") and not options.get("run_path"):
        program = rest
    elif options.get("module"):
        program = (python, "-m", *rest)
    else:
        program = (python, *rest)
    return LauncherCall(launcher, options, where, program, i)


def _option(word: str) -> tuple[str | None, bool, str]:
    """``(torchrun option name, whether the word carries its value, the value)`` of one word."""
    if word in _SHORT:
        return _SHORT[word], False, ""
    if word[:2] in _SHORT and not word.startswith("--") and _SHORT[word[:2]] != "module":
        return _SHORT[word[:2]], True, word[2:]  # -r3, -t0
    if not word.startswith("--"):
        return None, False, ""
    text, has_value, value = word[2:].partition("=")
    name = text.replace("-", "_")
    if name in TORCHRUN_OPTIONS:
        return name, bool(has_value), value
    return None, False, ""


# --------------------------------------------------------------------------- torchrun with node 0 as the store host

#: How a compiled TrainJob runs torchrun (``launcher: torchrun``): Trainer gives every pod the same
#: arguments and sets no variable torchrun reads as ``is_host``, and left to itself torchrun's c10d
#: backend makes a pod the host only when the endpoint's name resolves to its own address
#: (torch 2.13 torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:137-145,
#: utils.py:117-166), which for node 0's <name>-node-0-0.<name> is a DNS lookup racing the
#: headless Service. So a POSIX shell decides it from PET_NODE_RANK, the Job completion index
#: (Trainer v2.3.0 torch.go:152-156): ``sh -c SCRIPT torchrun CONF ARGS...`` runs
#: ``torchrun --rdzv-conf CONF,is_host=<true on node 0, else false> ARGS...``.
NODE0_SHELL = "sh"
NODE0_SCRIPT = (
    'conf=$1; shift; if [ "$PET_NODE_RANK" = 0 ]; then host=true; else host=false; fi; '
    'exec torchrun --rdzv-conf "$conf,is_host=$host" "$@"'
)
NODE0_PREFIX: tuple[str, ...] = (NODE0_SHELL, "-c", NODE0_SCRIPT, "torchrun")


def node0_torchrun(argv: Sequence[str]) -> tuple[list[str], list[int]] | None:
    """The torchrun command line of the node-0 shell form, and where each of its words is in ``argv``.

    None when ``argv`` is not that form. The ``is_host`` the shell adds is left out: it is
    the form's, decided per pod.
    """
    if tuple(argv[: len(NODE0_PREFIX)]) != NODE0_PREFIX or len(argv) <= len(NODE0_PREFIX):
        return None
    conf = len(NODE0_PREFIX)
    words = ["torchrun", "--rdzv-conf", argv[conf], *argv[conf + 1 :]]
    where = [conf - 1, conf, conf, *range(conf + 1, len(argv))]
    return words, where
