"""The container command every Kubernetes target runs, for each ``launcher`` of the spec.

Targets compute elastic-launch's arguments (:func:`launcher_args`: the behaviour the
engine does not inject, then ``-- <command>``); :func:`container_command` turns them into
the training container's command and args for the launcher the spec names:

* ``elastic-launch``: ``elastic-launch <args>``, installed in the image;
* ``bundled``: ``python3 /opt/elastic-launch/elastic-launch.py <args>``, the same launcher
  from the ConfigMap of :mod:`.bundle`;
* ``torchrun``: the image's ``torchrun`` given the same settings in its own spelling
  (:func:`torchrun_args`); it reads the engine's ``PET_*`` variables itself, and what
  elastic-launch would do for itself comes through the environment (:func:`add_launcher_env`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from elastic_compile import contract
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.launchers import NODE0_PREFIX
from elastic_compile.targets import bundle

# The pod's grace period must exceed elastic-launch's own SIGTERM->SIGKILL window, or the
# kubelet kills the agent before it has stopped its workers and written its report
# (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination).
GRACE_MARGIN_SECONDS = 15

# torch reads this when a LaunchConfig leaves shutdown_timeout unset (torch 2.12+
# ``LaunchConfig.__post_init__``), as torchrun and both Flyte launchers do: how our
# shutdown_timeout reaches launchers that are not ours.
ENV_SHUTDOWN_TIMEOUT: Final = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

# torchrun's own spelling of what elastic-launch takes (torch/distributed/run.py; each
# also has a PET_* variable, which the command line beats).
_TR_NNODES: Final = "--nnodes"
_TR_NPROC: Final = "--nproc-per-node"
_TR_BACKEND: Final = "--rdzv-backend"
_TR_ENDPOINT: Final = "--rdzv-endpoint"
_TR_ID: Final = "--rdzv-id"
_TR_CONF: Final = "--rdzv-conf"
_TR_MAX_RESTARTS: Final = "--max-restarts"
_TR_MONITOR: Final = "--monitor-interval"
_TR_LOCAL_ADDR: Final = "--local-addr"
_TR_STANDALONE: Final = "--standalone"
_TR_MODULE: Final = "-m"
_TR_NO_PYTHON: Final = "--no-python"


# Measured with torch 2.13: a worker's sys.exit(3), SIGKILL or exception, a rendezvous timeout
# and SIGTERM while workers run all end torchrun with 1 (docs/launchers.md), an exit code the
# operator's ExitCode policy takes for a permanent failure (1-127).
TORCHRUN_EXIT_CODES: Final = (
    "torchrun exits 1 for every failure, so ExitCode takes a preemption or an OOM kill for a bug in the code"
)


def exit_codes_lost(launcher: str | None, restart_policy: Any) -> bool:
    """Whether ``restart_policy`` is ExitCode under a launcher of torchrun's (:data:`TORCHRUN_EXIT_CODES`).

    ``launcher``: the spec's (``torchrun``, ``bundled``, ``elastic-launch``) or the one a
    command starts (``torchrun``, ``python -m torch.distributed.run``, ...); None for none.
    """
    return restart_policy == "ExitCode" and launcher not in (None, contract.LAUNCHER, "bundled")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def launcher_args(
    spec: ElasticSpec, *, policy_injected: bool | None = None, rendezvous: Sequence[str] = ()
) -> tuple[str, ...]:
    """The elastic-launch arguments baked into the manifest.

    Only behaviour the engine does not inject. The training operator v1 injects the
    topology (nnodes, nproc, endpoint, backend, max restarts, run id) as PET_* variables
    in multi-node jobs; a single-node job has no elasticPolicy, so its max_restarts is
    baked here. ``policy_injected`` overrides that rule (Trainer v2 never injects max
    restarts or rendezvous keys); ``rendezvous`` adds options that place the rendezvous.
    """
    rdzv = spec.rdzv
    args: list[str] = [
        contract.OPT_JOIN_TIMEOUT, str(rdzv.join_timeout),
        contract.OPT_LAST_CALL_TIMEOUT, str(rdzv.last_call_timeout),
        contract.OPT_CLOSE_TIMEOUT, str(rdzv.close_timeout),
        contract.OPT_HEARTBEAT_TIMEOUT, str(rdzv.heartbeat_timeout),
        contract.OPT_READ_TIMEOUT, str(rdzv.read_timeout),
        contract.OPT_MONITOR_INTERVAL, _seconds(spec.monitor_interval),
        contract.OPT_START_METHOD, spec.start_method,
        contract.OPT_SHUTDOWN_TIMEOUT, str(spec.shutdown_timeout),
    ]  # fmt: skip
    if spec.hang_timeout is not None:
        args += [contract.OPT_HANG_TIMEOUT, str(spec.hang_timeout)]
    if not (spec.nnodes.max > 1 if policy_injected is None else policy_injected):
        # Nothing injects these (no elasticPolicy on one node, none at all in Trainer v2): bake them.
        args += [contract.OPT_MAX_RESTARTS, str(spec.max_restarts)]
        if rdzv.id is not None:
            args += [contract.OPT_RDZV_ID, rdzv.id]
        if rdzv.conf:
            args += [contract.OPT_RDZV_CONF, ",".join(f"{k}={v}" for k, v in rdzv.conf.items())]
    args += rendezvous
    if spec.function is not None:
        args += [contract.OPT_FUNCTION, spec.function.target, "--", *spec.function.args]
    else:
        args += ["--", *(spec.command or [])]
    return tuple(args)


def container_command(spec: ElasticSpec, args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The training container's command and args for ``spec.launcher``, from elastic-launch's ``args``."""
    if spec.launcher == "bundled":
        return bundle.command(), list(args)
    if spec.launcher == "torchrun":
        words = torchrun_args(spec, args)
        if contract.OPT_RDZV_AT_MASTER in _options(args):
            # Node 0 hosts the store by its rank, not by a DNS guess (schema/launchers.NODE0_SCRIPT).
            at = words.index(_TR_CONF)
            conf = words[at + 1]
            return list(NODE0_PREFIX[:3]), [NODE0_PREFIX[3], conf, *words[:at], *words[at + 2 :]]
        return [contract.TORCHRUN], words
    return [contract.LAUNCHER], list(args)


# --------------------------------------------------------------------------- launchers not ours


def rdzv_configs(spec: ElasticSpec) -> dict[str, Any]:
    """Every rendezvous key elastic-launch would give torch: the timeouts, then ``rdzv.conf``.

    For launchers that are not ours (torchrun, Flyte's): without this torch's defaults
    would apply in the pod (a 60 s store read timeout: flytekit#3419).
    """
    rdzv = spec.rdzv
    return {
        # c10d ignores "timeout"; LaunchConfig adds 900 when it is missing, so it is set
        # to join_timeout to keep torch's log honest (as elastic-launch does), and the
        # legacy etcd backend reads it as its join timeout.
        "timeout": rdzv.join_timeout,
        "join_timeout": rdzv.join_timeout,
        "last_call_timeout": rdzv.last_call_timeout,
        "close_timeout": rdzv.close_timeout,
        "heartbeat_timeout": rdzv.heartbeat_timeout,
        "read_timeout": rdzv.read_timeout,
        **rdzv.conf,
    }


def add_launcher_env(spec: ElasticSpec, container: dict[str, Any], taken: set[str] | None = None) -> None:
    """What elastic-launch does for itself, as env for launchers that are not ours (unless already set).

    ``taken``: names set elsewhere in the container's environment (Flyte 2's env_vars).
    """
    env: list[dict[str, Any]] = container.setdefault("env", [])
    names = {e.get("name") for e in env} | (taken or set())
    for name, value in launcher_env(spec.shutdown_timeout):
        if name not in names:
            env.append({"name": name, "value": value})


def launcher_env(shutdown_timeout: int) -> tuple[tuple[str, str], ...]:
    """The ``(name, value)`` pairs :func:`add_launcher_env` writes (the import drops them again)."""
    return (
        # Without it restarts and scale-up reuse the rank-0 agent's store and fail
        # (pytorch#135712); elastic-launch sets it, torchrun and the SDKs do not.
        (contract.ENV_DISABLE_SHARED_STORE, "1"),
        (ENV_SHUTDOWN_TIMEOUT, str(shutdown_timeout)),
    )


def _options(args: Sequence[str]) -> dict[str, str]:
    """elastic-launch's options in ``args`` (before the workload), by name; flags map to ""."""
    out: dict[str, str] = {}
    words = iter(args)
    for word in words:
        if word in ("--", contract.OPT_FUNCTION):
            break
        out[word] = "" if word == contract.OPT_RDZV_AT_MASTER else next(words)
    return out


def _reference(name: str) -> str:
    """``$(NAME)``: the kubelet puts the container's variable there (command and args only)."""
    return f"$({name})"


def _program(command: Sequence[str]) -> list[str]:
    """The command as torchrun's training script: ``python X.py`` and ``python -m mod`` as torchrun runs them.

    torchrun starts a script with its own interpreter (``sys.executable -u``), which is what
    elastic-launch makes of ``python``/``python3``; anything else runs as written (``--no-python``).
    """
    if command and command[0] in ("python", "python3") and len(command) > 1:
        if command[1] == "-m" and len(command) > 2:
            return [_TR_MODULE, *command[2:]]
        if not command[1].startswith("-"):
            return list(command[1:])
    return [_TR_NO_PYTHON, *command]


def torchrun_args(spec: ElasticSpec, args: Sequence[str]) -> list[str]:
    """torchrun's arguments carrying every setting of elastic-launch's ``args``.

    What the engine injects stays with the engine (torchrun reads the same ``PET_*`` as
    elastic-launch); what elastic-launch derives in the pod is spelled out: the run id
    ``<namespace>.<job>`` and the pod IP as local address come from the downward-API
    variables through ``$(VAR)``, Trainer's ``--rdzv-at-master`` becomes c10d at
    ``$(PET_MASTER_ADDR):$(PET_MASTER_PORT)`` (:func:`container_command` has a shell make node 0
    the host), and a single node meets on its own pod
    (``--standalone``). The rendezvous timeouts and ``rdzv.conf`` go in one ``--rdzv-conf``,
    which replaces ``PET_RDZV_CONF`` (torchrun does not merge them, so it repeats rdzv.conf).
    """
    if spec.function is not None:
        raise ValueError("torchrun runs a command, not a function")  # the schema refuses it first
    options = _options(args)
    at_master = contract.OPT_RDZV_AT_MASTER in options
    out: list[str] = []
    if spec.nnodes.max == 1 and not at_master:
        out.append(_TR_STANDALONE)
    if contract.OPT_NPROC_PER_NODE in options:
        out += [_TR_NPROC, options[contract.OPT_NPROC_PER_NODE]]
    if at_master and contract.OPT_MIN_NODES in options:
        # An elastic TrainJob: torchrun's --nnodes beats PET_NNODES, which Trainer sets to the pod count.
        out += [_TR_NNODES, f"{options[contract.OPT_MIN_NODES]}:{_reference(contract.PET_NNODES)}"]
    if at_master:
        endpoint = f"{_reference(contract.PET_MASTER_ADDR)}:{_reference(contract.PET_MASTER_PORT)}"
        out += [_TR_BACKEND, "c10d", _TR_ENDPOINT, endpoint]
    if contract.OPT_RDZV_ID in options:
        out += [_TR_ID, options[contract.OPT_RDZV_ID]]
    elif spec.rdzv.id is None and (spec.nnodes.max > 1 or at_master):
        # elastic-launch's default run id: the same on every pod of the job, different between jobs.
        out += [_TR_ID, f"{_reference(contract.ENV_NAMESPACE)}.{_reference(contract.ENV_JOB_NAME)}"]
    out += [_TR_CONF, ",".join(f"{k}={v}" for k, v in rdzv_configs(spec).items())]
    if contract.OPT_MAX_RESTARTS in options:
        out += [_TR_MAX_RESTARTS, options[contract.OPT_MAX_RESTARTS]]
    out += [_TR_MONITOR, options[contract.OPT_MONITOR_INTERVAL]]
    out += [_TR_LOCAL_ADDR, _reference(contract.ENV_POD_IP)]
    return out + _program(spec.command or [])


def command_comment(command: Sequence[str], args: Sequence[str]) -> str:
    """``--explain``'s line for the training container's command and args, as one shell line."""
    import shlex  # --explain only

    return "# container command: " + shlex.join([*command, *args]) + "\n"
