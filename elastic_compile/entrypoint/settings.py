"""Resolve ``elastic-launch`` settings from options, the operator's ``PET_*`` env and defaults.

Pure standard library: this module runs before torch is imported, so that a bad option or
a bad environment fails in milliseconds with one line and exit 2 (``EXIT_USAGE``).

Resolution rule, for every setting that both an option and a ``PET_*`` variable can carry
(nnodes, nproc per node, backend, endpoint, max restarts, run id):

* only one of them is present: it is used;
* both are present and mean the same (``2`` and ``2:2`` for nnodes): fine;
* both are present and differ: an error naming both sources, because the manifest (the
  compiler wrote the option) and the operator (it injected the variable) disagree about
  the topology, and guessing which one is right would start a job nobody asked for;
* neither: the built-in default, or an error where no default is safe (a multi-node job
  without an endpoint or a run id).

An empty ``PET_*`` variable counts as absent. Rendezvous configuration keys come from
``PET_RDZV_CONF``, ``--rdzv-conf`` and the timeout options; the same key with different
values in two places is an error.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import re
import shutil
import stat
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, NoReturn, TypeVar

from elastic_compile import __version__
from elastic_compile import contract as c
from elastic_compile import contract_values as cv

T = TypeVar("T")


class UsageError(Exception):
    """Bad options or environment: one line for the user, exit ``EXIT_USAGE``."""


NPROC_KEYWORDS: Final = ("auto", "cpu", "gpu")
START_METHODS: Final = ("spawn", "fork", "forkserver")

# ``static`` is left out on purpose: it needs a node rank (``rdzv_configs["rank"]``) that the
# operator only injects for non-elastic Master jobs, and it shares one TCPStore across
# restarts (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py; pytorch#135712). Port
# defaults are the backends' own (c10d_rendezvous_backend.py, etcd_rendezvous_backend.py).
BACKEND_DEFAULT_PORTS: Final[Mapping[str, int]] = {"c10d": 29400, "etcd-v2": 2379, "etcd": 2379}

DEFAULT_BACKEND: Final = "c10d"
# c10d with port 0 lets the OS pick the store port: only one node can know it, so this
# default applies only when max_nodes == 1 (flytekit and torchx do the same).
LOCAL_ENDPOINT: Final = "localhost:0"
DEFAULT_MAX_RESTARTS: Final = 0  # LaunchConfig's own default is 3 (torch/distributed/launcher/api.py)
DEFAULT_START_METHOD: Final = "spawn"  # safe with CUDA and threads; fork is faster
# Agent poll period, i.e. how long a failure or a waiting node goes unnoticed. torch's 0.1 s
# polls the store ten times a second per node; 5 s is cheap and fast enough for training.
DEFAULT_MONITOR_INTERVAL: Final = 5.0
DEFAULT_SHUTDOWN_TIMEOUT: Final = 30  # SIGTERM -> SIGKILL grace, as torch's default

# The rendezvous timeouts c10d and etcd-v2 actually read (dynamic_rendezvous.py create_handler), with the
# option that sets each and our default. join_timeout is 900 s rather than torch's 600 s:
# the first pod may wait for the last one's image pull and scheduling (flytekit uses 900
# for the same reason).
TIMEOUT_OPTIONS: Final[Mapping[str, tuple[str, int]]] = {
    "join_timeout": (c.OPT_JOIN_TIMEOUT, 900),
    "last_call_timeout": (c.OPT_LAST_CALL_TIMEOUT, 30),
    "close_timeout": (c.OPT_CLOSE_TIMEOUT, 30),
    "heartbeat_timeout": (c.OPT_HEARTBEAT_TIMEOUT, 5),
    "read_timeout": (c.OPT_READ_TIMEOUT, 60),
}
_FUNCTION_RE: Final = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PYTHON_NAMES: Final = frozenset({"python", "python3"})


# --------------------------------------------------------------------------- options


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting: errors are one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The option parser; option names come from ``elastic_compile.contract``."""
    p = _Parser(
        prog=c.LAUNCHER,
        allow_abbrev=False,  # a prefix like --nproc must not silently mean --nproc-per-node
        usage=f"{c.LAUNCHER} [options] -- COMMAND [ARGS...]\n"
        f"       {c.LAUNCHER} [options] {c.OPT_FUNCTION} MODULE:FUNCTION [-- ARGS...]",
        description="Run torch elastic (elastic_launch) inside a training container. Topology comes "
        "from the operator's PET_* variables, behaviour from these options.",
    )
    p.add_argument("--version", action="version", version=f"{c.LAUNCHER} {__version__}")
    # Every option defaults to None so that "not given" stays distinguishable from a value.
    p.add_argument(c.OPT_NNODES, metavar="N|MIN:MAX", help="nodes (pods); env PET_NNODES; default 1")
    p.add_argument(
        c.OPT_NPROC_PER_NODE,
        metavar="N|auto|cpu|gpu",
        help="workers per node; env PET_NPROC_PER_NODE; default 1",
    )
    p.add_argument(
        c.OPT_RDZV_BACKEND,
        metavar="|".join(BACKEND_DEFAULT_PORTS),
        help="env PET_RDZV_BACKEND; default c10d",
    )
    p.add_argument(
        c.OPT_RDZV_ENDPOINT,
        metavar="HOST[:PORT]",
        help="env PET_RDZV_ENDPOINT; default localhost:0 on a single node",
    )
    p.add_argument(
        c.OPT_RDZV_AT_MASTER,
        action="store_true",
        help="Kubeflow Trainer v2: c10d rendezvous at PET_MASTER_ADDR:PET_MASTER_PORT for PET_NNODES nodes; "
        "PET_NODE_RANK 0 hosts the store",
    )
    p.add_argument(
        c.OPT_MIN_NODES,
        metavar="MIN",
        help=f"with {c.OPT_RDZV_AT_MASTER}: an elastic TrainJob, rendezvous MIN:PET_NNODES (Trainer reserves "
        "PET_NNODES for the pod count)",
    )
    p.add_argument(c.OPT_RDZV_ID, metavar="ID", help="run id; env PET_RDZV_ID; default <namespace>.<job>")
    p.add_argument(c.OPT_RDZV_CONF, metavar="K=V,K=V", help="extra rendezvous keys; env PET_RDZV_CONF")
    p.add_argument(
        c.OPT_MAX_RESTARTS,
        metavar="N",
        help=f"env PET_MAX_RESTARTS; default {DEFAULT_MAX_RESTARTS} (torchrun's)"
        + _compiled("max_restarts", c.COMPILED_MAX_RESTARTS),
    )
    for key, (opt, default) in TIMEOUT_OPTIONS.items():
        compiled = " (torch's)" + _compiled(f"rdzv.{key}", c.COMPILED_READ_TIMEOUT) if key == "read_timeout" else ""
        p.add_argument(opt, metavar="SECONDS", help=f"rendezvous {key}; default {default}{compiled}")
    p.add_argument(
        c.OPT_MONITOR_INTERVAL,
        metavar="SECONDS",
        help=f"agent poll period; default {DEFAULT_MONITOR_INTERVAL:g}",
    )
    p.add_argument(c.OPT_START_METHOD, choices=START_METHODS, help="default spawn (function mode only)")
    p.add_argument(
        c.OPT_SHUTDOWN_TIMEOUT,
        metavar="SECONDS",
        help=f"SIGTERM grace before SIGKILL; default {DEFAULT_SHUTDOWN_TIMEOUT}",
    )
    p.add_argument(
        c.OPT_HANG_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a worker whose heartbeat file (${c.ENV_HEARTBEAT_FILE}) is older than this as hung "
        f"(exit {c.EXIT_HUNG}); default off",
    )
    p.add_argument(c.OPT_LOCAL_ADDR, metavar="ADDR", help=f"this node's address; default ${c.ENV_POD_IP}")
    p.add_argument(c.OPT_LOG_DIR, metavar="DIR", help="worker logs and error files; default a temp dir")
    p.add_argument(c.OPT_FUNCTION, metavar="MODULE:FUNCTION", help="run a function in each worker")
    p.add_argument(c.OPT_RESULT, metavar="PATH", help="write the rank-0 return value as JSON here")
    p.add_argument(
        c.OPT_TERMINATION_LOG,
        metavar="PATH",
        help=f"failure summary for Kubernetes; default {c.DEFAULT_TERMINATION_LOG} if it exists; '' disables",
    )
    p.add_argument(c.OPT_DRY_RUN, action="store_true", help="print the resolved settings as JSON and exit")
    p.add_argument(c.OPT_DEBUG, action="store_true", help=f"tracebacks for agent errors (or {c.ENV_DEBUG}=1)")
    return p


def _compiled(field: str, value: int) -> str:
    """For a help text: what compiled jobs pass instead of elastic-launch's own default."""
    return f"; a compiled job passes elastic.yaml's {field}, whose default is {value}"


def _dest(opt: str) -> str:
    return opt.lstrip("-").replace("-", "_")


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Split ``[options] -- command...`` at the first ``--``; no ``--`` gives ``None``."""
    args = list(argv)
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1 :]
    return args, None


# --------------------------------------------------------------------------- value parsers


def parse_nnodes(text: str, source: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` with 1 <= MIN <= MAX, torch's semantics."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError(text)
    except ValueError:
        raise UsageError(f"{source}: expected N or MIN:MAX, e.g. 1:4 (given: {text})") from None
    if lo < 1 or hi < lo:
        raise UsageError(f"{source}: expected 1 <= MIN <= MAX (given: {text})")
    return lo, hi


def parse_nproc(text: str, source: str) -> int | str:
    """A positive integer, or one of ``auto``, ``cpu``, ``gpu`` (resolved in the container)."""
    value = text.strip().lower()
    if value in NPROC_KEYWORDS:
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"{source}: expected a positive integer, auto, cpu or gpu (given: {text})")
    return n


def parse_backend(text: str, source: str) -> str:
    """One of the supported rendezvous backends (case-insensitive)."""
    value = text.strip().lower()
    if value not in BACKEND_DEFAULT_PORTS:
        raise UsageError(f"{source}: expected one of {', '.join(BACKEND_DEFAULT_PORTS)} (given: {text})")
    return value


def _checked(check: Callable[[], T], source: str, text: str) -> T:
    """Run a shared check (:mod:`elastic_compile.contract_values`); its ValueError becomes one located line."""
    try:
        return check()
    except ValueError as e:
        raise UsageError(f"{source}: {e} (given: {text})") from None


def parse_endpoint(text: str, source: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6addr]:port``, as torch's ``parse_rendezvous_endpoint``."""
    return _checked(lambda: cv.split_endpoint(text, default_port), source, text)


def parse_int(text: str, source: str, minimum: int = 0) -> int:
    """An integer >= ``minimum`` (``1.5`` and ``-1`` are errors for a count)."""
    try:
        n = int(text.strip())
    except ValueError:
        raise UsageError(f"{source}: expected an integer >= {minimum} (given: {text})") from None
    if n < minimum:
        raise UsageError(f"{source}: expected an integer >= {minimum} (given: {text})")
    return n


def parse_timeout(text: str, source: str, minimum: int = 1) -> int:
    """Whole seconds (``30``, ``30.0``, ``15m``), the bounds the schema uses."""
    return _checked(lambda: cv.whole_seconds(cv.parse_duration(text), minimum), source, text)


def parse_interval(text: str, source: str) -> float:
    """The monitor interval (``5``, ``0.2``), the bounds the schema uses."""
    return _checked(lambda: cv.interval_seconds(cv.parse_duration(text)), source, text)


def parse_rdzv_conf(text: str, source: str) -> list[tuple[str, str]]:
    """``k=v,k=v`` into ordered pairs (values stay strings, as torchrun's parser)."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{source}: expected KEY=VALUE[,KEY=VALUE...] (given: {text})")
        pairs.append((key, value.strip()))
    return pairs


def normalize_rdzv_value(key: str, value: str, source: str, backend: str) -> object:
    """Check one rendezvous key for ``backend`` and give it the type torch will read it as."""
    return _checked(lambda: cv.check_conf_entry(key, value, backend), f"{source} {key}", value)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class LaunchSettings:
    """Everything ``elastic-launch`` decided before importing torch.

    ``sources`` says where each setting came from (``option --nnodes``, ``env PET_NNODES``,
    ``default``, ...), for ``--dry-run`` and for tests. ``nproc_per_node`` may still be
    ``auto``, ``cpu`` or ``gpu``: those resolve inside the container
    (:func:`elastic_compile.entrypoint.resources.resolve_nproc`).
    """

    min_nodes: int
    max_nodes: int
    nproc_per_node: int | str
    rdzv_backend: str
    rdzv_endpoint: str
    # With --rdzv-at-master (Kubeflow Trainer v2): this pod's PET_NODE_RANK; rank 0 hosts the
    # store. None otherwise. Not torch's node rank (GROUP_RANK), which the rendezvous assigns.
    node_rank: int | None
    run_id: str
    rdzv_configs: Mapping[str, object]
    max_restarts: int
    monitor_interval: float
    start_method: str
    shutdown_timeout: int
    # --hang-timeout: seconds a worker may go without renewing its heartbeat file; None: off.
    hang_timeout: int | None
    local_addr: str | None
    log_dir: str | None
    # Function mode: "module:function" and its string arguments. Script mode: function is
    # None and command is [resolved executable, *args].
    function: str | None
    command: tuple[str, ...]
    result_path: str | None
    termination_log: str | None
    # The default /dev/termination-log is written only if it exists (Kubernetes mounts it);
    # a path given explicitly is created.
    termination_log_create: bool
    debug: bool
    dry_run: bool
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def join_timeout(self) -> int:
        value = self.rdzv_configs["join_timeout"]
        return value if isinstance(value, int) else int(str(value))

    @property
    def nnodes(self) -> str:
        """``N`` or ``MIN:MAX``, for messages."""
        return str(self.min_nodes) if self.min_nodes == self.max_nodes else f"{self.min_nodes}:{self.max_nodes}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``--dry-run`` prints it)."""
        out = asdict(self)
        out["rdzv_configs"] = dict(self.rdzv_configs)
        out["command"] = list(self.command)
        out["sources"] = dict(self.sources)
        return out


@dataclass
class _Resolver:
    """Collects values and their sources; one instance per ``resolve_settings`` call."""

    opts: argparse.Namespace
    env: Mapping[str, str]
    sources: dict[str, str] = field(default_factory=dict)

    def env_value(self, name: str) -> str | None:
        value = self.env.get(name)
        return value if value and value.strip() else None

    def pick(
        self,
        setting: str,
        opt: str,
        env_name: str,
        parse: Callable[[str, str], T],
        same: Callable[[T, T], bool] | None = None,
    ) -> T | None:
        """The option/env resolution rule of the module docstring (None: neither given)."""
        opt_text: str | None = getattr(self.opts, _dest(opt))
        env_text = self.env_value(env_name)
        opt_value = parse(opt_text, opt) if opt_text is not None else None
        env_value = parse(env_text, env_name) if env_text is not None else None
        if opt_value is not None and env_value is not None:
            agree = same(opt_value, env_value) if same else opt_value == env_value
            if not agree:
                raise UsageError(
                    f"{opt} {opt_text} (manifest option) conflicts with {env_name}={env_text} "
                    "(operator env): the manifest and the operator disagree; make them match"
                )
            self.sources[setting] = f"option {opt} and env {env_name}"
            return opt_value
        if opt_value is not None:
            self.sources[setting] = f"option {opt}"
            return opt_value
        if env_value is not None:
            self.sources[setting] = f"env {env_name}"
            return env_value
        return None

    def default(self, setting: str, value: T, how: str = "default") -> T:
        self.sources[setting] = how
        return value

    def option(self, setting: str, opt: str, parse: Callable[[str], T], default: T) -> T:
        text: str | None = getattr(self.opts, _dest(opt))
        if text is None:
            return self.default(setting, default)
        self.sources[setting] = f"option {opt}"
        return parse(text)


def parse_options(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str] | None]:
    """Parse the options before ``--``; returns them and the words after ``--`` (or None).

    ``--help`` raises ``SystemExit(0)`` after printing, as argparse does.
    """
    options, command = split_command(argv)
    try:
        opts = build_parser().parse_args(options)
    except UsageError as e:
        if command is None and "unrecognized arguments" in str(e):
            raise UsageError(f"{e} (put the training command after --)") from None
        raise
    return opts, command


def resolve_settings(
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    *,
    check_function: bool = True,
) -> LaunchSettings:
    """Resolve ``elastic-launch ARGV`` in environment ``environ`` (default ``os.environ``).

    The same function the CLI runs, without torch: a test or a tool can see exactly what
    a pod would run. Raises :class:`UsageError` with a one-line message for bad input.
    ``check_function=False`` skips locating the ``--function`` module (it imports the
    module's parent packages).
    """
    opts, command = parse_options(argv)
    return resolve_parsed(opts, command, os.environ if environ is None else environ, check_function)


def resolve_parsed(
    opts: argparse.Namespace,
    command: list[str] | None,
    environ: Mapping[str, str],
    check_function: bool = True,
) -> LaunchSettings:
    """Second half of :func:`resolve_settings`, for callers that parsed already."""
    r = _Resolver(opts, environ)

    nnodes = r.pick("nnodes", c.OPT_NNODES, c.PET_NNODES, parse_nnodes)
    min_nodes, max_nodes = nnodes if nnodes is not None else r.default("nnodes", (1, 1))
    nproc = r.pick("nproc_per_node", c.OPT_NPROC_PER_NODE, c.PET_NPROC_PER_NODE, parse_nproc)
    if nproc is None:
        nproc = r.default("nproc_per_node", 1)
    backend = r.pick("rdzv_backend", c.OPT_RDZV_BACKEND, c.PET_RDZV_BACKEND, parse_backend)
    if backend is None:
        backend = r.default("rdzv_backend", DEFAULT_BACKEND)
    max_restarts = r.pick("max_restarts", c.OPT_MAX_RESTARTS, c.PET_MAX_RESTARTS, parse_int)
    if max_restarts is None:
        max_restarts = r.default("max_restarts", DEFAULT_MAX_RESTARTS)

    node_rank = None
    if opts.min_nodes is not None and not opts.rdzv_at_master:
        raise UsageError(
            f"{c.OPT_MIN_NODES} is the lower bound of an elastic TrainJob and needs {c.OPT_RDZV_AT_MASTER}; "
            f"elsewhere give {c.OPT_NNODES} MIN:MAX"
        )
    if opts.rdzv_at_master:
        endpoint, node_rank = _resolve_master(r, backend, min_nodes, max_nodes)
        if opts.min_nodes is not None:
            min_nodes = _resolve_min_nodes(r, opts.min_nodes, max_nodes)
    else:
        endpoint = _resolve_endpoint(r, backend, max_nodes)
    run_id = _resolve_run_id(r, max_nodes)
    local_addr = opts.local_addr or r.env_value(c.ENV_POD_IP)
    if opts.local_addr:
        r.sources["local_addr"] = f"option {c.OPT_LOCAL_ADDR}"
    else:
        r.sources["local_addr"] = f"env {c.ENV_POD_IP}" if local_addr else "default"
    rdzv_configs = _resolve_rdzv_configs(r, backend)
    if node_rank is not None:
        if "is_host" in rdzv_configs:
            raise UsageError(
                f"rendezvous key is_host ({r.sources['rdzv_configs.is_host']}): with {c.OPT_RDZV_AT_MASTER} "
                f"node rank 0 ({c.PET_NODE_RANK}) hosts the store; remove is_host"
            )
        # Exactly one pod hosts, the one PET_MASTER_ADDR names (<trainjob>-node-0-0); the
        # others are clients and wait for it up to read_timeout. No heuristic, no fallback.
        rdzv_configs["is_host"] = node_rank == 0
        r.sources["rdzv_configs.is_host"] = f"derived: {c.PET_NODE_RANK}={node_rank}"
    elif backend == "c10d" and "is_host" not in rdzv_configs:
        _derive_is_host(r, endpoint, rdzv_configs, backend)

    monitor_interval = r.option(
        "monitor_interval",
        c.OPT_MONITOR_INTERVAL,
        lambda t: parse_interval(t, c.OPT_MONITOR_INTERVAL),
        DEFAULT_MONITOR_INTERVAL,
    )
    shutdown_timeout = r.option(
        "shutdown_timeout",
        c.OPT_SHUTDOWN_TIMEOUT,
        lambda t: parse_timeout(t, c.OPT_SHUTDOWN_TIMEOUT, minimum=0),
        DEFAULT_SHUTDOWN_TIMEOUT,
    )
    start_method = r.option("start_method", c.OPT_START_METHOD, str, DEFAULT_START_METHOD)
    hang_timeout: int | None = r.option(
        "hang_timeout", c.OPT_HANG_TIMEOUT, lambda t: parse_timeout(t, c.OPT_HANG_TIMEOUT), None
    )

    function, command_t = _resolve_entrypoint(opts, command, check_function)
    if opts.result is not None:
        _check_result_path(opts.result, function)
    if opts.termination_log is not None:
        termination_log, create = (opts.termination_log or None), True
    else:
        termination_log, create = c.DEFAULT_TERMINATION_LOG, False

    return LaunchSettings(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        node_rank=node_rank,
        run_id=run_id,
        rdzv_configs=rdzv_configs,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method=start_method,
        shutdown_timeout=shutdown_timeout,
        hang_timeout=hang_timeout,
        local_addr=local_addr,
        log_dir=opts.log_dir,
        function=function,
        command=command_t,
        result_path=opts.result,
        termination_log=termination_log,
        termination_log_create=create,
        debug=bool(opts.debug) or environ.get(c.ENV_DEBUG, "") == "1",
        dry_run=bool(opts.dry_run),
        sources=r.sources,
    )


def _resolve_endpoint(r: _Resolver, backend: str, max_nodes: int) -> str:
    port = BACKEND_DEFAULT_PORTS[backend]
    parsed = r.pick(
        "rdzv_endpoint",
        c.OPT_RDZV_ENDPOINT,
        c.PET_RDZV_ENDPOINT,
        lambda text, source: (text.strip(), parse_endpoint(text, source, port)),
        same=lambda a, b: (a[1][0].lower(), a[1][1]) == (b[1][0].lower(), b[1][1]),
    )
    if parsed is None:
        if max_nodes == 1 and backend == "c10d":
            return r.default("rdzv_endpoint", LOCAL_ENDPOINT, "default (single node)")
        hint = (
            f"; this pod has {c.PET_MASTER_ADDR} (Kubeflow Trainer v2): pass {c.OPT_RDZV_AT_MASTER}"
            if r.env_value(c.PET_MASTER_ADDR)
            else ""
        )
        raise UsageError(
            f"no rendezvous endpoint: a {'multi-node' if max_nodes > 1 else backend} job needs "
            f"{c.PET_RDZV_ENDPOINT} (the operator sets it for jobs with an elasticPolicy) "
            f"or {c.OPT_RDZV_ENDPOINT}{hint}"
        )
    text, (_host, port) = parsed
    if port == 0 and max_nodes > 1:
        raise UsageError(
            f"rendezvous endpoint {text}: port 0 lets the OS pick a port the other nodes cannot "
            "know; a multi-node job needs a fixed port"
        )
    return text


def _resolve_master(r: _Resolver, backend: str, min_nodes: int, max_nodes: int) -> tuple[str, int]:
    """``--rdzv-at-master``: the endpoint and this pod's node rank from the Trainer v2 variables.

    The torch plugin of Kubeflow Trainer v2 injects PET_NNODES (a plain integer),
    PET_NODE_RANK (the pod's completion index), PET_MASTER_ADDR (``<trainjob>-node-0-0.
    <trainjob>``) and PET_MASTER_PORT, and no PET_RDZV_* (Trainer v2.3.0
    pkg/runtime/framework/plugins/torch/torch.go). torchrun
    would use its static backend there; we run c10d at the master address with min == max,
    so that a failed worker restarts the group in place, max_restarts times.
    """
    flag = c.OPT_RDZV_AT_MASTER
    if r.sources["nnodes"] == "default":
        raise UsageError(f"{flag}: no {c.PET_NNODES} and no {c.OPT_NNODES} (Kubeflow Trainer v2 sets {c.PET_NNODES})")
    if min_nodes != max_nodes:
        raise UsageError(
            f"{flag}: nnodes {min_nodes}:{max_nodes} ({r.sources['nnodes']}): Trainer v2 runs a fixed number "
            f"of pods ({c.PET_NNODES}); an elastic TrainJob gives its lower bound with {c.OPT_MIN_NODES}"
        )
    if backend != "c10d":
        raise UsageError(f"{flag}: the store runs in node 0's agent, which needs the c10d backend (given: {backend})")
    values: dict[str, str] = {}
    for name in (c.PET_MASTER_ADDR, c.PET_MASTER_PORT, c.PET_NODE_RANK):
        value = r.env_value(name)
        if value is None:
            raise UsageError(f"{flag}: {name} is not set (Kubeflow Trainer v2 sets it in the container 'node')")
        values[name] = value.strip()
    addr = _checked(lambda: cv.check_host(values[c.PET_MASTER_ADDR]), c.PET_MASTER_ADDR, values[c.PET_MASTER_ADDR])
    port = _checked(lambda: cv.parse_port(values[c.PET_MASTER_PORT]), c.PET_MASTER_PORT, values[c.PET_MASTER_PORT])
    rank = parse_int(values[c.PET_NODE_RANK], c.PET_NODE_RANK)
    if rank >= max_nodes:
        raise UsageError(f"{c.PET_NODE_RANK}: must be below the {max_nodes} nodes (given: {rank})")
    bare_v6 = ":" in addr and not addr.startswith("[")
    endpoint = f"[{addr}]:{port}" if bare_v6 else f"{addr}:{port}"
    given = r.pick(
        "rdzv_endpoint",
        c.OPT_RDZV_ENDPOINT,
        c.PET_RDZV_ENDPOINT,
        lambda text, source: parse_endpoint(text, source, BACKEND_DEFAULT_PORTS["c10d"]),
    )
    if given is not None and (given[0].lower(), given[1]) != (addr.strip("[]").lower(), port):
        raise UsageError(
            f"{flag}: the rendezvous endpoint {given[0]}:{given[1]} ({r.sources['rdzv_endpoint']}) is not "
            f"{c.PET_MASTER_ADDR}:{c.PET_MASTER_PORT} ({endpoint}); give one of them"
        )
    r.sources["rdzv_endpoint"] = f"env {c.PET_MASTER_ADDR}:{c.PET_MASTER_PORT} ({flag})"
    r.sources["node_rank"] = f"env {c.PET_NODE_RANK}"
    return endpoint, rank


def _resolve_min_nodes(r: _Resolver, text: str, max_nodes: int) -> int:
    """``--min-nodes``: the elastic TrainJob's lower bound; the upper one is the pod count, PET_NNODES.

    Trainer reserves PET_NNODES and sets it to the integer numNodes (the MAX pods JobSet
    creates), so the range reaches us as this option: MIN:PET_NNODES, 1 <= MIN <= PET_NNODES.
    """
    value = parse_int(text, c.OPT_MIN_NODES)
    if not 1 <= value <= max_nodes:
        raise UsageError(
            f"{c.OPT_MIN_NODES}: must lie in 1..{max_nodes}, the pods of the TrainJob "
            f"({r.sources['nnodes']}) (given: {text})"
        )
    r.sources["nnodes"] = f"option {c.OPT_MIN_NODES} and {r.sources['nnodes']}"
    return value


def _resolve_run_id(r: _Resolver, max_nodes: int) -> str:
    run_id = r.pick("run_id", c.OPT_RDZV_ID, c.PET_RDZV_ID, lambda t, _s: t.strip())
    if run_id is None:
        job = r.env_value(c.ENV_JOB_NAME)
        namespace = r.env_value(c.ENV_NAMESPACE)
        if job:
            # Identical on every pod of the job, unlike torch's per-process uuid fallback
            # (torch/distributed/launcher/api.py, LaunchConfig.run_id).
            how = f"env {c.ENV_NAMESPACE}.{c.ENV_JOB_NAME}" if namespace else f"env {c.ENV_JOB_NAME}"
            run_id = r.default("run_id", f"{namespace}.{job}" if namespace else job, how)
        elif max_nodes == 1:
            # One agent meets only itself: any id works, it just must not be empty.
            run_id = r.default("run_id", f"local-{uuid.uuid4().hex[:12]}", "default (single node)")
        else:
            raise UsageError(
                "no run id for a multi-node job: every node must use the same one; set "
                f"{c.PET_RDZV_ID}, {c.OPT_RDZV_ID}, or {c.ENV_NAMESPACE} and {c.ENV_JOB_NAME}"
            )
    return _checked(lambda: cv.check_run_id(run_id), f"run id ({r.sources['run_id']})", run_id)


def _resolve_rdzv_configs(r: _Resolver, backend: str) -> dict[str, object]:
    # (source, key, raw value) from every place a rendezvous key can come from.
    given: list[tuple[str, str, str]] = []
    env_conf = r.env_value(c.PET_RDZV_CONF)
    if env_conf is not None:
        given += [(c.PET_RDZV_CONF, k, v) for k, v in parse_rdzv_conf(env_conf, c.PET_RDZV_CONF)]
    if r.opts.rdzv_conf is not None:
        given += [(c.OPT_RDZV_CONF, k, v) for k, v in parse_rdzv_conf(r.opts.rdzv_conf, c.OPT_RDZV_CONF)]
    for key, (opt, _default) in TIMEOUT_OPTIONS.items():
        text = getattr(r.opts, _dest(opt))
        if text is not None:
            given.append((opt, key, text))

    conf: dict[str, object] = {}
    first: dict[str, tuple[str, str]] = {}
    for source, key, raw in given:
        value = normalize_rdzv_value(key, raw, source, backend)
        if key in conf and conf[key] != value:
            src0, raw0 = first[key]
            raise UsageError(f"rendezvous key {key}: {src0} gives {raw0}, {source} gives {raw}; set it in one place")
        if key not in conf:
            conf[key] = value
            first[key] = (source, raw)
            r.sources[f"rdzv_configs.{key}"] = source if source.startswith("-") else f"env {source}"
    for key, (_opt, default) in TIMEOUT_OPTIONS.items():
        if key not in conf:
            conf[key] = r.default(f"rdzv_configs.{key}", default)
    return conf


def _derive_is_host(r: _Resolver, endpoint: str, conf: dict[str, object], backend: str) -> None:
    """Make this pod the c10d store host when the endpoint names it.

    torch's own heuristic compares the endpoint with the hostname and, when hosting fails,
    quietly becomes a client (c10d_rendezvous_backend.py _create_tcp_store); naming the pod explicitly makes hosting
    deterministic. Never sets ``False``: that would stop torch's heuristic elsewhere.

    A loopback pod IP identifies nothing: "pods" run on one machine (``elastic-compile run``,
    the tests) all have 127.0.0.1, like the endpoint, and would all claim the store. They
    keep torch's heuristic, which lets the first one host. ``--local-addr`` is not compared
    either: it is an address to advertise, not proof of identity.
    """
    host, _port = parse_endpoint(endpoint, "endpoint", BACKEND_DEFAULT_PORTS[backend])
    for name in (c.ENV_POD_NAME, c.ENV_POD_IP):
        value = r.env_value(name)
        if name == c.ENV_POD_IP and value and _is_loopback(value):
            continue
        if value and value.strip().lower() == host.lower():
            conf["is_host"] = True
            r.sources["rdzv_configs.is_host"] = f"derived: endpoint host equals {name}"
            return


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip()).is_loopback
    except ValueError:
        return False


def _resolve_entrypoint(
    opts: argparse.Namespace, command: list[str] | None, check_function: bool
) -> tuple[str | None, tuple[str, ...]]:
    if opts.function is not None:
        target = opts.function.strip()
        if not _FUNCTION_RE.match(target):
            raise UsageError(f"{c.OPT_FUNCTION}: expected MODULE:FUNCTION, e.g. pkg.train:main (given: {target})")
        if check_function:
            _check_module(target.partition(":")[0])
        return target, tuple(command or ())
    if not command:
        raise UsageError(f"no command: use {c.LAUNCHER} [options] -- COMMAND [ARGS...] or {c.OPT_FUNCTION}")
    return None, (resolve_executable(command[0]), *command[1:])


def resolve_executable(name: str) -> str:
    """The program each script-mode worker runs.

    ``python`` and ``python3`` mean this interpreter (``sys.executable``): the workers must
    run the same torch as the agent, and the console script's interpreter is not always
    first on ``PATH`` (an inactive virtualenv). Anything else is looked up on ``PATH``
    as a shell would.
    """
    if name in PYTHON_NAMES:
        return sys.executable
    if "/" in name:
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        raise UsageError(f"command {name}: not an executable file")
    found = shutil.which(name)
    if found is None:
        raise UsageError(f"command {name}: not found on PATH")
    return found


def _check_module(module: str) -> None:
    # find_spec locates the module without running it (parent packages do get imported).
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise UsageError(f"{c.OPT_FUNCTION}: cannot import {module}: {e}") from None
    if spec is None:
        raise UsageError(f"{c.OPT_FUNCTION}: no module named {module!r} (check PYTHONPATH and the image)")


def _check_result_path(path: str, function: str | None) -> None:
    if function is None:
        raise UsageError(f"{c.OPT_RESULT} needs {c.OPT_FUNCTION}: a script's workers return nothing")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{c.OPT_RESULT} {path}: directory {parent} does not exist")
    check_result_target(path)


def check_result_target(path: str) -> None:
    """``--result`` may replace a regular file or create one, never replace a symbolic link or anything else.

    The result is written to a temporary file beside it and renamed over it: a rename
    never writes through a link, but it would silently replace the user's link (or
    directory entry) with our file.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"{c.OPT_RESULT} {path}: {e.strerror}") from None
    if stat.S_ISLNK(mode):
        raise UsageError(f"{c.OPT_RESULT} {path}: a symbolic link; give the path of the file itself")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{c.OPT_RESULT} {path}: exists and is not a regular file")
