"""The container command every Kubernetes target runs: ``elastic-launch <behaviour options> -- <command>``."""

from __future__ import annotations

from elastic_compile import contract
from elastic_compile.schema import ElasticSpec

# The pod's grace period must exceed elastic-launch's own SIGTERM->SIGKILL window, or the
# kubelet kills the agent before it has stopped its workers and written its report
# (torch-elastic.md §13.10).
GRACE_MARGIN_SECONDS = 15


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def launcher_args(spec: ElasticSpec) -> tuple[str, ...]:
    """The elastic-launch arguments baked into the manifest.

    Only behaviour the operator does not inject: the topology (nnodes, nproc, endpoint,
    backend, max restarts, run id) arrives as PET_* variables in multi-node jobs. A
    single-node job has no elasticPolicy, so its max_restarts is baked here.
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
    if spec.nnodes.max == 1:
        # No elasticPolicy on one node, so nothing injects these: bake them.
        args += [contract.OPT_MAX_RESTARTS, str(spec.max_restarts)]
        if rdzv.conf:
            args += [contract.OPT_RDZV_CONF, ",".join(f"{k}={v}" for k, v in rdzv.conf.items())]
    if spec.function is not None:
        args += [contract.OPT_FUNCTION, spec.function.target, "--", *spec.function.args]
    else:
        args += ["--", *(spec.command or [])]
    return tuple(args)
