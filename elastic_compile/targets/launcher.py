"""The container command every Kubernetes target runs: ``elastic-launch <behaviour options> -- <command>``."""

from __future__ import annotations

from collections.abc import Sequence

from elastic_compile import contract
from elastic_compile.schema import ElasticSpec

# The pod's grace period must exceed elastic-launch's own SIGTERM->SIGKILL window, or the
# kubelet kills the agent before it has stopped its workers and written its report
# (torch-elastic.md §13.10).
GRACE_MARGIN_SECONDS = 15


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
    if not (spec.nnodes.max > 1 if policy_injected is None else policy_injected):
        # Nothing injects these (no elasticPolicy on one node, none at all in Trainer v2): bake them.
        args += [contract.OPT_MAX_RESTARTS, str(spec.max_restarts)]
        if rdzv.conf:
            args += [contract.OPT_RDZV_CONF, ",".join(f"{k}={v}" for k, v in rdzv.conf.items())]
    args += rendezvous
    if spec.function is not None:
        args += [contract.OPT_FUNCTION, spec.function.target, "--", *spec.function.args]
    else:
        args += ["--", *(spec.command or [])]
    return tuple(args)
