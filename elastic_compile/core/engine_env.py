"""The environment each engine injects into the training container: one table per generation.

These are the facts every env check stands on (the spec's ``env``, ``import``, ``doctor``,
``elastic-compile run``'s emulations in :mod:`elastic_compile.localrun`). Each row names the
variable, when the engine sets it and the source line at the release we target, so that
the rows can be checked one by one against the real operators (``tests/cluster``):

* :data:`TRAINING_OPERATOR_V1`: Kubeflow training-operator v1.9.4 (``kubeflow/trainer`` at
  tag ``v1.9.4``, branch release-1.9; Go module ``github.com/kubeflow/training-operator``).
  ``setPodEnv`` *appends* its entries to every container of ``spec.containers`` (not init
  containers), after the container's own env, without removing a user entry of the same
  name: the later entry wins in the pod.
* :data:`TRAINER_V2`: Kubeflow Trainer v2.3.0 (``kubeflow/trainer`` at tag ``v2.3.0``). The
  torch plugin *upserts* its five entries into container ``node`` after the runtime's env and
  ``trainer.env`` (a user entry of the same name is replaced in place), and its webhook refuses
  those names in ``trainer.env``. Nothing else of Trainer, nor JobSet v0.12.0, adds env.

Names a generation never sets are the user's there: ``PYTHONUNBUFFERED`` is the v1
operator's, never Trainer's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

from elastic_compile import contract

Generation = Literal["v1", "v2"]

_V1: Final = "kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/"
_V2: Final = "kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go"


class Injected(NamedTuple):
    """One variable an engine sets: its name, its value, when, and where in the engine's source."""

    name: str
    value: str
    when: str
    source: str


#: training-operator v1.9.4, ``setPodEnv`` (envvar.go:43-127) with the Master and elastic generators.
TRAINING_OPERATOR_V1: Final[tuple[Injected, ...]] = (
    Injected("PYTHONUNBUFFERED", "1", "every pod", _V1 + "envvar.go:56-60"),
    Injected("MASTER_PORT", "the Master's pytorchjob-port (23456)", "with a Master replica", _V1 + "master.go:44-47"),
    Injected("PET_MASTER_PORT", "as MASTER_PORT", "with a Master replica", _V1 + "master.go:48-51"),
    Injected("MASTER_ADDR", "<job>-master-0", "with a Master replica", _V1 + "master.go:52-55"),
    Injected("PET_MASTER_ADDR", "<job>-master-0", "with a Master replica", _V1 + "master.go:56-59"),
    Injected(
        "WORLD_SIZE", "replicas x nprocPerNode (1 unless a number)", "with a Master replica", _V1 + "envvar.go:85-88"
    ),
    Injected("RANK", "0 on the Master, i+1 on Worker i", "with a Master replica", _V1 + "envvar.go:89-92"),
    Injected("PET_NODE_RANK", "as RANK", "with a Master replica", _V1 + "envvar.go:93-96"),
    Injected("PET_NPROC_PER_NODE", "spec.nprocPerNode (defaulted to auto)", "every pod", _V1 + "envvar.go:99-104"),
    Injected(
        "PET_RDZV_ENDPOINT", "<rdzvHost or job-worker-0>:<port>", "with an elasticPolicy", _V1 + "elastic.go:78-83"
    ),
    Injected("PET_RDZV_BACKEND", "rdzvBackend, else c10d", "with an elasticPolicy", _V1 + "elastic.go:84-85"),
    Injected(
        "PET_NNODES",
        "MIN:MAX of the elasticPolicy as written (Worker replicas when neither is set); else all replicas",
        "every pod",
        _V1 + "elastic.go:124-144, envvar.go:117-123",
    ),
    Injected(
        "PET_MAX_RESTARTS", "elasticPolicy.maxRestarts", "with elasticPolicy.maxRestarts", _V1 + "elastic.go:93-98"
    ),
    Injected("PET_RDZV_ID", "elasticPolicy.rdzvId", "with elasticPolicy.rdzvId", _V1 + "elastic.go:105-110"),
    Injected("PET_RDZV_CONF", "k=v,k=v", "with elasticPolicy.rdzvConf", _V1 + "elastic.go:111-113"),
    Injected("PET_STANDALONE", '""', "with elasticPolicy.standalone", _V1 + "elastic.go:114-119"),
)

#: Trainer v2.3.0's torch plugin, ``EnforceMLPolicy`` (torch.go:110-225), into container ``node``.
TRAINER_V2: Final[tuple[Injected, ...]] = (
    Injected(contract.PET_NNODES, "numNodes", "every pod", _V2 + ":145-148"),
    Injected(
        contract.PET_NPROC_PER_NODE,
        "numProcPerNode; else auto with a resource named *gpu*, else max(1, the CPU request or limit)",
        "every pod",
        _V2 + ":121-135,149-151",
    ),
    Injected(contract.PET_NODE_RANK, "the Job completion index (downward API)", "every pod", _V2 + ":152-156"),
    Injected(contract.PET_MASTER_ADDR, "<name>-node-0-0.<name>", "unless the command is tune run", _V2 + ":159-162"),
    Injected(contract.PET_MASTER_PORT, "29500", "unless the command is tune run", _V2 + ":163-165"),
)

TABLES: Final[dict[Generation, tuple[Injected, ...]]] = {"v1": TRAINING_OPERATOR_V1, "v2": TRAINER_V2}
ENGINES: Final[dict[Generation, str]] = {
    "v1": "the training operator v1",
    "v2": "Trainer v2's torch plugin",
}

#: The target of each generation's job (for messages).
_TARGET: Final[dict[Generation, str]] = {"v1": "pytorchjob", "v2": "trainjob"}


def injected(name: str, generation: Generation) -> Injected | None:
    """The row of ``generation``'s table that sets ``name``, or None when that engine never does."""
    return next((row for row in TABLES[generation] if row.name == name), None)


def injected_by(name: str) -> list[tuple[Generation, Injected]]:
    """Every generation that sets ``name``, with its row."""
    return [(g, row) for g in TABLES if (row := injected(name, g)) is not None]


# --------------------------------------------------------------------------- what the spec's env may not set


def setters(name: str) -> str:
    """``; <engine> sets it (<when>)`` for every generation that sets ``name`` ("" for none)."""
    rows = injected_by(name)
    return "; " + " and ".join(f"{ENGINES[g]} sets it ({row.when})" for g, row in rows) if rows else ""


def generation_env_problem(name: str, generation: Generation) -> str | None:
    """Why ``name`` may not be set by the user where ``generation``'s engine runs the job, or None.

    Only for names the schema lets through (not ``PET_*``, not what torch elastic sets in
    every worker): a name this engine sets and another generation leaves to the user
    (``PYTHONUNBUFFERED``: the v1 operator's, never Trainer's).
    """
    row = injected(name, generation)
    if row is None or name.startswith(contract.OPERATOR_ENV_PREFIX) or name in contract.WORKER_ENV_NAMES:
        return None
    others = [g for g in TABLES if g != generation and injected(name, g) is None]
    keeps = f"; {ENGINES[others[0]]} does not, so -t {_TARGET[others[0]]} keeps yours" if others else ""
    # setPodEnv appends to every container (envvar.go:49-60); the torch plugin upserts into node (torch.go:173).
    verb = {"v1": f"appends {name}={row.value} to every container after yours", "v2": f"sets {name}={row.value} in "
            "container node over yours"}[generation]  # fmt: skip
    return f"{ENGINES[generation]} {verb} ({row.source}), so yours never applies{keeps}"


def operator_v1_names(*, master: bool, elastic_policy: Mapping[str, Any] | None) -> frozenset[str]:
    """The names the training operator v1 appends to every container of a job of this layout.

    ``master``: the job has a Master replica; ``elastic_policy``: its elasticPolicy, or None.
    The rows of :data:`TRAINING_OPERATOR_V1` that apply (the same conditions as setPodEnv's).
    """
    policy = elastic_policy if elastic_policy is not None else {}
    when = {
        "every pod": True,
        "with a Master replica": master,
        "with an elasticPolicy": elastic_policy is not None,
        "with elasticPolicy.maxRestarts": policy.get("maxRestarts") is not None,
        "with elasticPolicy.rdzvId": policy.get("rdzvId") is not None,
        "with elasticPolicy.rdzvConf": policy.get("rdzvConf") is not None,
        "with elasticPolicy.standalone": policy.get("standalone") is True,
    }
    return frozenset(row.name for row in TRAINING_OPERATOR_V1 if when[row.when])
