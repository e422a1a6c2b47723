"""Reading a job back into elastic.yaml: what every target's ``adopt`` module shares.

A target's ``adopt.py`` maps its manifest onto a :class:`Draft` (the spec being written,
with the manifest path of every value); this module holds what both directions of a
Kubernetes target have in common, in reverse:

* :func:`read_launch`: the training container's command line, with its launcher
  unwrapped: ``torchrun``, ``python -m torch.distributed.run`` (or ``.launch``),
  ``elastic-launch`` with our options, and a plain ``sh -c`` script running one of them;
* :func:`apply_launch`: the launcher's settings onto the spec, against the topology the
  engine injects (the command line beats ``PET_*``, as in torchrun);
* :func:`adopt_pod`: a pod template onto ``image``, ``resources``, ``env``,
  ``shared_memory`` and ``pod_template``: the reverse of :func:`.pod.build_pod_template`.

Nothing is dropped silently: every value that is not carried, and every default that
now applies where the job had another behaviour, becomes a :class:`Note` located in the
manifest. Only values that differ from the spec's defaults are written.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from elastic_compile import contract
from elastic_compile import contract_values as cv
from elastic_compile.core.accelerators import read_selector
from elastic_compile.core.engine_env import Generation, generation_env_problem, injected
from elastic_compile.core.loader import dotted
from elastic_compile.core.resources import accelerator_counts, process_rule
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.launchers import (
    LauncherCall,
    LauncherSyntaxError,
    launcher_kind,
    nested_launcher,
    node0_torchrun,
    parse_torchrun,
)
from elastic_compile.schema.models import (
    BUNDLE_MOUNT,
    BUNDLE_VOLUME_NAME,
    GPU_KEY,
    GPU_RESOURCE,
    SHM_VOLUME_NAME,
    EnvVar,
    env_name_problem,
    is_extended,
    is_operator_env,
    mount_path,
    mounts_shm,
    nested_model,
)
from elastic_compile.schema.podvalues import ENV_NAME
from elastic_compile.targets import bundle, network
from elastic_compile.targets.launcher import ENV_SHUTDOWN_TIMEOUT, GRACE_MARGIN_SECONDS, launcher_env
from elastic_compile.targets.pod import ISTIO_INJECT, downward_env

Path = tuple[str | int, ...]
Severity = Literal["note", "warning"]


#: The first part of a path into another document of the input stream: DOCUMENT + its index.
DOCUMENT = "\x00document:"


def other_document(index: int, path: Path) -> Path:
    """A path into document ``index`` of the stream (a TrainJob's runtime, read with the TrainJob)."""
    return (f"{DOCUMENT}{index}", *path)


def in_document(path: Path) -> tuple[int | None, Path]:
    """``(document index or None for the job's own, the path inside it)``."""
    if path and isinstance(path[0], str) and path[0].startswith(DOCUMENT):
        return int(path[0][len(DOCUMENT) :]), path[1:]
    return None, path


def spec_default(*path: str) -> Any:
    """The schema's default for the spec field at ``path`` (``("rdzv", "join_timeout")``)."""
    model: Any = ElasticSpec
    for part in path[:-1]:
        model = nested_model(model.model_fields[part].annotation)
    return model.model_fields[path[-1]].get_default(call_default_factory=True)


def shutdown_seconds(draft: Draft) -> int:
    """The imported shutdown_timeout in whole seconds, for the pod's grace period.

    The draft keeps the text the job gave (``--shutdown-timeout 15m`` is elastic-launch's
    duration, as in a spec); one that is not a duration is the schema's problem, located at
    its word, so the grace period is computed from the default meanwhile.
    """
    value = draft.get("shutdown_timeout")
    if value is None or isinstance(value, bool):
        return int(spec_default("shutdown_timeout"))
    try:
        return cv.whole_seconds(value if isinstance(value, int | float) else cv.parse_duration(str(value)))
    except ValueError:
        return int(spec_default("shutdown_timeout"))


@dataclass(frozen=True)
class Note:
    """Something the import changed (``note``) or could not carry (``warning``), at a manifest path.

    ``key`` is the spec's top-level field the note is about: the written spec carries the
    message as a comment above it (None: stderr only).
    """

    path: Path
    message: str
    severity: Severity = "note"
    key: str | None = None


@dataclass
class Draft:
    """The spec being written from a manifest: values, where each came from, and notes."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)  # dotted spec path -> manifest path
    notes: list[Note] = field(default_factory=list)
    errors: list[tuple[Path, str, str | None]] = field(default_factory=list)  # (path, message, given)
    #: Paths of a pod template put together from several places (a TrainJob's trainer, its
    #: patches, its runtime): prefix in the template -> where that part is in the input.
    aliases: dict[Path, Path] = field(default_factory=dict)

    def real(self, path: Path) -> Path:
        """``path`` in the input: the longest alias prefix replaced (unchanged without one)."""
        best = max((p for p in self.aliases if path[: len(p)] == p), key=len, default=None)
        return path if best is None else (*self.aliases[best], *path[len(best) :])

    def set(self, path: Sequence[str], value: Any, source: Path | None) -> None:
        """Write ``value`` at the spec ``path``, remembering where it came from."""
        node = self.values
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        if source is not None:
            self.sources[dotted(path)] = source

    def set_unless_default(self, path: Sequence[str], value: Any, source: Path | None) -> None:
        """:meth:`set`, unless ``value`` is the schema's default (a clean spec omits those)."""
        default = spec_default(*path)
        # str(): nnodes' default is an NNodes object whose text is "1"; 5 and 5.0 are equal too.
        if value != default and str(value) != str(default):
            self.set(path, value, source)

    def get(self, *path: str) -> Any:
        node: Any = self.values
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def source(self, spec_path: Sequence[str | int], manifest: Path) -> None:
        self.sources[dotted(spec_path)] = manifest

    def note(self, path: Path, message: str, key: str | None = None) -> None:
        self.notes.append(Note(path, message, "note", key))

    def warn(self, path: Path, message: str, key: str | None = None) -> None:
        self.notes.append(Note(path, message, "warning", key))

    def fail(self, path: Path, message: str, given: str | None = None) -> None:
        self.errors.append((path, message, given))


# --------------------------------------------------------------------------- the launcher


#: What each launcher does when an option is not given (torch/distributed/run.py, launcher/api.py, and
#: elastic-launch's own defaults in elastic_compile.entrypoint.settings).
TORCHRUN_DEFAULTS: Mapping[str, Any] = {
    "max_restarts": 0, "monitor_interval": 0.1, "join_timeout": 600, "read_timeout": 60,
}  # fmt: skip
ELASTIC_LAUNCH_DEFAULTS: Mapping[str, Any] = {"max_restarts": 0, "monitor_interval": 5.0, "read_timeout": 60}

#: torchrun options that have no place in the spec, and why.
_NOT_CARRIED = {
    "role": "the role name",
    "event_log_handler": "the event log handler",
    "log_dir": "the log directory (elastic-launch picks a writable scratch dir)",
    "redirects": "stdout/stderr redirection to files",
    "tee": "tee of worker output to files",
    "local_ranks_filter": "the local-rank log filter",
    "duplicate_stdout_filters": "the stdout filters",
    "duplicate_stderr_filters": "the stderr filters",
    "signals_to_handle": "the handled signals",
    "logs_specs": "the logs-specs plugin",
    "numa_binding": "NUMA binding",
    "virtual_local_rank": "virtual local ranks",
    "run_path": "running the script in the agent's process (--run-path)",
    "result": "the result file (--result)",
    "termination_log": "the termination log path",
    "dry_run": "--dry-run",
    "debug": "--debug (set ELASTIC_LAUNCH_DEBUG=1 in env instead)",
}

#: Settings whose text may refer to what the engine injects ($(PET_NNODES), ${MASTER_ADDR}).
_ENV_REF = re.compile(r"\$\(|\$\{|\$[A-Za-z_]")


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


@dataclass(frozen=True)
class Injected:
    """What the engine hands the launcher through ``PET_*`` (the manifest's topology), with sources.

    Each value is ``(value, manifest path)`` or None when the engine sets nothing.
    """

    nproc_per_node: tuple[Any, Path] | None = None
    backend: tuple[str, Path] | None = None
    rdzv_id: tuple[str, Path] | None = None
    conf: tuple[list[tuple[str, str]], Path] | None = None
    max_restarts: tuple[int, Path] | None = None
    #: Whose engine: the rendezvous the compiled job meets at differs (worker-0, or Trainer's node 0).
    generation: Generation = "v1"


#: Where the compiled job's store is, per generation, for the notes of what the import dropped.
_STORE = {
    "v1": "c10d on the <name>-worker-0 pod",
    "v2": "c10d on node 0 (Trainer's PET_MASTER_ADDR, the pod of PET_NODE_RANK 0)",
}
_TIMEOUT_WHY: dict[Generation, dict[str, str]] = {
    "v1": {
        "join_timeout": "a cold node pulls a multi-GB image before its agent joins",
        "read_timeout": "worker-0's name resolves only once it is Ready, so the others must outwait its image pull",
    },
    "v2": {
        "join_timeout": "a cold node pulls a multi-GB image before its agent joins",
        "read_timeout": "node 0 starts the store only once its image is pulled, so the others must outwait that",
    },
}


def apply_launch(draft: Draft, launch: Launch, at: Callable[[int], Path], injected: Injected, nodes: int) -> None:
    """The launcher's settings onto the spec: the command line beats what the engine injects."""
    s = launch.settings
    if launch.function is not None:
        draft.set(
            ("function",),
            {"target": launch.function, "args": launch.function_args} if launch.function_args else launch.function,
            at(s.get("function", ("", 0))[1]) if "function" in s else at(0),
        )
    elif launch.program:
        draft.set(("command",), launch.program, at(launch.program_at or 0))
        for i in range(len(launch.program)):
            draft.source(("command", i), at((launch.program_at or 0) + i if launch.shell_at is None else 0))
    if launch.launcher is None:
        if launch.program:
            draft.note(
                at(0), "runs under elastic-launch now: one agent per pod starting nproc_per_node workers", "command"
            )
        return
    defaults = ELASTIC_LAUNCH_DEFAULTS if launch.launcher == contract.LAUNCHER else TORCHRUN_DEFAULTS
    if launch.compiled:
        draft.set(("launcher",), contract.TORCHRUN, at(0))

    def where(name: str) -> Path:
        return at(s[name][1])

    # Topology the manifest decides (the pods exist or not): a flag that disagrees is noted.
    if "nnodes" in s and not _refers(s["nnodes"][0]):
        draft.note(
            where("nnodes"),
            f"--nnodes {s['nnodes'][0]} dropped: the compiled job's nnodes comes from the manifest's replicas",
        )
    for name in ("node_rank", "master_addr", "master_port"):
        if name in s:
            draft.note(
                where(name),
                f"--{name.replace('_', '-')} dropped: {_STORE[injected.generation]} replaces static rendezvous",
            )
    if "local_addr" in s and not launch.compiled:
        draft.note(where("local_addr"), "--local-addr dropped: elastic-launch uses the pod's IP")
    if "standalone" in s and not launch.compiled:
        why = "each pod was its own one-node job" if nodes > 1 else "a single node meets on its own pod anyway"
        draft.note(where("standalone"), f"--standalone dropped: {why}")
    if "use_env" not in s and launch.launcher.endswith("torch.distributed.launch"):
        draft.warn(
            at(0),
            "torch.distributed.launch passed --local-rank to the script; elastic-launch sets LOCAL_RANK in "
            "the environment only, so read os.environ['LOCAL_RANK']",
            "command",
        )
    for name, what in _NOT_CARRIED.items():
        if name in s:
            draft.warn(where(name), f"cannot carry {what}: the spec has no such setting; dropped")

    # nproc_per_node: the flag, else what the engine injects.
    if "nproc_per_node" in s and not _refers(s["nproc_per_node"][0]):
        _set_nproc(draft, str(s["nproc_per_node"][0]), where("nproc_per_node"))
        if injected.nproc_per_node is not None and str(injected.nproc_per_node[0]) != str(s["nproc_per_node"][0]):
            draft.note(
                where("nproc_per_node"),
                f"--nproc-per-node {s['nproc_per_node'][0]} overrode nprocPerNode "
                f"{injected.nproc_per_node[0]}; the flag's value is kept",
                "nproc_per_node",
            )
    elif injected.nproc_per_node is not None:
        _set_nproc(draft, str(injected.nproc_per_node[0]), injected.nproc_per_node[1])

    backend = _flag_or(s, "rdzv_backend", injected.backend, at)
    if backend is not None:
        value, source = backend
        if value == "static":
            draft.note(source, f"rdzv backend static becomes {_STORE[injected.generation]}", "rdzv")
        elif value in ("c10d", "etcd", "etcd-v2"):
            draft.set_unless_default(("rdzv", "backend"), value, source)
        else:
            draft.warn(source, f"rendezvous backend {value} is not one the spec knows (c10d, etcd, etcd-v2)", "rdzv")
    if "rdzv_endpoint" in s and not _refers(s["rdzv_endpoint"][0]):
        etcd = backend is not None and str(backend[0]).startswith("etcd")
        _endpoint(
            draft, str(s["rdzv_endpoint"][0]), where("rdzv_endpoint"), nodes, etcd=etcd, generation=injected.generation
        )
    run_id = _flag_or(s, "rdzv_id", injected.rdzv_id, at)
    if run_id is not None:
        if run_id[0] == "none":
            draft.note(run_id[1], "run id none dropped: elastic-launch derives <namespace>.<job name>", "rdzv")
        else:
            draft.set(("rdzv", "id"), run_id[0], run_id[1])
    conf: tuple[list[tuple[str, str]], Path] | None = injected.conf
    if "rdzv_conf" in s and not _refers(s["rdzv_conf"][0]):
        text = str(s["rdzv_conf"][0])
        conf = ([tuple(p.split("=", 1)) if "=" in p else (p, "") for p in text.split(",") if p], where("rdzv_conf"))  # type: ignore[misc]
    given: set[str] = set()  # the rendezvous timeouts the job set (to its launcher's default or not)
    if conf is not None:
        given |= _rdzv_conf(draft, conf[0], conf[1], compiled=launch.compiled)
    for key in cv.TIMEOUT_KEYS:
        if key in s:
            given.add(key)
            draft.set_unless_default(("rdzv", key), _number(s[key][0]), where(key))

    restarts = _flag_or(s, "max_restarts", injected.max_restarts, at)
    if restarts is not None:
        draft.set_unless_default(("max_restarts",), _number(restarts[0]), restarts[1])
    else:
        fallback = defaults["max_restarts"]
        draft.note(
            at(0),
            f"max_restarts {spec_default('max_restarts')} now (the default): the job had {fallback}, so every "
            "failure or membership change failed it",
            "max_restarts",
        )
    for name in ("monitor_interval", "start_method", "shutdown_timeout", "hang_timeout"):
        if name in s:
            value = s[name][0]
            draft.set_unless_default((name,), value if name == "start_method" else _number(value), where(name))
    if "monitor_interval" not in s and defaults["monitor_interval"] != spec_default("monitor_interval"):
        draft.note(
            at(0),
            f"monitor_interval {spec_default('monitor_interval'):g} s now (the default; {launch.launcher} "
            f"polled every {defaults['monitor_interval']:g} s)",
            "monitor_interval",
        )
    for key in ("join_timeout", "read_timeout"):
        if key not in given and key in defaults:
            draft.note(
                at(0),
                f"rdzv.{key} {spec_default('rdzv', key)} s now (the default; {launch.launcher} used "
                f"{defaults[key]} s): {_TIMEOUT_WHY[injected.generation][key]}",
                "rdzv",
            )


def _refers(value: Any) -> bool:
    """True for a flag whose text comes from the environment (the engine's injected values)."""
    return isinstance(value, str) and _ENV_REF.search(value) is not None


def _flag_or(
    s: Mapping[str, tuple[Any, int]], name: str, injected: tuple[Any, Path] | None, at: Callable[[int], Path]
) -> tuple[Any, Path] | None:
    if name in s and not _refers(s[name][0]):
        return s[name][0], at(s[name][1])
    return injected


def _number(value: Any) -> Any:
    """Option text as a number where it is one (``"900"`` -> 900); other text is left for the schema."""
    if isinstance(value, str):
        if re.fullmatch(r"[0-9]+", value):
            return int(value)
        if re.fullmatch(r"[0-9]*\.[0-9]+|[0-9]+\.[0-9]*", value):
            number = float(value)
            return int(number) if number.is_integer() else number
    return value


def _set_nproc(draft: Draft, text: str, source: Path) -> None:
    value: Any = int(text) if text.isdigit() else text
    draft.set(("nproc_per_node",), value, source)


def _endpoint(draft: Draft, text: str, source: Path, nodes: int, *, etcd: bool, generation: Generation) -> None:
    """An etcd endpoint is the etcd server: kept. A c10d one is where the store was: the pods decide that now."""
    if not etcd:
        where = f"the store is {_STORE[generation]}" if nodes > 1 else "a single pod meets on itself"
        draft.note(source, f"rendezvous endpoint {text} dropped: {where}", "rdzv")
        return
    host, _, port = text.rpartition(":") if ":" in text and not text.endswith("]") else (text, "", "")
    draft.set(("rdzv", "host"), host.strip("[]"), source)
    if port:
        draft.set(("rdzv", "port"), _number(port), source)


_CONF_DROPPED = {"timeout": "c10d ignores it", "is_host": "elastic-launch decides which pod hosts the store"}


def _rdzv_conf(draft: Draft, pairs: Sequence[tuple[str, str]], source: Path, *, compiled: bool = False) -> set[str]:
    """rdzvConf / --rdzv-conf pairs: the timeouts the spec names become its fields, the rest rdzv.conf.

    Returns the timeout keys the pairs set. ``compiled``: the compiler's torchrun form,
    whose ``timeout`` is its own copy of join_timeout (written again on compile).
    """
    conf: dict[str, str] = {}
    given: set[str] = set()
    for key, value in pairs:
        if key in cv.TIMEOUT_KEYS:
            given.add(key)
            draft.set_unless_default(("rdzv", key), _number(value), source)
        elif key in _CONF_DROPPED:
            if not (compiled and key == "timeout"):
                draft.note(source, f"rdzv conf {key} dropped: {_CONF_DROPPED[key]}", "rdzv")
        else:
            conf[key] = value
    if conf:
        draft.set(("rdzv", "conf"), conf, source)
    return given


# --------------------------------------------------------------------------- the pod


@dataclass(frozen=True)
class PodSource:
    """A pod template in a manifest and the container that trains in it."""

    template: Mapping[str, Any]
    path: Path  # of the template (metadata, spec)
    training: int  # index of the training container in spec.containers


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


def adopt_pod(
    draft: Draft,
    source: PodSource,
    *,
    shutdown_timeout: int,
    chosen: bool,
    extra_env: Sequence[tuple[str, str]] = (),
    ours: Sequence[tuple[str, str]] = contract.DOWNWARD_ENV,
    bundled: bool = False,
    torchrun: bool = False,
    generation: Generation = "v1",
) -> None:
    """The pod template onto image, resources, env, shared_memory, istio_sidecar and pod_template.

    The training container's command is the caller's (it needs the engine's topology).
    ``chosen``: the job already runs elastic-launch, so a default it lacks (/dev/shm, the
    Istio opt-out) was turned off on purpose and stays off; otherwise the default applies
    and a note says so. ``bundled``: the command runs the bundled launcher, whose volume and
    mount become ``launcher: bundled``. ``torchrun``: the command is the compiler's torchrun
    form, whose env carries shutdown_timeout and what elastic-launch does for itself
    (:func:`.launcher.add_launcher_env`): read back, not kept as the user's env.
    ``generation``: whose engine ran the job, for the env it sets itself (core/engine_env.py).
    """
    base = source.path
    template = copy.deepcopy(dict(source.template))
    spec: dict[str, Any] = dict(template.get("spec") or {})
    containers: list[Any] = list(spec.pop("containers", None) or [])
    train_path: Path = (*base, "spec", "containers", source.training)
    training: dict[str, Any] = dict(containers[source.training])
    sidecars = [c for i, c in enumerate(containers) if i != source.training]
    sidecar_paths = [(*base, "spec", "containers", i) for i in range(len(containers)) if i != source.training]

    if isinstance(training.get("image"), str):
        draft.set(("image",), training["image"], (*train_path, "image"))
    training.pop("image", None)
    training.pop("command", None)
    training.pop("args", None)
    if training.get("name") != contract.TRAINING_CONTAINER:
        draft.note(
            (*train_path, "name"),
            f"the training container {training.get('name')!r} is named {contract.TRAINING_CONTAINER} "
            "(the operator's exit codes and ports look only at that name)",
        )
    training["name"] = contract.TRAINING_CONTAINER
    _resources(draft, training.pop("resources", None), (*train_path, "resources"))
    volumes: list[Any] = list(spec.pop("volumes", None) or [])
    _shared_memory(draft, training, volumes, sidecars, train_path=train_path, base=base, chosen=chosen)
    if bundled:
        _bundled_launcher(draft, training, volumes, train_path=train_path, base=base)
    compiler_env: frozenset[int] = frozenset()
    if torchrun:
        grace_given = spec.get("terminationGracePeriodSeconds")
        shutdown_timeout, compiler_env = _torchrun_env(draft, training, train_path, shutdown_timeout, grace_given)
    _env(draft, training, train_path, extra_env, ours, compiler=compiler_env, generation=generation)
    ports = training.get("ports")
    if isinstance(ports, list):
        kept = [p for p in ports if not (isinstance(p, dict) and p.get("name") == contract.OPERATOR_PORT_NAME)]
        for i, port in enumerate(ports):
            if isinstance(port, dict) and port.get("name") == contract.OPERATOR_PORT_NAME:
                number = port.get("containerPort")
                if number != contract.OPERATOR_DEFAULT_PORT and draft.get("rdzv", "port") is None:
                    draft.set(("rdzv", "port"), number, (*train_path, "ports", i))
        if kept:
            training["ports"] = kept
        else:
            training.pop("ports")

    for i, sidecar in enumerate(sidecars):
        if isinstance(sidecar, dict):
            _sidecar_env(draft, sidecar, sidecar_paths[i], generation)

    grace = spec.pop("terminationGracePeriodSeconds", None)
    compiled = shutdown_timeout + GRACE_MARGIN_SECONDS
    if grace is not None and grace != compiled:
        if isinstance(grace, int) and not isinstance(grace, bool) and grace <= shutdown_timeout:
            draft.note(
                (*base, "spec", "terminationGracePeriodSeconds"),
                f"terminationGracePeriodSeconds {grace} dropped: elastic-launch needs more than shutdown_timeout "
                f"({shutdown_timeout} s) to stop its workers; the compiled pods get {compiled}",
                "pod_template",
            )
        else:
            spec["terminationGracePeriodSeconds"] = grace
    elif grace is None:
        draft.note(
            (*base, "spec"),
            f"terminationGracePeriodSeconds {compiled} now (shutdown_timeout + {GRACE_MARGIN_SECONDS}, "
            "so that elastic-launch stops its workers before the kubelet kills it)",
            "pod_template",
        )
    if "restartPolicy" in spec:
        draft.note(
            (*base, "spec", "restartPolicy"),
            "the pod's restartPolicy dropped: the operator overwrites it from the replica's restartPolicy",
        )
        spec.pop("restartPolicy")

    _accelerator(draft, spec, base)
    rest: dict[str, Any] = {}
    training_rest = {k: v for k, v in training.items() if k != "name"}
    pod_containers: list[Any] = []
    if training_rest:
        pod_containers.append(training)
    pod_containers += sidecars
    if pod_containers:
        rest["containers"] = pod_containers
    if volumes:
        rest["volumes"] = volumes
    for key, value in spec.items():
        if key not in rest:
            rest[key] = value
    # pod_template.spec in the manifest's order: containers and volumes where build_pod_template puts them.
    ordered: dict[str, Any] = {k: rest[k] for k in ("containers", "initContainers", "volumes") if k in rest}
    ordered.update({k: v for k, v in rest.items() if k not in ordered})
    if ordered:
        draft.set(("pod_template", "spec"), ordered, (*base, "spec"))
        for key in ordered:
            if key != "containers":
                draft.source(("pod_template", "spec", key), (*base, "spec", key))
        for i, path in enumerate(([train_path] if training_rest else []) + sidecar_paths):
            draft.source(("pod_template", "spec", "containers", i), path)

    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    policy_label = labels.pop(network.POD_LABEL, None)
    if policy_label is not None and policy_label == draft.get("name"):
        # The compiler's label for network_policy (its NetworkPolicy selects it): it writes both again.
        draft.set(("network_policy",), True, (*base, "metadata", "labels", network.POD_LABEL))
    elif policy_label is not None:
        draft.warn(
            (*base, "metadata", "labels", network.POD_LABEL),
            f"{network.POD_LABEL} dropped: the compiler's label for network_policy, with the job's name",
            "pod_template",
        )
    inject = annotations.pop(ISTIO_INJECT, None)
    if bundled:
        # Which launcher file the pods run: the compiler writes them again for the one it bundles.
        for key in bundle.pod_annotations():
            annotations.pop(key, None)
    if inject is None and chosen:
        draft.set(("istio_sidecar",), True, (*base,))
    elif inject is None:
        draft.note(
            (*base,),
            f'pods get {ISTIO_INJECT}: "false" now (the default): an Istio sidecar breaks rendezvous',
            "istio_sidecar",
        )
    elif str(inject).lower() == "true":
        draft.set(("istio_sidecar",), True, (*base, "metadata", "annotations", ISTIO_INJECT))
    for key in ("labels", "annotations"):
        value = labels if key == "labels" else annotations
        if value:
            draft.set(("pod_template", "metadata", key), value, (*base, "metadata", key))
    for key in meta:
        if key not in ("labels", "annotations"):
            draft.warn((*base, "metadata", key), f"cannot carry the pod template's metadata.{key}; dropped")


def _accelerator(draft: Draft, spec: dict[str, Any], base: Path) -> None:
    """``accelerator`` and ``accelerator_label`` from the pod's nodeSelector, on a preset's label with a known value.

    Only for a pod that requests NVIDIA GPUs (``gpu``), the devices ``accelerator`` names. The
    entries the compiler writes again from them leave ``pod_template``; a device whose label
    has several values on the platform (GKE's two H100s) keeps its entry, which chooses.
    """
    selector = spec.get("nodeSelector")
    requested = [draft.get("resources", side) or {} for side in ("requests", "limits")]
    if not isinstance(selector, dict) or not any(GPU_KEY in side for side in requested):
        return
    found = read_selector(selector)
    if found is None:
        return
    where = (*base, "spec", "nodeSelector", found.preset.label)
    if found.partition is None:
        draft.set(("accelerator",), found.device, where)
    else:
        draft.set(("accelerator",), {"device": found.device, "partition": found.partition}, where)
    draft.set(("accelerator_label",), found.preset.label, where)
    kept = {k: v for k, v in selector.items() if k not in found.keys}
    if kept:
        spec["nodeSelector"] = kept
    else:
        del spec["nodeSelector"]


def _resources(draft: Draft, resources: Any, path: Path) -> None:
    if not isinstance(resources, dict):
        return
    requests = {_spec_resource(k): v for k, v in (resources.get("requests") or {}).items()}
    limits = {_spec_resource(k): v for k, v in (resources.get("limits") or {}).items()}
    for name in list(limits):
        # Kubernetes requires limit == request for devices; the compiler writes both sides.
        if is_extended(name) and name in requests and str(requests[name]) == str(limits[name]):
            del limits[name]
    if requests:
        draft.set(("resources", "requests"), requests, (*path, "requests"))
    if limits:
        draft.set(("resources", "limits"), limits, (*path, "limits"))
    for key in resources:
        if key not in ("requests", "limits"):
            draft.warn((*path, key), f"cannot carry resources.{key} of the training container; dropped")


def _spec_resource(name: str) -> str:
    return GPU_KEY if name == GPU_RESOURCE else name


def _shared_memory(
    draft: Draft,
    training: dict[str, Any],
    volumes: list[Any],
    sidecars: Sequence[Any],
    *,
    train_path: Path,
    base: Path,
    chosen: bool,
) -> None:
    """A memory-backed emptyDir at /dev/shm becomes ``shared_memory``; none means the default now applies.

    ``chosen``: the job was written for elastic-launch (compiled by us, most likely), so
    what it leaves out was left out on purpose: no /dev/shm is ``shared_memory: false``, and
    only the compiler's own volume (``dshm``) is read back as ``shared_memory``.
    """
    mounts = training.get("volumeMounts")
    mounts = mounts if isinstance(mounts, list) else []
    shm = next((i for i, m in enumerate(mounts) if isinstance(m, dict) and mounts_shm(m)), None)
    by_name = {v.get("name"): i for i, v in enumerate(volumes) if isinstance(v, dict)}
    if shm is None and chosen:
        draft.set(("shared_memory",), False, train_path)
    elif shm is None:
        draft.note(
            train_path,
            "the training container gets a memory-backed /dev/shm now (shared_memory, the default): "
            "the runtime's 64 MiB makes DataLoader workers and NCCL die with 'Bus error'",
            "shared_memory",
        )
    else:
        name = mounts[shm].get("name")
        index = by_name.get(name)
        volume = volumes[index] if index is not None else None
        empty_dir = volume.get("emptyDir") if isinstance(volume, dict) else None
        shared = any(
            isinstance(m, dict) and m.get("name") == name
            for c in sidecars
            if isinstance(c, dict)
            for m in (c.get("volumeMounts") or [])
        )
        if (
            isinstance(empty_dir, dict)
            and empty_dir.get("medium") == "Memory"
            and set(empty_dir) <= {"medium", "sizeLimit"}
            and set(volume) == {"name", "emptyDir"}  # type: ignore[arg-type]
            and set(mounts[shm]) <= {"name", "mountPath"}
            and not shared
            and index is not None
            and (name == SHM_VOLUME_NAME or not chosen)
        ):
            size = empty_dir.get("sizeLimit")
            if size is not None:
                draft.set(("shared_memory",), str(size), (*base, "spec", "volumes", index, "emptyDir", "sizeLimit"))
            if name != SHM_VOLUME_NAME:
                draft.note(
                    (*base, "spec", "volumes", index),
                    f"the /dev/shm volume {name} becomes shared_memory",
                    "shared_memory",
                )
            del mounts[shm]
            del volumes[index]
        elif not chosen:
            draft.note(
                (*train_path, "volumeMounts", shm),
                "your own /dev/shm mount is kept in pod_template (the compiler then adds none)",
                "pod_template",
            )
    if mounts:
        training["volumeMounts"] = mounts
    else:
        training.pop("volumeMounts", None)
    for i, volume in enumerate(volumes):
        if isinstance(volume, dict) and volume.get("name") == SHM_VOLUME_NAME:
            draft.fail(
                (*base, "spec", "volumes", i, "name"),
                f"a volume named {SHM_VOLUME_NAME} is the compiler's /dev/shm volume; rename it in the manifest",
            )


def _bundled_launcher(
    draft: Draft, training: dict[str, Any], volumes: list[Any], *, train_path: Path, base: Path
) -> None:
    """The compiler's ConfigMap volume of the bundled launcher and its mount become ``launcher: bundled``.

    The ConfigMap itself is the compiler's to write again (its name and text follow the
    installed launcher); without the volume and the mount the command could not have run.
    """
    mounts = training.get("volumeMounts")
    mounts = mounts if isinstance(mounts, list) else []
    mount = next(
        (
            i
            for i, m in enumerate(mounts)
            if isinstance(m, dict) and m.get("name") == BUNDLE_VOLUME_NAME and mount_path(m) == BUNDLE_MOUNT
        ),
        None,
    )
    volume = next(
        (
            i
            for i, v in enumerate(volumes)
            if isinstance(v, dict) and v.get("name") == BUNDLE_VOLUME_NAME and isinstance(v.get("configMap"), dict)
        ),
        None,
    )
    if mount is None or volume is None:
        draft.fail(
            (*train_path, "volumeMounts"),
            f"the command runs {contract.BUNDLE_PATH}, but no ConfigMap volume {BUNDLE_VOLUME_NAME} is mounted at "
            f"{BUNDLE_MOUNT}: the pod could not start",
        )
        return
    draft.set(("launcher",), "bundled", (*base, "spec", "volumes", volume))
    del mounts[mount]
    del volumes[volume]
    if mounts:
        training["volumeMounts"] = mounts
    else:
        training.pop("volumeMounts", None)


def _env(
    draft: Draft,
    training: dict[str, Any],
    path: Path,
    extra: Sequence[tuple[str, str]],
    downward: Sequence[tuple[str, str]],
    *,
    compiler: Collection[int] = (),
    generation: Generation = "v1",
) -> None:
    """The training container's env into ``env`` (map form when every value is literal).

    ``downward``: the compiler's downward-API entries for this engine, ``compiler``: the
    indices of its other entries (:func:`_torchrun_env`); both written again on compile.
    """
    entries = training.pop("env", None)
    entries = list(entries) if isinstance(entries, list) else []
    ours = downward_env(downward)
    kept: list[tuple[int | None, dict[str, Any]]] = []
    rest: list[Any] = []
    for i, entry in enumerate(entries):
        if rest:
            rest.append(entry)  # after an entry the spec cannot hold, order matters: keep them together
            continue
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name.startswith(contract.LAUNCHER_ENV_PREFIX) and entry in ours:
            continue  # the compiler's downward-API entries: written again on compile
        if i in compiler:
            continue
        problem = None
        if isinstance(name, str):
            problem = env_name_problem(name) or generation_env_problem(name, generation)
        if isinstance(name, str) and problem is not None and ENV_NAME.match(name):
            engine = (
                is_operator_env(name) or name in contract.WORKER_ENV_NAMES or injected(name, generation) is not None
            )
            draft.warn((*path, "env", i, "name"), f"{name} dropped: {problem}", "env" if engine else None)
            continue
        if isinstance(entry, dict) and _fits_env(entry):
            kept.append((i, entry))
        else:
            rest.append(entry)
    for name, value in extra:
        kept.append((None, {"name": name, "value": value}))
    if kept:
        literal = all(set(e) == {"name", "value"} and isinstance(e.get("value"), str) for _, e in kept)
        if literal:
            draft.set(("env",), {e["name"]: e["value"] for _, e in kept}, (*path, "env"))
            for index, e in kept:
                if index is not None:
                    draft.source(("env", e["name"]), (*path, "env", index))
        else:
            draft.set(("env",), [e for _, e in kept], (*path, "env"))
            for j, (index, _e) in enumerate(kept):
                if index is not None:
                    draft.source(("env", j), (*path, "env", index))
    if rest:
        training["env"] = rest


def _torchrun_env(
    draft: Draft, training: Mapping[str, Any], path: Path, default: int, grace: Any
) -> tuple[int, frozenset[int]]:
    """shutdown_timeout, and the indices of the env entries the compiler wrote for torchrun.

    The compiler appends :func:`.launcher.launcher_env` after every entry of the user's, in
    that order, leaving out the names the user set (:func:`.launcher.add_launcher_env`): its
    entries are the trailing ones in that order. Its TORCH_ELASTIC_SHUTDOWN_TIMEOUT is also
    the pod's grace period less the margin. Any other entry is the user's own env and stays
    so (torchrun has no flag for shutdown_timeout: ``default`` applies then).
    """
    raw = training.get("env")
    entries = raw if isinstance(raw, list) else []
    index, ours, shutdown = len(entries), set(), default
    for name, value_written in reversed(launcher_env(default)):
        entry = entries[index - 1] if index else None
        if not (isinstance(entry, dict) and set(entry) == {"name", "value"} and entry.get("name") == name):
            continue  # the user set it (the compiler left it out), or this is not the compiled form
        if name != ENV_SHUTDOWN_TIMEOUT and entry["value"] != value_written:
            break  # the user's own value: so is every entry before it
        if name == ENV_SHUTDOWN_TIMEOUT:
            value = _number(entry["value"])
            if not isinstance(value, int) or grace not in (None, value + GRACE_MARGIN_SECONDS):
                break  # the user's own entry: so is every one before it
            draft.set_unless_default(("shutdown_timeout",), value, (*path, "env", index - 1))
            shutdown = value
        index -= 1
        ours.add(index)
    return shutdown, frozenset(ours)


def _fits_env(entry: dict[str, Any]) -> bool:
    """Whether the spec's ``env`` can hold this EnvVar (else it stays in pod_template)."""
    try:
        EnvVar.model_validate(entry)
    except ValueError:
        return False
    return True


def _sidecar_env(draft: Draft, container: dict[str, Any], path: Path, generation: Generation) -> None:
    """A sidecar's env, less what the v1 operator appended after it (it appends to every container in
    ``spec.containers``, envvar.go:49); Trainer v2 sets env in container ``node`` only (torch.go:173)."""
    env = container.get("env")
    if not isinstance(env, list) or generation != "v1":
        return
    kept = []
    for i, entry in enumerate(env):
        name = entry.get("name") if isinstance(entry, dict) else None
        row = injected(name, generation) if isinstance(name, str) else None
        if row is not None and (row.when == "every pod" or is_operator_env(str(name))):
            draft.warn(
                (*path, "env", i, "name"),
                f"{name} dropped: the training operator v1 appends its own to every container ({row.source})",
                "pod_template",
            )
            continue
        kept.append(entry)
    if kept:
        container["env"] = kept
    else:
        container.pop("env")


# --------------------------------------------------------------------------- the object


def schema_problems(draft: Draft, data: Any, schema_file: str, api_version: str, kind: str) -> dict[str, Any]:
    """``data`` checked against its kind's compact schema: a copy without the fields the API server prunes.

    Unknown fields (which the API server rejects or prunes) are dropped with a warning;
    values of the wrong type or shape are errors, so the mapping reads only well-formed
    data. ``status`` is the cluster's and is left out quietly.
    """
    from elastic_compile.schema import compact
    from elastic_compile.schema.podspec import octal_hint

    doc = copy.deepcopy(data) if isinstance(data, dict) else {}
    if "status" in doc:
        draft.note(("status",), "status dropped (the cluster writes it)")
        doc.pop("status")
    schema = compact.load(schema_file)
    root = schema.root(api_version, kind)
    if root is None:  # pragma: no cover - the shipped schemas have these roots
        raise KeyError(f"{schema_file} has no schema for {api_version} {kind}")
    for problem in schema.problems(doc, root):
        loc, message = octal_hint(doc, problem)
        if message.startswith("unknown field") and loc:
            draft.warn(loc, f"{message}: the API server would not keep it; dropped")
            parent: Any = doc
            for part in loc[:-1]:
                parent = parent[part]
            parent.pop(loc[-1], None)
        else:
            draft.fail(loc, message)
    return doc


def adopt_metadata(draft: Draft, doc: Mapping[str, Any]) -> None:
    """name, namespace, labels and annotations of the object; what the API server set is dropped."""
    from elastic_compile.targets.checks import SERVER_SET_METADATA

    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    path: Path = ("metadata",)
    if "name" in meta:
        draft.set(("name",), meta["name"], (*path, "name"))
    else:
        draft.fail(path, "the object has no metadata.name (generateName cannot name a job's pods)")
    if meta.get("namespace") is not None:
        draft.set(("namespace",), meta["namespace"], (*path, "namespace"))
    if meta.get("labels"):
        draft.set(("labels",), dict(meta["labels"]), (*path, "labels"))
    annotations = dict(meta.get("annotations") or {})
    if LAST_APPLIED in annotations:
        draft.note((*path, "annotations", LAST_APPLIED), "kubectl's last-applied-configuration dropped")
        del annotations[LAST_APPLIED]
    if annotations:
        draft.set(("annotations",), annotations, (*path, "annotations"))
    for key in meta:
        if key in SERVER_SET_METADATA:
            draft.note((*path, key), f"metadata.{key} dropped (the API server sets it)")
        elif key not in ("name", "namespace", "labels", "annotations"):
            draft.warn((*path, key), f"cannot carry metadata.{key}; dropped")


#: kubectl apply's copy of the object, in an annotation.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def drop_default_nproc(draft: Draft) -> None:
    """Leave out nproc_per_node where it means what the spec's default means (core/resources.process_rule)."""
    value = draft.get("nproc_per_node")
    if value is None:
        return
    sides = [
        {GPU_RESOURCE if k == GPU_KEY else str(k): str(v) for k, v in raw.items()}
        for raw in (draft.get("resources", side) or {} for side in ("requests", "limits"))
        if isinstance(raw, dict)
    ]
    counts = accelerator_counts(*sides)
    default, _rule = process_rule(counts)
    # auto and gpu count the devices the pod sees: the requested ones (not for Neuron devices, whose cores count).
    if value == default or (default and counts and value in ("auto", "gpu")):
        del draft.values["nproc_per_node"]


# --------------------------------------------------------------------------- the spec text


def spec_order(values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's fields in the schema's order (nested models too), as ``elastic-compile --explain`` lists them."""
    return _ordered(values, ElasticSpec)


def _ordered(values: Mapping[str, Any], model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in values:
            value = values[key]
            sub = nested_model(info.annotation)
            out[key] = (
                _ordered(value, sub) if sub is not None and isinstance(value, dict) and key != "function" else value
            )
    for key, value in values.items():
        out.setdefault(key, value)
    return out
