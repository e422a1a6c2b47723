"""The launcher's settings onto the spec, against the topology the engine injects.

The command line beats the ``PET_*`` the engine sets, as in torchrun; topology the manifest
decides (the pods exist or not) is noted where a flag disagrees; each launcher's own
defaults are what the job ran with, so where the spec's default differs a note says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_compile import contract
from elastic_compile import contract_values as cv
from elastic_compile.core.engine_env import Generation
from elastic_compile.targets.readback.command_line import Launch
from elastic_compile.targets.readback.draft import Draft, Path, spec_default

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
            draft.set_unless_default(("rdzv", key), option_number(s[key][0]), where(key))

    restarts = _flag_or(s, "max_restarts", injected.max_restarts, at)
    if restarts is not None:
        draft.set_unless_default(("max_restarts",), option_number(restarts[0]), restarts[1])
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
            draft.set_unless_default((name,), value if name == "start_method" else option_number(value), where(name))
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


def option_number(value: Any) -> Any:
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
        draft.set(("rdzv", "port"), option_number(port), source)


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
            draft.set_unless_default(("rdzv", key), option_number(value), source)
        elif key in _CONF_DROPPED:
            if not (compiled and key == "timeout"):
                draft.note(source, f"rdzv conf {key} dropped: {_CONF_DROPPED[key]}", "rdzv")
        else:
            conf[key] = value
    if conf:
        draft.set(("rdzv", "conf"), conf, source)
    return given
