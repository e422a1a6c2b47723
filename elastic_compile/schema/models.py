"""The elastic.yaml spec: every field, every default and the reason for it.

Names follow torchrun and flytekit's ``Elastic`` where one exists. Every model forbids
unknown fields (a typo must fail, not vanish) and is frozen. Number and boolean fields
are strict: ``"2"`` is not 2 and ``yes`` is not true, because YAML 1.1 readers disagree
about such values and we would rather ask than guess. Compound values (``nnodes: 1:4``,
durations, quantities, the two ``env`` forms) are parsed once, here, in validators.
"""

# No `from __future__ import annotations` here: pydantic would compile every field's annotation
# from its text when each model class is created (about 100 calls of compile(), 15 M
# instructions of a cold compile); evaluated by the interpreter, they cost nothing more. A
# method's annotation that names its own class is therefore quoted.
import posixpath
import re
import typing
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from elastic_compile import contract
from elastic_compile import contract_values as cv
from elastic_compile.core import accelerators, engine_env, names
from elastic_compile.core.quantity import OUT_OF_RANGE, QUANTITY_PATTERN, is_quantity, out_of_range, parse_quantity
from elastic_compile.core.resources import (
    MIG_PREFIX,
    NEURON_DEVICES,
    accelerator_counts,
    accelerator_problems,
    is_hugepages,
    is_mig,
    is_native,
    overcommit_allowed,
    process_rule,
    whole_units,
)
from elastic_compile.core.scalars import source_text
from elastic_compile.schema import podvalues
from elastic_compile.schema.launchers import TORCHRUN_OPTIONS, nested_launcher
from elastic_compile.schema.podspec import pod_value_problems, podspec_problems

# --------------------------------------------------------------------------- helpers

# An image reference as the kubelet parses it (distribution/reference's grammar): ASCII
# only, so a Cyrillic look-alike letter in nvidia/pytorch is refused here, not at the pull.
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_DOMAIN = rf"(?:{_IMAGE_HOST}(?:\.{_IMAGE_HOST})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"^(?:{_IMAGE_DOMAIN}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?\Z",
    re.ASCII,
)
_ENV_NAME = podvalues.ENV_NAME
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_RESOURCE_NAME = re.compile(
    rf"^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|{names.DNS1123_SUBDOMAIN_TEXT}/{names.QUALIFIED_NAME_TEXT})\Z"
)

T = typing.TypeVar("T")

#: The CRD's int32 fields (runPolicy counts and seconds) cannot hold more.
INT32_MAX = 2**31 - 1

#: Kueue admits a job by these labels on the job object (not runPolicy.schedulingPolicy.queue).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

#: The short resource key users write for NVIDIA GPUs, and what it means on Kubernetes.
GPU_KEY = "gpu"
GPU_RESOURCE = "nvidia.com/gpu"


def _strict_text(value: Any, what: str) -> str:
    """A string field: keep text exactly as written; booleans and nulls must be quoted."""
    if type(value) is str:  # nearly always: as written
        return value
    text = source_text(value)
    if text is None:
        if isinstance(value, bool) or value is None:
            shown = "null" if value is None else str(value).lower()
            # The compiler's error mapper puts back what the user wrote (~, Null, ...).
            raise ValueError(f'{what} must be a string; quote it: "{shown}"')
        raise ValueError(f"{what} must be a string")
    return text


def _text(what: str) -> BeforeValidator:
    return BeforeValidator(lambda v: _strict_text(v, what))


def _no_items() -> list[Any]:
    """A new empty list: a list field's default.

    Not ``default_factory=list``: pydantic asks ``inspect.signature`` of every default
    factory, and the builtin ``list``'s is parsed from its text signature by ``tokenize``,
    which compiles its largest regular expression for it (about 17 M instructions of a
    cold compile). A function of ours has a signature to read.
    """
    return []


def _optional(check: typing.Callable[[T], T]) -> typing.Callable[[T | None], T | None]:
    """``check`` for a field that may be unset (None passes)."""
    return lambda value: None if value is None else check(value)


def _fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_duration(value: Any) -> float:
    """Seconds from ``900``, ``2.5``, ``"15m"``, ``"1h30m"`` or ``"90s"`` (the launcher's grammar)."""
    if isinstance(value, bool):
        raise ValueError(cv.DURATION_HINT)
    if isinstance(value, (int, float)):
        return cv.check_seconds(float(value))
    if isinstance(value, str) and re.match(r"^[0-9]+:[0-9]+(:[0-9]+)?$", value):
        raise ValueError(
            f"{cv.DURATION_HINT}; YAML 1.1 reads {value} as base-60 (1:30 is 90 s), so write the unit: "
            "90s, 1m30s or 1h30m"
        )
    # A number YAML did not read as one (0755, 1_000) is a surprise, not seconds: only the
    # unit forms are text here. Plain seconds are the launcher's form of the same grammar.
    if not isinstance(value, str) or value != value.strip() or not re.search(r"[hms]$", value):
        raise ValueError(cv.DURATION_HINT)
    return cv.parse_duration(value)


# Both bounds are the launcher's own (elastic_compile.contract_values): what compiles, runs.
def _timeout(value: Any) -> int:
    return cv.whole_seconds(parse_duration(value))


def _interval(value: Any) -> float:
    return cv.interval_seconds(parse_duration(value))


_DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": r"^(\d+h)?(\d+m)?(\d+(\.\d+)?s)?$"},
    ]
}
TimeoutSeconds = Annotated[int, BeforeValidator(_timeout), WithJsonSchema(_DURATION_SCHEMA)]
IntervalSeconds = Annotated[float, BeforeValidator(_interval), WithJsonSchema(_DURATION_SCHEMA)]


def _quantity(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("expected a Kubernetes quantity such as 8, 500m, 64Gi")
    text = source_text(value)
    if text is None:
        raise ValueError("expected a Kubernetes quantity such as 8, 500m, 64Gi")
    if not is_quantity(text):
        if out_of_range(text):
            raise ValueError(OUT_OF_RANGE)
        raise ValueError("not a Kubernetes quantity; use a number with an optional suffix: 500m, 8, 64Gi, 1e3")
    if parse_quantity(text) < 0:
        raise ValueError("must not be negative")
    return text


Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": QUANTITY_PATTERN}]}),
]


def _strict_int_count(value: Any) -> Any:
    """Give YAML 1.1 look-alikes (``0755``, ``1_000``, ``1:4``) a hint instead of a type error."""
    if isinstance(value, str) and re.match(r"^[-+]?[0-9][0-9_:]*$", value):
        raise ValueError(f"expected a whole number; YAML readers disagree about {value}, write it in plain decimal")
    return value


Count = Annotated[int, BeforeValidator(_strict_int_count)]


def _shared_memory(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off", "y", "n"):
        raise ValueError(
            f"expected true, false or a size such as 64Gi; YAML 1.1 reads {value} as a boolean, so write true or false"
        )
    size = _quantity(value)
    if parse_quantity(size) <= 0:
        raise ValueError("a size must be above 0 (a sizeLimit of 0 means no limit); use false to turn it off")
    return size


class FieldProblems(ValueError):
    """Problems found by a model-level check, each with a location relative to the model.

    Pydantic keeps the raised exception in the error's ``ctx``; the compiler's error
    mapper expands it into one located line per problem.
    """

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems))


class _Model(BaseModel):
    # defer_build: nothing is built at import. Validating a spec builds ElasticSpec's one
    # validator (its sections inside it), and only a command that validates a section alone
    # builds that section's.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=False, defer_build=True)


#: Validation context key: the data is a base's own values (``extends:``), checked one by
#: one. Nothing is required and no check spans several fields: the spec that extends the
#: base, merged with it, is validated whole.
FRAGMENT = "fragment"
#: Keys with this prefix in a section of the spec are ignored: they hold YAML anchors for
#: the rest of the file (``x-gpu: &gpu {...}``), docker-compose's convention.
EXTENSION_PREFIX = "x-"


#: Validation context key: the target names a compile asks for (``-t``), when it names any; the
#: spec's own ``target`` otherwise. A setting that a chosen target refuses outright is left to that
#: target's refusal: asking first for what would complete it (an etcd host under ``-t trainjob``)
#: would send the user to write a value the target then refuses too.
TARGETS = "targets"


def is_fragment(info: ValidationInfo) -> bool:
    """True when validating a base's own values (see :data:`FRAGMENT`)."""
    return bool(info.context and info.context.get(FRAGMENT))


def _allow_extensions(schema: dict[str, Any]) -> None:
    schema["patternProperties"] = {"^" + EXTENSION_PREFIX: {}}


class _Section(_Model):
    """A section of elastic.yaml (ours, not a Kubernetes shape): ``x-`` keys are allowed and ignored."""

    model_config = ConfigDict(json_schema_extra=_allow_extensions)

    @model_validator(mode="before")
    @classmethod
    def _drop_extensions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:  # a loop, not any(): a section has a few keys and usually no extension
                if isinstance(key, str) and key.startswith(EXTENSION_PREFIX):
                    return {
                        k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))
                    }
        return data


# --------------------------------------------------------------------------- nnodes


class NNodes(_Model):
    """The number of nodes (pods): fixed (``min == max``) or an elastic range."""

    min: int = Field(ge=1, description="Fewest nodes the job runs with.")
    max: int = Field(ge=1, description="Most nodes the job runs with.")

    @property
    def elastic(self) -> bool:
        """True for a range such as 1:4."""
        return self.min < self.max

    def __str__(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}:{self.max}"


_NNODES_HELP = "expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4"


def _nnodes(value: Any) -> Any:
    if isinstance(value, NNodes | dict):
        return value
    if isinstance(value, bool):
        raise ValueError(_NNODES_HELP)
    if isinstance(value, int):
        lo = hi = int(value)
    elif isinstance(value, str) and (m := re.match(r"^\s*(\d{1,6})\s*(?::\s*(\d{1,6})\s*)?$", value)):
        if any(part and len(part) > 1 and part.startswith("0") for part in (m[1], m[2])):
            # 0755 would be 493 to YAML 1.1 and 755 to YAML 1.2: never guess.
            raise ValueError(f"{_NNODES_HELP}; a leading zero reads differently in YAML 1.1 and 1.2")
        lo, hi = int(m[1]), int(m[2] or m[1])
    else:
        raise ValueError(_NNODES_HELP)
    if lo < 1 or hi < lo:
        raise ValueError(_NNODES_HELP)
    if hi > 10_000:
        raise ValueError("at most 10000 nodes")
    return {"min": lo, "max": hi}


NNodesField = Annotated[
    NNodes,
    BeforeValidator(_nnodes),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^\d+(:\d+)?$"}]}),
]


def _nproc(value: Any) -> Any:
    if value is None or (isinstance(value, str) and value in ("auto", "gpu", "cpu")):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError("must be at least 1, or auto, gpu or cpu")
        if value > 1024:
            raise ValueError("at most 1024 processes per node")
        return int(value)
    raise ValueError("expected a whole number >= 1, or auto, gpu or cpu")


NProc = Annotated[
    int | Literal["auto", "gpu", "cpu"] | None,
    BeforeValidator(_nproc),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"enum": ["auto", "gpu", "cpu"]}]}),
]

# --------------------------------------------------------------------------- resources


def _resource_name(value: Any) -> str:
    name = _strict_text(value, "a resource name")
    if name == "ephemeral_storage":
        return "ephemeral-storage"
    if name != GPU_KEY and not _RESOURCE_NAME.match(name):
        import difflib  # a misspelling's suggestion only

        close = difflib.get_close_matches(name, ["cpu", "memory", "gpu", "ephemeral-storage"], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"unknown resource{hint}; use cpu, memory, gpu, ephemeral-storage or a domain-qualified "
            "extended resource such as amd.com/gpu"
        )
    return name


ResourceName = Annotated[str, BeforeValidator(_resource_name)]
ResourceList = dict[ResourceName, Quantity]


def is_extended(name: str) -> bool:
    """Extended resources (GPUs, devices): counted in whole units."""
    return name == GPU_KEY or not is_native(name)


def no_overcommit(name: str) -> bool:
    """Devices and hugepages: Kubernetes requires limit == request (a limit alone is fine)."""
    return name == GPU_KEY or not overcommit_allowed(name)


class Resources(_Section):
    """Requests and limits of the training container, per node."""

    requests: ResourceList = Field(
        default_factory=dict,
        description="What the scheduler reserves per node (cpu, memory, gpu, ephemeral-storage, extended "
        "resources). Default: none, the cluster's LimitRange decides. `gpu` means nvidia.com/gpu.",
    )
    limits: ResourceList = Field(
        default_factory=dict,
        description="Hard caps per node. Default: none. Devices (gpu, vendor/device) and hugepages-<size> always "
        "get limit == request, because Kubernetes does not overcommit them (hugepages also need cpu or memory).",
    )

    @model_validator(mode="after")
    def _extended_equal(self, info: ValidationInfo) -> "Resources":
        if is_fragment(info):
            return self
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for side, values in (("requests", self.requests), ("limits", self.limits)):
            if GPU_KEY in values and GPU_RESOURCE in values:
                problems.append(((side, GPU_RESOURCE), f"{GPU_KEY} already means {GPU_RESOURCE}; give one of them"))
            for name, value in values.items():
                amount = parse_quantity(value)
                if is_extended(name) and not whole_units(amount):
                    problems.append(((side, name), podvalues.DEVICE_UNITS))
        for name in sorted(set(self.requests) & set(self.limits)):
            request, limit = parse_quantity(self.requests[name]), parse_quantity(self.limits[name])
            if no_overcommit(name) and request != limit:
                what = "hugepages need" if is_hugepages(name) else "an extended resource needs"
                problems.append((("limits", name), f"{what} limit == request ({self.requests[name]})"))
            elif request > limit:
                problems.append((("limits", name), f"below the request ({self.requests[name]})"))
        spelled = {device: str(self.where(device)[-1]) for device in self.accelerators()}
        for device, why in accelerator_problems(self.accelerators(), spelled):
            problems.append((self.where(device), why))
        names = set(self.requests) | set(self.limits)
        hugepages = sorted(n for n in names if is_hugepages(n))
        if hugepages and not names & {"cpu", "memory"}:
            side = "requests" if hugepages[0] in self.requests else "limits"
            problems.append(((side, hugepages[0]), "hugepages need a cpu or memory request or limit beside them"))
        if problems:
            raise FieldProblems(problems)
        return self

    def where(self, device: str) -> tuple[str | int, ...]:
        """Where the spec names ``device`` (a Kubernetes name; ``gpu`` is nvidia.com/gpu): requests first."""
        for side, values in (("requests", self.requests), ("limits", self.limits)):
            for key in values:
                if (GPU_RESOURCE if key == GPU_KEY else key) == device:
                    return (side, key)
        return ("requests",)

    def process_rule(self) -> tuple[int | None, str]:
        """The default processes per node for the accelerators requested, and the rule that gave it."""
        return process_rule(self.accelerators())

    def accelerators(self) -> dict[str, int]:
        """Accelerator units requested per node, by Kubernetes resource name (``gpu`` is nvidia.com/gpu).

        NVIDIA GPUs and MIG slices, AMD and Intel GPUs, Gaudi, AWS Neuron
        (:data:`elastic_compile.core.resources.ACCELERATORS`): one worker process per unit.
        """

        def k8s(values: dict[str, str]) -> dict[str, str]:
            return {GPU_RESOURCE if k == GPU_KEY else k: v for k, v in values.items()}

        return accelerator_counts(k8s(self.requests), k8s(self.limits))

    def accelerator_units(self) -> int:
        """All accelerator units requested per node (0 when none)."""
        return sum(self.accelerators().values())

    def describe_accelerators(self) -> str:
        """``amd.com/gpu: 8`` (for messages)."""
        return ", ".join(f"{name}: {count}" for name, count in self.accelerators().items())

    def memory_limit(self) -> Decimal | None:
        """The memory limit in bytes, if any."""
        raw = self.limits.get("memory")
        return parse_quantity(raw) if raw is not None else None


# --------------------------------------------------------------------------- accelerator


def _accelerator(value: Any) -> Any:
    if isinstance(value, str):
        return {"device": value}
    if not isinstance(value, dict | Accelerator):
        raise ValueError("expected a device type (nvidia-l4) or {device, partition}")
    return value


def _device(value: str) -> str:
    problem = accelerators.device_problem(value)
    if problem is not None:
        raise ValueError(problem)
    if accelerators.DEVICES[value].tpu:
        raise ValueError(
            f"a Cloud TPU slice (flytekit's {accelerators.DEVICES[value].constant}): elastic-compile compiles torch "
            "elastic jobs for GPUs (a TPU runs torch_xla and asks for google.com/tpu); choose a GPU"
        )
    return value


_GPU_DEVICES = [d.name for d in accelerators.DEVICES.values() if not d.tpu]


class Accelerator(_Section):
    """A device type in Flyte's vocabulary (flytekit.extras.accelerators), and a MIG partition of it."""

    device: Annotated[
        str, _text("accelerator.device"), AfterValidator(_device), WithJsonSchema({"enum": _GPU_DEVICES})
    ] = Field(description="The device type, as flytekit.extras.accelerators names it (nvidia-tesla-a100).")
    partition: Annotated[str | None, _text("accelerator.partition")] = Field(
        None,
        description="A MIG partition of the device, as flytekit names it (A100: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, "
        "7g.40gb; A100 80GB: 1g.10gb ... 7g.80gb). Default: none, a whole device.",
    )

    @model_validator(mode="after")
    def _partition_of_device(self) -> "Accelerator":
        device = accelerators.DEVICES[self.device]
        why = None if self.partition is None else accelerators.partition_problem(device, self.partition)
        if why is not None:
            raise FieldProblems([(("partition",), why)])
        return self

    def mig_resource(self) -> str | None:
        """The MIG resource a slice of this partition is (``nvidia.com/mig-1g.5gb``), or None for a whole device."""
        return None if self.partition is None else f"{MIG_PREFIX}{self.partition}"


def _accelerator_schema(schema: dict[str, Any]) -> None:
    # The short form, a device name, beside the mapping (pydantic sees only the model).
    schema["anyOf"] = [{"enum": _GPU_DEVICES}, *schema.get("anyOf", [])]


def _label_key(value: str) -> str:
    if meta_name_problems({value: ""}, "label", check_value=False):
        raise ValueError("not a node label key: [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.'")
    return value


LabelKey = Annotated[str, _text("a node label key"), AfterValidator(_label_key)]

# Kubernetes' Toleration, for editors (the compiler checks it against Kubernetes' own schema).
_TOLERATIONS_SCHEMA: Final = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "operator": {"enum": ["Equal", "Exists"]},
            "value": {"type": "string"},
            "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "tolerationSeconds": {"type": "integer"},
        },
        "additionalProperties": False,
    },
}


def _tolerations(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Kubernetes' Toleration, as pod_template.spec.tolerations is checked (shape, then values).
    found = [*podspec_problems({"tolerations": value}, fragment=True), *pod_value_problems({"tolerations": value})]
    problems = [(tuple(loc[1:]), why) for loc, why in found]
    if problems:
        raise FieldProblems(list(dict.fromkeys(problems)))
    return value


# --------------------------------------------------------------------------- rendezvous


class Rendezvous(_Section):
    """torch elastic rendezvous. Timeouts use the keys torch's c10d handler reads (torch.distributed.elastic)."""

    backend: Literal["c10d", "etcd", "etcd-v2"] = Field(
        "c10d",
        description="Rendezvous backend. Default c10d: the store is hosted by one of the agents, no etcd "
        "server to run; it is what the operator and Flyte use.",
    )
    host: Annotated[str | None, _text("rdzv.host"), AfterValidator(_optional(cv.check_host))] = Field(
        None,
        description="Rendezvous host (elasticPolicy.rdzvHost). Default: unset, so the operator uses "
        "<name>-worker-0, the pod that hosts the c10d store. Required for etcd backends: your etcd server (not under "
        "-t trainjob, which refuses etcd: Trainer fixes the rendezvous at node 0).",
    )
    port: (
        Annotated[
            int,
            AfterValidator(cv.check_port),
            WithJsonSchema({"type": "integer", "minimum": cv.MIN_PORT, "maximum": cv.MAX_PORT}),
        ]
        | None
    ) = Field(
        None,
        description="Rendezvous port. Default: 23456 for c10d (the operator's pytorchjob-port, published by "
        "the job's headless services), 2379 for etcd.",
    )
    id: Annotated[str | None, _text("rdzv.id"), AfterValidator(_optional(cv.check_run_id))] = Field(
        None,
        description="Run id shared by all pods (elasticPolicy.rdzvId). Default: unset, elastic-launch derives "
        "<namespace>.<job name> from the pod, so it differs between jobs and never is torch's shared 'none'.",
    )
    join_timeout: TimeoutSeconds = Field(
        900,
        description="Seconds for all nodes to join a round. Default 900, not torch's 600: a cold node pulls a "
        "multi-GB image before its agent starts (flytekit's Elastic uses 900 for the same reason).",
    )
    last_call_timeout: TimeoutSeconds = Field(
        30,
        description="Extra seconds an elastic range waits for more nodes once MIN have joined. Default 30 "
        "(torch's): long enough for nodes started together, short enough not to stall a shrunk job.",
    )
    close_timeout: TimeoutSeconds = Field(30, description="Seconds to close a rendezvous. Default 30 (torch's).")
    heartbeat_timeout: TimeoutSeconds = Field(
        5, description="Seconds for one keep-alive operation. Default 5 (torch's)."
    )
    read_timeout: TimeoutSeconds = Field(
        contract.COMPILED_READ_TIMEOUT,
        description="TCPStore client timeout, connecting included. Default 900, not torch's 60: worker-0 "
        "hosts the store and its DNS name resolves only once it is Ready, so other pods must outwait its image "
        "pull (flytekit#3419).",
    )
    conf: dict[Annotated[str, _text("a rdzv.conf key")], Annotated[str, _text("a rdzv.conf value")]] = Field(
        default_factory=dict,
        description="Other rendezvous settings for torch (elasticPolicy.rdzvConf): only keys the backend reads, "
        "e.g. keep_alive_interval for c10d or protocol for etcd, checked as elastic-launch checks them. "
        "Every pod gets the same keys, so is_host is refused on several nodes (elastic-launch makes the pod "
        "the endpoint names the host), except false for a store outside the job (rdzv.host). Default: none.",
    )

    @field_validator("conf")
    @classmethod
    def _conf_keys(cls, conf: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # The launcher's own check (elastic_compile.contract_values), for the backend chosen
        # above; a bad backend is reported on its own, so its keys are not judged here.
        backend = info.data.get("backend")
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for key, value in conf.items():
            if key in cv.TIMEOUT_KEYS:
                problems.append(((key, "[key]"), f"set rdzv.{key} instead"))
                continue
            try:
                cv.check_conf_key(key, backend or "c10d", timeouts=False)
            except ValueError as e:
                if backend is not None or key in cv.IGNORED_KEYS:
                    problems.append(((key, "[key]"), str(e)))
                continue
            try:
                if backend is not None:
                    cv.check_conf_entry(key, value, backend)
            except ValueError as e:
                problems.append(((key,), str(e)))
        if problems:
            raise FieldProblems(problems)
        return conf

    def resolved_port(self) -> int:
        """The port in use: the explicit one or the backend's default."""
        if self.port is not None:
            return self.port
        return contract.OPERATOR_DEFAULT_PORT if self.backend == "c10d" else 2379


# --------------------------------------------------------------------------- env


class _KeyRef(_Model):
    """A key of a Secret or ConfigMap: both names checked as the API server checks them."""

    #: What the name names, for the message.
    what: ClassVar[str]

    name: Annotated[str, _text("name")]
    key: Annotated[str, _text("key")]
    optional: bool | None = None

    @field_validator("name")
    @classmethod
    def _object_name(cls, value: str) -> str:
        # The API server refuses the pod otherwise (seen by tests/realcluster/test_server_fuzz.py).
        why = podvalues.name_problem(value)
        if why is not None:
            raise ValueError(f"not a {cls.what} name: {why}")
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        why = podvalues.config_key_problem(value)
        if why is not None:
            raise ValueError(why)
        return value


class SecretKeyRef(_KeyRef):
    """A key of a Secret."""

    what = "Secret"


class ConfigMapKeyRef(_KeyRef):
    """A key of a ConfigMap."""

    what = "ConfigMap"


def _downward_allowed(ref: BaseModel, kind: str) -> None:
    """What the API server lets an env var read through the downward API (podvalues' allow-lists)."""
    problems = podvalues.ref_problems(ref.model_dump(exclude_none=True), kind, volume=False)
    if problems:
        raise FieldProblems(problems)


class FieldRef(_Model):
    """A field of the pod (downward API)."""

    fieldPath: Annotated[str, _text("fieldPath")]
    apiVersion: Annotated[str | None, _text("apiVersion")] = None

    @field_validator("apiVersion")
    @classmethod
    def _v1(cls, value: str | None) -> str | None:
        # The API server converts the field path from this version; core/v1 is the only one.
        if value is not None and value != "v1":
            raise ValueError('the downward API reads fields of "v1" only; leave apiVersion out')
        return value

    @model_validator(mode="after")
    def _allowed(self) -> "FieldRef":
        _downward_allowed(self, "fieldRef")
        return self


class ResourceFieldRef(_Model):
    """A resource request or limit of a container (downward API)."""

    resource: Annotated[str, _text("resource")]
    containerName: Annotated[str | None, _text("containerName")] = None
    divisor: Quantity | None = None

    @model_validator(mode="after")
    def _allowed(self) -> "ResourceFieldRef":
        _downward_allowed(self, "resourceFieldRef")
        return self


class ValueFrom(_Model):
    """Where an env value comes from: exactly one source."""

    secretKeyRef: SecretKeyRef | None = None
    configMapKeyRef: ConfigMapKeyRef | None = None
    fieldRef: FieldRef | None = None
    resourceFieldRef: ResourceFieldRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "ValueFrom":
        if len(self.model_fields_set) != 1:
            raise ValueError("give exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
        return self


#: torchrun's options that it also reads from PET_<OPTION> (torch 2.13 run.py, ``action=env``; all
#: but --logs-specs and --numa-binding, and --use-env is torch.distributed.launch's).
TORCHRUN_ENV_OPTIONS: Final = frozenset(TORCHRUN_OPTIONS) - {"logs_specs", "numa_binding", "use_env"}

#: The PET_* variables elastic-launch reads (elastic_compile/entrypoint/settings.py); torchrun
#: reads PET_<OPTION> for each of its options (torch/distributed/argparse_util.py env action).
ELASTIC_LAUNCH_READS: Final = frozenset(
    {contract.PET_NNODES, contract.PET_NPROC_PER_NODE, contract.PET_RDZV_BACKEND, contract.PET_RDZV_ENDPOINT,
     contract.PET_RDZV_ID, contract.PET_RDZV_CONF, contract.PET_MAX_RESTARTS, contract.PET_NODE_RANK,
     contract.PET_MASTER_ADDR, contract.PET_MASTER_PORT}
)  # fmt: skip

#: Where the spec sets what a PET_* variable would (the compiler passes it to the launcher).
_SPEC_FIELD: Final = {
    contract.PET_NNODES: "nnodes",
    contract.PET_NPROC_PER_NODE: "nproc_per_node",
    contract.PET_RDZV_BACKEND: "rdzv.backend",
    contract.PET_RDZV_ENDPOINT: "rdzv.host and rdzv.port",
    contract.PET_RDZV_ID: "rdzv.id",
    contract.PET_RDZV_CONF: "rdzv.conf (and the rdzv timeouts)",
    contract.PET_MAX_RESTARTS: "max_restarts",
    "PET_MONITOR_INTERVAL": "monitor_interval",
    "PET_START_METHOD": "start_method",
    "PET_SHUTDOWN_TIMEOUT": "shutdown_timeout",
    "PET_STANDALONE": "nnodes: 1 (a single node meets on its own pod)",
}
#: What each pod gets from its engine and no spec sets.
_PER_POD: Final = frozenset({contract.PET_NODE_RANK, contract.PET_MASTER_ADDR, contract.PET_MASTER_PORT})


def launcher_env_problem(name: str) -> str | None:
    """Why a ``PET_*`` name does not belong in the training container's env (true for every generation).

    ``PET_<OPTION>`` is how torchrun takes each option from the environment, and elastic-launch
    reads the rendezvous ones too; the compiled launcher gets its options from the spec, and
    the engines inject some of them (the tables above).
    """
    option = name[len(contract.OPERATOR_ENV_PREFIX) :].lower()
    flag = "--" + option.replace("_", "-")
    if option not in TORCHRUN_ENV_OPTIONS and not engine_env.injected_by(name):
        return None  # no launcher reads it and no engine sets it: the user's own
    reads = f"torchrun reads it as {flag}" + (
        ", and so does elastic-launch" if name in ELASTIC_LAUNCH_READS else " (elastic-launch does not)"
    )
    if name in _PER_POD:
        where = "the engine gives each pod its own, which a value here would replace or contradict"
    elif name in _SPEC_FIELD:
        where = f"set {_SPEC_FIELD[name]} instead: the compiler passes it to the launcher"
    else:
        where = "the compiled launcher takes its options from the spec, which has no such setting: leave it out"
    return f"{reads}{engine_env.setters(name)}: {where}"


def is_operator_env(name: str) -> bool:
    """True for ``PET_*``: the launcher's options, which the engines inject and the compiler passes."""
    return name.startswith(contract.OPERATOR_ENV_PREFIX)


def env_name_problem(name: str) -> str | None:
    """Why ``name`` may not be used as an env name of the training container, whatever the engine, or None.

    What only one generation's engine sets (``PYTHONUNBUFFERED``, the v1 operator's) is that
    target's check (:func:`elastic_compile.core.engine_env.generation_env_problem`).
    """
    if not _ENV_NAME.match(name):
        return "not a valid environment variable name"
    if is_operator_env(name) and (why := launcher_env_problem(name)) is not None:
        return why
    if name in contract.WORKER_ENV_NAMES:
        # Not the operator: it sets these only beside a Master replica, which we never emit.
        return (
            "torch elastic sets it for every worker process and replaces this value, so it never reaches "
            "your code (set topology through nnodes, nproc_per_node and rdzv instead)"
        )
    if name.startswith(contract.LAUNCHER_ENV_PREFIX):
        return "reserved for elastic-launch (the compiler sets these from the downward API)"
    return None


def _env_name(value: Any) -> str:
    name = _strict_text(value, "an env name")
    problem = env_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


EnvName = Annotated[str, BeforeValidator(_env_name)]


class EnvVar(_Model):
    """A Kubernetes EnvVar: a literal value or a valueFrom reference."""

    name: EnvName
    value: Annotated[str | None, _text("an env value")] = None
    valueFrom: ValueFrom | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "EnvVar":
        if (self.value is None) == (self.valueFrom is None):
            raise ValueError("give exactly one of value or valueFrom")
        return self


def _env_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else "map"


def _env_map_value(value: Any) -> str:
    """A value of the map form of ``env``: a string; an EnvVar's fields there mean the list form."""
    if isinstance(value, dict) and ("valueFrom" in value or "value" in value):
        raise ValueError(
            "the map form of env takes a string per name; for valueFrom write env as a list, whose entries "
            "may mix both: env: [{name: NAME, valueFrom: {secretKeyRef: {name: ..., key: ...}}}, "
            '{name: OTHER, value: "..."}]'
        )
    return _strict_text(value, "an env value")


EnvMap = dict[EnvName, Annotated[str, BeforeValidator(_env_map_value)]]


def _unique_env(value: Any) -> Any:
    if isinstance(value, list):
        seen: set[str] = set()
        for index, item in enumerate(value):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name in seen:
                raise FieldProblems([((index, "name"), "set twice in env")])
            if isinstance(name, str):
                seen.add(name)
    return value


Env = Annotated[
    Annotated[EnvMap, Tag("map")] | Annotated[list[EnvVar], Tag("list")],
    Discriminator(_env_kind),
    BeforeValidator(_unique_env),
]

# --------------------------------------------------------------------------- run policy


class Scheduling(_Section):
    """Gang scheduling (runPolicy.schedulingPolicy); used only when the operator runs a gang scheduler."""

    queue: Annotated[str | None, _text("queue")] = Field(
        None,
        description="The gang scheduler's queue of a PyTorchJob (runPolicy.schedulingPolicy.queue: the PodGroup's, "
        "e.g. Volcano's). Kueue does not read it: use kueue.queue. A TrainJob has no schedulingPolicy, so it is an "
        "error under -t trainjob (which wrote Kueue's label from it before). Default: none.",
    )
    priority_class: Annotated[str | None, _text("priority_class")] = Field(
        None, description="PriorityClass of the PodGroup. Default: none."
    )
    min_available: int | None = Field(
        None,
        ge=1,
        le=INT32_MAX,
        description="Pods that must be schedulable together. Default: nnodes MIN for an elastic range (the "
        "operator's own default, every replica, would keep a shrunk job pending until MAX pods fit); the "
        "operator's, all replicas, for a fixed size.",
    )
    schedule_timeout_seconds: int | None = Field(
        None, ge=1, le=INT32_MAX, description="How long the gang may wait to be scheduled. Default: the scheduler's."
    )


class RunPolicy(_Section):
    """Job-level policy (PyTorchJob runPolicy)."""

    clean_pod_policy: Literal["All", "Running", "None"] = Field(
        "Running",
        description="Which pods to delete when the job finishes. Default Running: a finished elastic job "
        "(success = any worker succeeded) frees the GPUs of pods still in the exit barrier, while completed "
        "and failed pods stay for their logs. The operator's own default, None, keeps everything.",
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=INT32_MAX, description="Delete the job this long after it finishes. Default: keep it."
    )
    active_deadline_seconds: int | None = Field(
        None, ge=1, le=INT32_MAX, description="Fail the job after this long. Default: no deadline."
    )
    backoff_limit: int | None = Field(
        None,
        ge=0,
        le=INT32_MAX,
        description="In-place container restarts (restart_policy OnFailure or Always) allowed before the job fails. "
        "With ExitCode a failed pod is recreated instead, with a restart count of 0, so this never counts it "
        "(kubeflow/trainer#2045): bound such a job with active_deadline_seconds. Default: no limit on a PyTorchJob; "
        "a TrainJob's node Job then gets Kubernetes' default, 6, which counts failed pods too.",
    )
    scheduling: Scheduling | None = Field(
        None, description="Gang scheduling. Default: none, except min_available for an elastic range."
    )
    suspend: bool = Field(False, description="Create the job suspended (no pods). Default false.")
    managed_by: Literal["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"] | None = Field(
        None,
        description="Which controller runs the job (runPolicy.managedBy, training-operator 1.9+): "
        "kueue.x-k8s.io/multikueue lets MultiKueue dispatch it to a worker cluster (the local operator then "
        "leaves it alone; it needs kueue.queue). Default: unset, the training operator.",
    )


def _kueue_name(value: Any) -> str:
    name = _strict_text(value, "a Kueue name")
    # An object name that also goes in a label value: both rules at once.
    if len(name) > names.KUEUE_NAME_MAX or not names.KUEUE_NAME.match(name):
        raise ValueError("a lower-case name of at most 63 letters, digits, '-' and '.' (it becomes a label value)")
    return name


class Kueue(_Model):
    """Kueue admission: Kueue reads labels on the job, not runPolicy.schedulingPolicy."""

    queue: Annotated[str, BeforeValidator(_kueue_name)] = Field(
        description="The LocalQueue in the job's namespace (label kueue.x-k8s.io/queue-name). Kueue keeps the "
        "job suspended until the queue admits it."
    )
    priority_class: Annotated[str | None, BeforeValidator(_kueue_name)] = Field(
        None, description="A WorkloadPriorityClass (label kueue.x-k8s.io/priority-class). Default: none."
    )

    def labels(self) -> dict[str, str]:
        """The labels Kueue reads on the job."""
        out = {KUEUE_QUEUE_LABEL: self.queue}
        if self.priority_class is not None:
            out[KUEUE_PRIORITY_LABEL] = self.priority_class
        return out


# --------------------------------------------------------------------------- workload


class Function(_Section):
    """A Python function each worker calls (like Flyte's elastic tasks)."""

    target: Annotated[str, _text("function.target")] = Field(
        description='"package.module:callable", importable in the image.'
    )
    args: list[Annotated[str, _text("an argument")]] = Field(
        default_factory=_no_items, description="String arguments passed positionally. Default: none."
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if not _FUNCTION.match(value):
            raise ValueError('expected "package.module:callable", e.g. trainer.main:train')
        return value


def _function(value: Any) -> Any:
    return {"target": value} if isinstance(value, str) else value


def _function_schema(schema: dict[str, Any]) -> None:
    # The short form, "pkg.module:fn", beside the mapping (pydantic sees only the model).
    schema["anyOf"] = [{"type": "string", "pattern": _FUNCTION.pattern}, *schema.get("anyOf", [])]


def meta_name_problems(
    mapping: dict[str, str], what: str, check_value: bool
) -> list[tuple[tuple[str | int, ...], str]]:
    """Kubernetes' rules for label and annotation keys (and label values), located per key.

    An annotation key is checked lower-cased, as apimachinery's ValidateAnnotations does
    (``EXAMPLE.COM/Key`` is a valid annotation key and no valid label key: seen on kube-apiserver
    1.37 by tests/realcluster/test_refusals_vs_server.py).
    """
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for key, value in mapping.items():
        prefix, _, name = (key.lower() if what == "annotation" else key).rpartition("/")
        if (
            (prefix and not names.is_dns1123_subdomain(prefix))
            or not names.QUALIFIED_NAME.match(name)
            or len(name) > names.QUALIFIED_NAME_MAX
        ):
            problems.append(
                (
                    (key, "[key]"),
                    f"not a valid {what} name: [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.'",
                )
            )
        if check_value and (len(value) > names.LABEL_VALUE_MAX or not names.LABEL_VALUE.match(value)):
            problems.append(
                (
                    (key,),
                    "label values are at most 63 letters, digits, '-', '_' or '.', starting and ending with "
                    "a letter or digit",
                )
            )
    return problems


def _meta_names(what: str, check_value: bool) -> AfterValidator:
    def check(mapping: dict[str, str]) -> dict[str, str]:
        problems = meta_name_problems(mapping, what, check_value)
        if problems:
            raise FieldProblems(problems)
        return mapping

    return AfterValidator(check)


#: Kubernetes labels and annotations (of the job, or of its pods), checked by Kubernetes' rules.
Labels = Annotated[
    dict[Annotated[str, _text("a label name")], Annotated[str, _text("a label value")]],
    _meta_names("label", check_value=True),
]
Annotations = Annotated[
    dict[Annotated[str, _text("an annotation name")], Annotated[str, _text("an annotation")]],
    _meta_names("annotation", check_value=False),
]


class PodMetadata(_Section):
    """Labels and annotations for the pods."""

    labels: Labels = Field(
        default_factory=dict, description="Labels on every worker pod. Default: none (the operator adds its own)."
    )
    annotations: Annotations = Field(
        default_factory=dict,
        description='Annotations on every worker pod. Default: none, plus sidecar.istio.io/inject: "false" unless '
        "istio_sidecar is true.",
    )


class PodTemplate(_Section):
    """A fragment of a Kubernetes PodTemplateSpec merged with what the compiler generates."""

    metadata: PodMetadata = Field(default_factory=PodMetadata, description="Pod labels and annotations.")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="A PodSpec fragment (camelCase, as in Kubernetes): nodeSelector, tolerations, affinity, "
        "serviceAccountName, securityContext, volumes, containers. A container named pytorch is merged into the "
        "training container; other containers become native sidecars (initContainers with restartPolicy: "
        "Always), or the pod could never finish.",
    )

    @field_validator("spec")
    @classmethod
    def _spec_shape(cls, spec: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        fragment = is_fragment(info)
        problems = podspec_problems(spec, fragment=fragment)
        for field in ("containers", "initContainers"):
            items = spec.get(field)
            for index, item in enumerate(items if isinstance(items, list) else []):
                if not isinstance(item, dict):
                    continue
                # Names are checked with the other pod values (podvalues.py): DNS-1123 labels, ASCII only.
                if field == "containers" and item.get("name") == contract.TRAINING_CONTAINER:
                    owned = _training_container_problems(item, index)
                    # A field the compiler sets is refused as a whole: one line, not also its value's problems.
                    refused = [loc for loc, _ in owned if len(loc) == 3 and loc[2] in _OWNED]
                    problems = [p for p in problems if not any(p[0][:3] == loc for loc in refused)] + owned
                    continue
                if item.get("name") == contract.TRAINING_CONTAINER:
                    problems.append(((field, index, "name"), "pytorch is the training container's name; rename it"))
                if not (fragment and "image" not in item) and not _is_image(item.get("image")):
                    what = "a sidecar" if field == "containers" else "an init container"
                    at: tuple[str | int, ...] = (field, index, "image") if "image" in item else (field, index)
                    problems.append(
                        (at, f"{what} needs an image reference: [registry[:port]/]path[:tag][@digest], ASCII")
                    )
        volumes = spec.get("volumes")
        for index, item in enumerate(volumes if isinstance(volumes, list) else []):
            if isinstance(item, dict) and item.get("name") == SHM_VOLUME_NAME:
                problems.append(
                    (
                        ("volumes", index, "name"),
                        f"{SHM_VOLUME_NAME} is the compiler's /dev/shm volume; "
                        "rename yours, or set shared_memory: false",
                    )
                )
            elif isinstance(item, dict) and item.get("name") == SCRATCH_VOLUME_NAME:
                problems.append(
                    (("volumes", index, "name"), f"{SCRATCH_VOLUME_NAME} is the compiler's /tmp volume; rename yours")
                )
        if "restartPolicy" in spec:
            problems.append((("restartPolicy",), "set restart_policy at the top level; the operator owns the pod's"))
        if problems:
            # A rule both the pod values and the training container check (an env name) is said once.
            unique = list(dict.fromkeys((tuple(path), message) for path, message in problems))
            raise FieldProblems(sorted(unique, key=lambda p: tuple(map(str, p[0]))))
        return spec


def _is_image(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 4096 and bool(_IMAGE.match(value))


# The compiler's /dev/shm volume name (podspec.SHM_VOLUME); kept here so the schema can
# reject a user volume that would collide with it.
SHM_VOLUME_NAME = "dshm"
# The emptyDir the compiler mounts at /tmp under a read-only root (targets/pod.py needs_scratch).
SCRATCH_VOLUME_NAME = "elastic-tmp"
SHM_PATH = "/dev/shm"


#: ``launcher: bundled``: the compiler's volume holding the launcher file (a ConfigMap it emits
#: beside the job) and where the training container mounts it, read-only. Kept here so the
#: schema can reject a user volume or mount that would collide with them.
BUNDLE_VOLUME_NAME = "elastic-launch"
BUNDLE_MOUNT = contract.BUNDLE_MOUNT

#: The values of ``launcher`` (docs/launchers.md).
LauncherName = Literal["elastic-launch", "bundled", "torchrun"]


def mount_path(mount: dict[str, Any]) -> str:
    """A volumeMount's ``mountPath`` as the container sees it: ``/dev//shm/`` and ``/opt/./x`` normalised.

    The kubelet hands the path to the runtime, which resolves it like any Linux path, so
    spellings that differ here name the same directory there. ``posixpath.normpath`` keeps
    a leading ``//`` (POSIX leaves its meaning open); Linux reads it as ``/``. A relative
    path (the API server takes one) is made absolute by the kubelet first: ``dev/shm`` is
    ``/dev/shm`` (``makeMounts`` in pkg/kubelet/kubelet_pods.go, ``MakeAbsolutePath``).
    """
    given = str(mount.get("mountPath", ""))
    path = posixpath.normpath(given if given.startswith("/") or not given else "/" + given)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def mounted_within(mount: dict[str, Any], directory: str) -> bool:
    """True when a volumeMount is at ``directory`` or anywhere below it (a file by subPath, say)."""
    path = mount_path(mount)
    return path == directory or path.startswith(directory + "/")


def mounts_shm(mount: dict[str, Any]) -> bool:
    """True when a volumeMount is at /dev/shm (the compiler then adds no shared memory of its own)."""
    return mount_path(mount) == SHM_PATH


_OWNED = {
    "image": "set image at the top level",
    "command": "set command (or function) at the top level; the compiler runs it through elastic-launch",
    "args": "set command (or function) at the top level; the compiler runs it through elastic-launch",
    "resources": "set resources at the top level",
}


def _training_container_problems(container: dict[str, Any], index: int) -> list[tuple[tuple[str | int, ...], str]]:
    """What the user may not set on the training container (types are the PodSpec check's job)."""
    problems: list[tuple[tuple[str | int, ...], str]] = [
        (("containers", index, field), why) for field, why in _OWNED.items() if field in container
    ]
    env = container.get("env")
    for j, var in enumerate(env if isinstance(env, list) else []):
        name = var.get("name") if isinstance(var, dict) else None
        if isinstance(name, str) and (why := env_name_problem(name)) is not None:
            problems.append((("containers", index, "env", j, "name"), why))
    return problems


# --------------------------------------------------------------------------- the spec


class FlyteTarget(_Section):
    """Where the Flyte task is registered (used by ``-t flyte``)."""

    project: Annotated[str, _text("flyte.project")] = Field(description="Flyte project.")
    domain: Annotated[str, _text("flyte.domain")] = Field(description="Flyte domain, e.g. development.")
    name: Annotated[str | None, _text("flyte.name")] = Field(None, description="Task name. Default: the spec name.")
    version: Annotated[str, _text("flyte.version")] = Field(description="Task version.")


#: The ``-t`` names a spec may give as its default target. A closed set, so editors offer it
#: and a typo fails here; tests/test_trainjob_target.py keeps it equal to the built-in targets.
TargetName = Literal["pytorchjob", "trainjob", "podtemplate", "flyte", "flyte2"]

#: The stock runtime of Kubeflow Trainer v2 (Trainer v2.3.0 manifests/base/runtimes/torch_distributed.yaml).
STOCK_RUNTIME = "torch-distributed"


class ObjectMetadata(_Section):
    """Labels and annotations of an object the engine creates."""

    labels: Labels = Field(default_factory=dict, description="Labels. Default: none.")
    annotations: Annotations = Field(default_factory=dict, description="Annotations. Default: none.")


def _initializer(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """spec.initializer checked against the v2.3.0 TrainJob CRD (its compact schema)."""
    if value is None:
        return None
    from elastic_compile.schema import compact

    schema = compact.load("trainjobs.trainer.kubeflow.org.json")
    root = schema.root("trainer.kubeflow.org/v1alpha1", "TrainJob") or {}
    node = root["properties"]["spec"]["properties"]["initializer"]
    problems = schema.problems(value, node)
    if problems:
        raise FieldProblems([(tuple(loc), message) for loc, message in problems])
    return value


class TrainJobSettings(_Section):
    """Kubeflow Trainer v2 settings (used by ``-t trainjob``)."""

    runtime: Annotated[str, _text("trainjob.runtime")] = Field(
        STOCK_RUNTIME,
        description="The runtime the TrainJob references (runtimeRef.name). Default torch-distributed, the "
        "stock ClusterTrainingRuntime of Trainer v2.3; it must exist on the cluster before the TrainJob.",
    )
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = Field(
        "ClusterTrainingRuntime",
        description="runtimeRef.kind: ClusterTrainingRuntime (cluster-wide, the default) or TrainingRuntime "
        "(in the TrainJob's namespace).",
    )
    own_runtime: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Emit a namespaced TrainingRuntime of ours, named like the job, and reference it. Default "
        "auto: only when the spec needs what runtimePatches cannot carry (sidecars, init containers, ports, "
        "probes, restart_policy Never, backoff_limit, an elastic nnodes range, other pod fields). always: also "
        "for a cluster without the stock runtime. never: such settings are errors.",
    )

    jobset_metadata: ObjectMetadata = Field(
        default_factory=ObjectMetadata,
        description="Labels and annotations of the JobSet Trainer creates (our runtime patch's "
        "trainingRuntimeSpec.template.metadata): Trainer copies them onto the JobSet, and plugins read them "
        "there (Volcano's scheduling.volcano.sh/queue-name). Default: none.",
    )
    job_metadata: ObjectMetadata = Field(
        default_factory=ObjectMetadata,
        description="Labels and annotations of the node Job (the patch's replicatedJobs[node].template.metadata). "
        "Default: none.",
    )
    initializer: Annotated[dict[str, Any] | None, AfterValidator(_initializer)] = Field(
        None,
        description="The TrainJob's spec.initializer (dataset and model initializers, as Trainer v2.3 takes it). "
        "It needs a runtime with those jobs, named in trainjob.runtime: the stock torch-distributed and ours have "
        "none. Default: none.",
        json_schema_extra={"type": "object"},
    )

    @field_validator("runtime")
    @classmethod
    def _runtime_name(cls, value: str) -> str:
        if not names.is_dns1123_subdomain(value):
            raise ValueError("not a runtime name: a DNS-1123 subdomain of at most 253 characters")
        return value


class ElasticSpec(_Section):
    """elastic.yaml: one distributed PyTorch training job."""

    # Fields the model validator fills from other fields, and why (for --explain).
    _derived: dict[str, str] = PrivateAttr(default_factory=dict)

    schema_: Annotated[str | None, _text("$schema")] = Field(
        None, alias="$schema", description="JSON Schema URL for editors; ignored by the compiler."
    )
    extends: Annotated[str | None, _text("extends")] = Field(
        None,
        description="A base spec whose values this file extends: a path relative to this file, inside the "
        "repository. Mappings merge, this file's values win, null removes an inherited value, env and the pod "
        "template's lists merge by key (docs/many-jobs.md). Default: none.",
    )
    target: TargetName = Field(
        "pytorchjob",
        description="What a plain `elastic-compile SPEC` emits (-t overrides it). Default pytorchjob, the "
        "training-operator v1 PyTorchJob; trainjob for a Kubeflow Trainer v2 cluster.",
    )
    name: Annotated[str, _text("name")] = Field(
        description="Job name: a DNS-1035 label short enough that <name>-worker-<last index> fits 63 characters."
    )
    namespace: Annotated[str | None, _text("namespace")] = Field(
        None, description="Namespace. Default: unset, so kubectl's context (or kustomize) decides."
    )
    labels: Labels = Field(
        default_factory=dict, description="Labels on the job (not the pods; see pod_template.metadata)."
    )
    annotations: Annotations = Field(default_factory=dict, description="Annotations on the job.")
    image: Annotated[str, _text("image")] = Field(description="Container image of the training container.")
    command: list[Annotated[str, _text("an argument")]] | None = Field(
        None,
        description="What each worker runs, as argv (like torchrun's script and args), e.g. "
        "[python, train.py, --lr, 1e-4]. Give exactly one of command and function.",
    )
    function: Annotated[Function | None, BeforeValidator(_function)] = Field(
        None,
        description='A Python function each worker calls: "pkg.module:fn" or {target, args}.',
        json_schema_extra=_function_schema,
    )
    launcher: LauncherName = Field(
        "elastic-launch",
        description="What runs torch elastic in the training container (docs/launchers.md): elastic-launch, "
        "installed in the image; bundled, the same launcher as one file in a ConfigMap emitted beside the job and "
        "run by the image's python3 (no image change); or torchrun, the image's, given the same settings but "
        "without elastic-launch's exit codes and reports. Default elastic-launch: exit codes that the ExitCode "
        "policy understands, the root cause in the termination log.",
    )
    nnodes: NNodesField = Field(
        default_factory=lambda: NNodes(min=1, max=1),
        description="Nodes (pods): N, or MIN:MAX for an elastic job (under -t trainjob: MAX pods, training "
        "with MIN or more). Default 1.",
    )
    nproc_per_node: NProc = Field(
        None,
        description="Worker processes per node: a number, or auto, gpu, cpu (resolved in the container). "
        "Default: one per device requested per node (nvidia.com/gpu, amd.com/gpu, Intel GPUs, habana.ai/gaudi), one "
        "per aws.amazon.com/neuroncore, 1 on a MIG slice (one slice per pod), else 1, so that each process gets one "
        "device; AWS Neuron devices (aws.amazon.com/neuron) need it given.",
    )
    resources: Resources = Field(default_factory=Resources, description="Requests and limits per node.")
    accelerator: Annotated[Accelerator | None, BeforeValidator(_accelerator)] = Field(
        None,
        description="Which GPU: a device type in Flyte's vocabulary (flytekit.extras.accelerators: nvidia-tesla-t4, "
        "nvidia-l4, nvidia-tesla-a100, nvidia-a100-80gb, nvidia-h100, ...), or {device, partition} for a MIG "
        "partition. Flyte gets it as the task's gpuAccelerator; a PyTorchJob, TrainJob or PodTemplate as a "
        "nodeSelector on accelerator_label. It needs an NVIDIA GPU request (gpu). Default: none, any GPU the "
        "scheduler finds.",
        json_schema_extra=_accelerator_schema,
    )
    accelerator_label: LabelKey | None = Field(
        None,
        description="The node label that carries the device type, for the Kubernetes targets; set once, in a "
        "platform base. Presets: cloud.google.com/gke-accelerator (GKE), k8s.amazonaws.com/accelerator (EKS, "
        "Flyte's default: Flyte's device names), nvidia.com/gpu.product (NVIDIA GPU feature discovery: product "
        "names, mapped only where one product is the device); any other key holds Flyte's device names, as "
        "Flyte's gpu-device-node-label does. Default: none: with accelerator, the Kubernetes targets are an error.",
    )
    accelerator_partition_label: LabelKey | None = Field(
        None,
        description="The node label that carries a MIG partition size (1g.5gb), for the Kubernetes targets. "
        "Default: the preset's: cloud.google.com/gke-gpu-partition-size (GKE), k8s.amazonaws.com/gpu-partition-size "
        "(EKS, Flyte's default); GPU feature discovery names a slice in its product label instead.",
    )
    accelerator_tolerations: Annotated[
        list[dict[str, Any]], AfterValidator(_tolerations), WithJsonSchema(_TOLERATIONS_SCHEMA)
    ] = Field(
        default_factory=_no_items,
        description="Tolerations the pods get when the spec names an accelerator, for the Kubernetes targets: the "
        "taints the platform puts on its GPU nodes. Default: none (GKE tolerates its GPU taint for pods that "
        "request GPUs by itself; Flyte's propeller adds its own).",
    )
    shared_memory: Annotated[bool | str, BeforeValidator(_shared_memory)] = Field(
        True,
        description="A memory-backed /dev/shm for the training container. Default true: the container "
        "runtime's 64 MiB /dev/shm makes DataLoader workers and NCCL die with 'Bus error'. A size such as "
        "64Gi sets sizeLimit (it counts against the memory limit); false turns it off.",
        json_schema_extra={"anyOf": [{"type": "boolean"}, {"type": "string", "pattern": QUANTITY_PATTERN}]},
    )
    rdzv: Rendezvous = Field(default_factory=Rendezvous, description="Rendezvous backend and timeouts.")
    max_restarts: int = Field(
        contract.COMPILED_MAX_RESTARTS,
        ge=0,
        le=1000,
        description="Times each node's agent restarts its worker group after a failure. Default 3: losing a "
        "node or a transient NCCL error costs one restart, and torchrun's 0 turns every blip into a failed job.",
    )
    monitor_interval: IntervalSeconds = Field(
        5.0,
        description="Seconds between the agent's health checks of its workers. Default 5 (Flyte's): failures "
        "are noticed within seconds, at a negligible cost.",
    )
    start_method: Literal["spawn", "fork", "forkserver"] = Field(
        "spawn",
        description="How function-mode workers start. Default spawn: fork is unsafe once CUDA or threads "
        "exist in the agent.",
    )
    shutdown_timeout: TimeoutSeconds = Field(
        30,
        description="Seconds workers get between SIGTERM and SIGKILL when the pod stops. Default 30 (torch's); "
        "the pod's terminationGracePeriodSeconds is set 15 s above it.",
    )
    hang_timeout: TimeoutSeconds | None = Field(
        None,
        description="A hang watchdog: seconds a worker may go without renewing its heartbeat file (the path in "
        "$ELASTIC_LAUNCH_HEARTBEAT_FILE; renew it by touching it, e.g. once per step) before elastic-launch stops it "
        "as hung (SIGABRT, so that faulthandler prints its stacks, then SIGKILL); the group restarts like after any "
        "failure, and a hang in the last attempt exits 124 (permanent). Armed by the first renewal, so start-up is "
        "never judged. Default: off, since only code that renews the file can be watched. elastic-launch and "
        "bundled only.",
    )
    env: Env = Field(
        default_factory=dict,
        description="Environment of the training container: a NAME: value map, or a list of Kubernetes EnvVar "
        "entries (with valueFrom for secrets and field refs).",
    )
    restart_policy: Literal["OnFailure", "ExitCode", "Never", "Always"] = Field(
        "ExitCode",
        description="What the operator does when a pod fails. Default ExitCode: elastic-launch exits 1-127 for "
        "errors in your code (the job fails at once) and 128 or more for preemption, lost nodes and "
        "rendezvous timeouts (the pod is recreated).",
    )
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Job-level policy.")
    pod_template: PodTemplate = Field(
        default_factory=PodTemplate,
        description="Kubernetes pod settings merged with what the compiler generates.",
    )
    istio_sidecar: bool = Field(
        False,
        description="Allow Istio's sidecar in the pods. Default false: the sidecar breaks rendezvous "
        '(kubeflow/trainer#1637), so pods get sidecar.istio.io/inject: "false".',
    )
    network_policy: bool = Field(
        False,
        description="Also emit a NetworkPolicy that admits ingress to the job's pods only from pods of the same "
        "job, so that the rendezvous store (which loads pickles) and the NCCL/gloo ports are not open to the whole "
        "pod network. Default false: it needs a CNI that enforces NetworkPolicy, and it cuts ingress that clusters "
        "often rely on (metrics scrapes, service meshes); see docs/security.md.",
    )
    kueue: Kueue | None = Field(None, description="Kueue admission: the job's LocalQueue. Default: none.")
    flyte: FlyteTarget | None = Field(None, description="Flyte registration target for -t flyte.")
    trainjob: TrainJobSettings = Field(
        default_factory=TrainJobSettings, description="Kubeflow Trainer v2 settings for -t trainjob."
    )
    lint: dict[Annotated[str, _text("a lint code")], Literal["ignore"]] = Field(
        default_factory=dict, description="Lint codes to silence, e.g. {EC104: ignore}."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not names.DNS1035_LABEL.match(value):
            raise ValueError(
                "not a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and ending "
                "with a letter or digit"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not names.is_dns1123_label(value):
            raise ValueError("not a valid namespace: a DNS-1123 label of at most 63 characters")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _is_image(value):
            raise ValueError(
                "not an image reference: [registry[:port]/]path[:tag][@digest], ASCII, the path in lower case"
            )
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("expected a list of arguments, e.g. [python, train.py, --lr, 1e-4]")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("needs at least the program to run, e.g. [python, train.py]")
        nested = nested_launcher(value) if value else None
        if nested is not None:
            raise FieldProblems([((nested[0],), nested[1])])
        return value

    def _pod_template_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Checks of pod_template that need other fields (the fragment's own shape is PodTemplate's)."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        pod = self.pod_template.spec
        base: tuple[str | int, ...] = ("pod_template", "spec")
        volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
        if self.shared_memory is not False:
            volumes.add(SHM_VOLUME_NAME)
        if self.launcher == "bundled":
            problems += self._bundle_collisions()
        for field in ("containers", "initContainers"):
            for i, container in enumerate(pod.get(field) or []):
                if not isinstance(container, dict):
                    continue
                training = field == "containers" and container.get("name") == contract.TRAINING_CONTAINER
                mounts = [m for m in container.get("volumeMounts") or [] if isinstance(m, dict)]
                # Our memory-backed /dev/shm goes on the training container unless the user mounts it.
                ours = training and self.shared_memory is not False and not any(mounts_shm(m) for m in mounts)
                for j, mount in enumerate(container.get("volumeMounts") or []):
                    if not isinstance(mount, dict):
                        continue
                    if ours and mounted_within(mount, SHM_PATH):
                        problems.append(
                            (
                                (*base, field, i, "volumeMounts", j, "mountPath"),
                                f"inside {SHM_PATH}, where the compiler mounts its memory-backed volume "
                                "(shared_memory) after yours: a runtime that mounts in list order hides yours under "
                                f"it; mount it outside {SHM_PATH}, or set shared_memory: false and mount {SHM_PATH} "
                                "yourself",
                            )
                        )
                    if mount.get("name") not in volumes:
                        problems.append(
                            (
                                (*base, field, i, "volumeMounts", j, "name"),
                                "no volume of that name in pod_template.spec.volumes",
                            )
                        )
                    if training and mounts_shm(mount) and isinstance(self.shared_memory, str):
                        problems.append(
                            (
                                (*base, field, i, "volumeMounts", j, "mountPath"),
                                f"you mount /dev/shm yourself, so shared_memory: {self.shared_memory} "
                                "would be ignored; remove one of them",
                            )
                        )
        grace = pod.get("terminationGracePeriodSeconds")
        if isinstance(grace, int) and not isinstance(grace, bool) and grace <= self.shutdown_timeout:
            problems.append(
                (
                    (*base, "terminationGracePeriodSeconds"),
                    f"must be above shutdown_timeout ({self.shutdown_timeout} s), or the kubelet kills "
                    "elastic-launch before its workers have stopped",
                )
            )
        scheduling = self.run_policy.scheduling
        if (
            scheduling is not None
            and scheduling.min_available is not None
            and scheduling.min_available > self.nnodes.max
        ):
            problems.append(
                (
                    ("run_policy", "scheduling", "min_available"),
                    f"above the most pods the job has ({self.nnodes.max}); the gang would never start",
                )
            )
        return problems

    def _compiles_trainjob(self, info: ValidationInfo) -> bool:
        """Whether this compile emits a TrainJob (:data:`TARGETS`, else the spec's ``target``), whose
        target then refuses what Trainer v2 fixes (the rendezvous backend, host and ``is_host``)."""
        names = tuple((info.context or {}).get(TARGETS) or (self.target,))
        return "trainjob" in names or (names == ("all",) and self.target == "trainjob")

    def _is_host_problems(self, *, trainjob: bool) -> list[tuple[tuple[str | int, ...], str]]:
        """``rdzv.conf.is_host`` on several nodes: every pod gets the same rdzv.conf.

        The operator copies elasticPolicy.rdzvConf into PET_RDZV_CONF of every pod (Flyte
        bakes it into every pod's --rdzv-conf), so one value cannot name one host.
        elastic-launch makes the pod the endpoint names the host without it. ``false`` is
        kept for a store outside the job (``rdzv.host`` set). When the compile emits a TrainJob
        (``trainjob``) the TrainJob target reports it (it refuses it on any number of nodes).
        """
        value = self.rdzv.conf.get("is_host")
        if value is None or self.nnodes.max == 1 or trainjob:
            return []
        where = ("rdzv", "conf", "is_host")
        if cv.parse_bool(value):
            return [
                (
                    where,
                    "every pod of a multi-node job gets the same rdzv.conf, so every pod would start its own "
                    "store (and the pods sharing a node's network would collide on the port); elastic-launch "
                    "makes the pod the endpoint names the host; remove it",
                )
            ]
        if self.rdzv.host is None:
            return [
                (
                    where,
                    "every pod of a multi-node job gets the same rdzv.conf, so no pod would host the store "
                    "(the endpoint names worker 0) and the rendezvous would time out; false fits only a store "
                    "outside the job (rdzv.host); remove it",
                )
            ]
        return []

    def _bundle_collisions(self) -> list[tuple[tuple[str | int, ...], str]]:
        """A user volume or training-container mount where ``launcher: bundled`` puts its own."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        pod = self.pod_template.spec
        base: tuple[str | int, ...] = ("pod_template", "spec")
        for i, volume in enumerate(pod.get("volumes") or []):
            if isinstance(volume, dict) and volume.get("name") == BUNDLE_VOLUME_NAME:
                problems.append(
                    (
                        (*base, "volumes", i, "name"),
                        f"{BUNDLE_VOLUME_NAME} is the volume of the bundled launcher (launcher: bundled); rename yours",
                    )
                )
        for i, container in enumerate(pod.get("containers") or []):
            if not isinstance(container, dict) or container.get("name") != contract.TRAINING_CONTAINER:
                continue
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if isinstance(mount, dict) and mounted_within(mount, BUNDLE_MOUNT):
                    problems.append(
                        (
                            (*base, "containers", i, "volumeMounts", j, "mountPath"),
                            f"the bundled launcher is mounted at {BUNDLE_MOUNT} (launcher: bundled); "
                            "mount yours outside it",
                        )
                    )
        return problems

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> "ElasticSpec":
        if is_fragment(info):
            return self
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.launcher == "torchrun" and self.function is not None:
            problems.append(
                (
                    ("launcher",),
                    "torchrun runs a command, not a function: give command (e.g. [python, train.py]), or use "
                    "launcher elastic-launch or bundled, which call functions",
                )
            )
        if self.launcher == "torchrun" and self.hang_timeout is not None:
            problems.append(
                (
                    ("hang_timeout",),
                    "torchrun has no hang watchdog: remove hang_timeout, or use launcher elastic-launch or bundled",
                )
            )
        if self.command is None and self.function is None:
            problems.append(
                (
                    ("command",),
                    "give exactly one of command (argv, e.g. [python, train.py]) and "
                    "function (pkg.module:fn); neither is set",
                )
            )
        elif self.command is not None and self.function is not None:
            problems.append((("function",), "command and function are both set; give exactly one"))
        limit = 63 - len("-worker-") - len(str(self.nnodes.max - 1))
        if len(self.name) > limit:
            problems.append(
                (
                    ("name",),
                    f"at most {limit} characters ({len(self.name)} given), so that pod "
                    f"names up to <name>-worker-{self.nnodes.max - 1} fit in 63",
                )
            )
        size = self.shared_memory if isinstance(self.shared_memory, str) else None
        memory = self.resources.memory_limit()
        if size is not None and memory is not None and parse_quantity(size) > memory:
            problems.append(
                (
                    ("shared_memory",),
                    f"above the memory limit ({self.resources.limits['memory']}); "
                    "a memory-backed /dev/shm counts against it",
                )
            )
        problems += self._pod_template_problems()
        trainjob = self._compiles_trainjob(info)
        if self.rdzv.backend != "c10d" and self.rdzv.host is None and not trainjob:
            # Under a TrainJob the target refuses the backend itself (Trainer fixes the rendezvous).
            why = f"the {self.rdzv.backend} backend needs rdzv.host: the address of your etcd server"
            problems.append((("rdzv", "backend"), why))
        if self.nnodes.max == 1 and self.rdzv.backend != "c10d" and not trainjob:
            # One node gets no elasticPolicy: elastic-launch meets itself with c10d on the pod
            # and receives rdzv.conf as --rdzv-conf, so c10d must accept the keys.
            for key in self.rdzv.conf:
                try:
                    cv.check_conf_key(key, "c10d", timeouts=False)
                except ValueError as e:
                    problems.append(
                        (
                            ("rdzv", "conf", key, "[key]"),
                            f"a single-node job meets on its own pod with c10d, not {self.rdzv.backend}: {e}",
                        )
                    )
        problems += self._is_host_problems(trainjob=trainjob)
        spec_env = set(self.env) if isinstance(self.env, dict) else {e.name for e in self.env}
        for i, container in enumerate(self.pod_template.spec.get("containers") or []):
            if container.get("name") != contract.TRAINING_CONTAINER:
                continue
            for j, var in enumerate(container.get("env") or []):
                if var.get("name") in spec_env:
                    problems.append(
                        (
                            ("pod_template", "spec", "containers", i, "env", j, "name"),
                            "also set in env; set it in one place",
                        )
                    )
        problems += self._network_problems() + self._queue_problems() + self._accelerator_problems()
        count, rule = self.process_rule()
        if self.nproc_per_node is None and count is None:
            device = next(name for name in self.resources.accelerators() if name in NEURON_DEVICES)
            problems.append((
                ("resources", *self.resources.where(device)),
                f"{rule}: the processes per node cannot be counted from it; give nproc_per_node (the NeuronCores of "
                "a device times the devices: 2 per device on Trn1 and Inf2, 4 on Trn2 with its default logical "
                "cores, 4 on Inf1), or request aws.amazon.com/neuroncore, one process per core",
            ))  # fmt: skip
        if self.nproc_per_node == "gpu" and not self.resources.accelerator_units():
            problems.append(
                (
                    ("nproc_per_node",),
                    "gpu counts the accelerators in the pod, and resources requests none: the pod gets no device "
                    "and elastic-launch refuses to start; request one (resources.requests.gpu, amd.com/gpu, ...) "
                    "or give a number",
                )
            )
        if problems:
            raise FieldProblems(problems)
        # Filled here so that --explain, the plan and the JSON view all see one value.
        self._fill_derived()
        return self

    def device_counts(self) -> dict[str, int]:
        """Accelerator units per node as the devices serve them: ``resources.accelerators()``, except that
        ``nvidia.com/gpu`` counts as MIG slices when ``accelerator`` names a partition (GKE and Flyte select a
        partition by node label, and each slice of such a node is one nvidia.com/gpu: the single strategy)."""
        counts = self.resources.accelerators()
        mig = self.accelerator.mig_resource() if self.accelerator is not None else None
        if mig is None or GPU_RESOURCE not in counts:
            return counts
        return {mig if name == GPU_RESOURCE else name: count for name, count in counts.items()}

    def process_rule(self) -> tuple[int | None, str]:
        """The default processes per node for the devices requested, and the rule that gave it (core/resources)."""
        return process_rule(self.device_counts())

    def _accelerator_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """``accelerator`` against the devices requested: an NVIDIA GPU, one slice of a partition."""
        acc = self.accelerator
        if acc is None:
            return []
        counts = {name: count for name, count in self.resources.accelerators().items() if count > 0}
        nvidia = [name for name in counts if name == GPU_RESOURCE or is_mig(name)]
        others = [name for name in counts if name not in nvidia]
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if others:
            problems.append((
                ("accelerator",),
                f"{acc.device} is an NVIDIA GPU, and the pod requests {others[0]}: no node has both; remove one",
            ))  # fmt: skip
        elif not nvidia:
            problems.append((
                ("accelerator",),
                f"{acc.device} places the pods on nodes with that GPU, and resources requests no GPU: the pod would "
                "hold the node without using it (and Flyte applies the device only to pods that request "
                "nvidia.com/gpu); request it, e.g. resources.requests.gpu: 1 (or, in a spec that extends a base, "
                "remove the base's device: accelerator: null)",
            ))  # fmt: skip
        if self.accelerator_label is not None and self.accelerator_label == self.accelerator_partition_label:
            problems.append((
                ("accelerator_partition_label",),
                "the same label as accelerator_label: a node label holds the device or its partition, not both",
            ))  # fmt: skip
        for name in nvidia:
            profile = name.removeprefix(MIG_PREFIX)
            if is_mig(name) and acc.partition is not None and profile != acc.partition:
                problems.append((
                    ("resources", *self.resources.where(name)),
                    f"a {profile} slice, and accelerator.partition is {acc.partition}; give one partition",
                ))  # fmt: skip
        mig = acc.mig_resource()
        if mig is not None and GPU_RESOURCE in counts:
            # nvidia.com/gpu on a partitioned node is slices: core/resources' rule for them, one per pod.
            for name, why in accelerator_problems(self.device_counts()):
                if name == mig:
                    problems.append((("resources", *self.resources.where(GPU_RESOURCE)), why))
        return problems

    def _declared_port(self) -> tuple[tuple[str | int, ...], int] | None:
        """The containerPort the user named pytorchjob-port on pod_template's pytorch container, and where."""
        for i, c in enumerate(self.pod_template.spec.get("containers") or []):
            if not isinstance(c, dict) or c.get("name") != contract.TRAINING_CONTAINER:
                continue
            for j, port in enumerate(c.get("ports") or []):
                if not isinstance(port, dict):
                    continue  # the PodSpec check reports it
                number = port.get("containerPort")
                if port.get("name") == contract.OPERATOR_PORT_NAME and isinstance(number, int):
                    return ("pod_template", "spec", "containers", i, "ports", j, "containerPort"), number
        return None

    def _network_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """The rendezvous port and host networking: what the operator and the cluster's DNS make of them."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        declared = self._declared_port()
        if declared is not None and self.rdzv.port is not None and declared[1] != self.rdzv.port:
            problems.append(
                (
                    declared[0],
                    f"the operator points the rendezvous at the port named {contract.OPERATOR_PORT_NAME}, and "
                    f"rdzv.port says {self.rdzv.port}; give one of them",
                )
            )
        pod = self.pod_template.spec
        policy = pod.get("dnsPolicy")
        at_worker_0 = self.nnodes.max > 1 and self.rdzv.backend == "c10d" and self.rdzv.host is None
        if pod.get("hostNetwork") is True and policy in ("ClusterFirst", "Default") and at_worker_0:
            problems.append(
                (
                    ("pod_template", "spec", "dnsPolicy"),
                    f"with hostNetwork, dnsPolicy {policy} gives the pod the node's DNS, where {self.name}-worker-0 "
                    "(the rendezvous) does not resolve; use ClusterFirstWithHostNet, or leave dnsPolicy out",
                )
            )
        return problems

    def _queue_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.kueue is not None:
            for label in self.kueue.labels():
                if label in self.labels:
                    problems.append((("labels", label, "[key]"), "set by kueue; give it in one place"))
        if self.run_policy.managed_by == "kueue.x-k8s.io/multikueue" and self.kueue is None:
            problems.append(
                (
                    ("run_policy", "managed_by"),
                    "MultiKueue dispatches only jobs queued in Kueue: set kueue.queue (a LocalQueue whose "
                    "ClusterQueue has the MultiKueue admission check)",
                )
            )
        return problems

    def _fill_derived(self) -> None:
        """Defaults that depend on other fields, each recorded with its reason for --explain."""
        if self.nproc_per_node is None:
            count, rule = self.process_rule()
            object.__setattr__(self, "nproc_per_node", count)
            self._derived["nproc_per_node"] = f"derived: {rule}"
        declared = self._declared_port()
        if self.rdzv.port is None and declared is not None:
            object.__setattr__(self.rdzv, "port", declared[1])
            self._derived["rdzv.port"] = (
                f"derived: the port named {contract.OPERATOR_PORT_NAME} in pod_template, which the operator points "
                "the rendezvous at"
            )
        if self.nnodes.elastic:
            scheduling = self.run_policy.scheduling
            if scheduling is None or scheduling.min_available is None:
                filled = (scheduling or Scheduling()).model_copy(update={"min_available": self.nnodes.min})
                object.__setattr__(self.run_policy, "scheduling", filled)
                self._derived["run_policy.scheduling.min_available"] = (
                    f"derived: nnodes MIN, {self.nnodes.min}: a gang of every replica ({self.nnodes.max}) would keep "
                    "a shrunk job pending until all of them fit"
                )

    def derived_note(self, path: str) -> str | None:
        """Why the compiler filled the field at ``path`` (dotted) from other fields, or None."""
        return self._derived.get(path)


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside a field annotation (``X``, ``X | None``, ``list[X]``), not through dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is dict:
        return None
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None
