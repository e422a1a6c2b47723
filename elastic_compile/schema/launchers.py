"""A launcher nested in ``command``: ``torchrun``, ``python -m torch.distributed.run``, ...

elastic-launch already is the launcher: one torch elastic agent per pod, starting
``nproc_per_node`` workers that run ``command``. A launcher inside ``command`` makes every one
of those workers an agent of its own, starting ``nproc_per_node`` more processes in a
rendezvous of their own: nproc_per_node² processes per pod, none of them in the job's world.
The fix is to give the script and move the launcher's options into the spec, so we say
exactly which command to write when we can tell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

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
    head = PurePosixPath(command[0]).name
    if head == "elastic-launch" and "--" in command:
        return 0, _advice(head, command[command.index("--") + 1 :], program=True)
    if head in _PROGRAMS:
        return 0, _advice(head, command[1:])
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
    fix = ", ".join(script if program else ["python", *script])
    return f"{why}; write command: [{fix}] and set the launcher's options through nnodes, nproc_per_node and rdzv"


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
