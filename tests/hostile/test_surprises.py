"""No silent reinterpretation: every YAML 1.1 surprise, written unquoted, in every kind of field.

For each field kind (strings, counts, durations, quantities, booleans, env values) and each
value YAML readers disagree about (``on``, ``no``, ``1:30``, ``0755``, ``1_000``, ``1e-4``,
``.inf``, ``0x1F``, ``~``, ``null``, ``true``...), exactly one of two things must happen:

* the spec compiles and the emitted manifest, read back by a YAML 1.1 reader (PyYAML, like
  kubectl's sigs.k8s.io/yaml), holds exactly what the user meant: string fields keep the
  text as written, numbers that every reader agrees on (``0x1F`` is 31 everywhere) keep
  their value, and ``~``/``null`` in an optional field means unset, as in every YAML;
* or the spec is rejected with one located line that shows the text exactly as written
  (``(given: 0755)``) and says what to write or quote.

The expectations are a table, not a rule derived from the code under test: a change in
behaviour shows up as a failing row. Known gaps are strict xfails naming the file at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from support.specs import MINIMAL as BASE

from elastic_compile import contract
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError

# The user's first env entry comes after the compiler's downward-API entries.
USER_ENV = len(contract.DOWNWARD_ENV)
MULTI = "nnodes: 2\n"  # elasticPolicy (and so rdzv fields) exists only on multi-node jobs

BOOL_WORDS = ["on", "off", "yes", "no", "y", "n", "On", "NO"]
VALUES = [*BOOL_WORDS, "1:30", "0755", "1_000", "1e-4", ".inf", "0x1F", "~", "null", "true"]
NULLISH = {"~", "null"}

MISSING = object()  # what an extractor returns for a field absent from the output
MEMORY_BACKED = "memory-backed /dev/shm, no sizeLimit"

# An error "says what to write or quote" when it contains one of these.
GUIDANCE = ("quote it", "YAML 1.1", "expected", "write", "must be", "use ")


# --------------------------------------------------------------------------- reading the output


def _worker(doc: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    return template


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _worker(doc)["spec"]["containers"][0]
    return container


def _opt(option: str) -> Callable[[dict[str, Any]], Any]:
    def get(doc: dict[str, Any]) -> Any:
        args = _container(doc)["args"]
        return args[args.index(option) + 1]

    return get


def _path(*keys: Any) -> Callable[[dict[str, Any]], Any]:
    """An extractor for a nested key path; MISSING when any step is absent."""

    def get(doc: dict[str, Any]) -> Any:
        node: Any = doc
        for key in keys:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                return MISSING
        return node

    return get


def _in_container(*keys: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda doc: _path(*keys)(_container(doc))


def _shm(doc: dict[str, Any]) -> Any:
    volume = next(v for v in _worker(doc)["spec"]["volumes"] if v["name"] == "dshm")
    return volume["emptyDir"].get("sizeLimit", MEMORY_BACKED)


def _nnodes(doc: dict[str, Any]) -> Any:
    policy = doc["spec"].get("elasticPolicy")
    replicas = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return (policy["minReplicas"], policy["maxReplicas"]) if policy else (replicas, replicas)


def _first_key(*keys: str) -> Callable[[dict[str, Any]], Any]:
    return lambda doc: next(iter(_path(*keys)(doc)))


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Slot:
    """One field: how to write a value into a spec and how to read it back from the output."""

    name: str
    kind: str  # str | count | duration | quantity | bool
    template: str  # spec text with {v} where the unquoted value goes
    extract: Callable[[dict[str, Any]], Any]
    target: str = "pytorchjob"
    optional: bool = False  # ~ and null mean "unset"
    unset: Any = MISSING  # what the output holds when unset
    accepts: dict[str, Any] = field(default_factory=dict)  # value -> expected output (beyond the kind's rule)
    rejects: frozenset[str] = frozenset()  # values the field's own rules reject (DNS names, label syntax)


def _flyte(key: str) -> Callable[[dict[str, Any]], Any]:
    return _path("template", "id", key)


NOT_DNS1035 = frozenset({"1:30", "0755", "1_000", "1e-4", ".inf", "0x1F", "On", "NO"})
NOT_DNS1123 = frozenset({"1:30", "1_000", ".inf", "0x1F", "On", "NO"})
NOT_LABEL_VALUE = frozenset({"1:30", ".inf"})
NOT_IMAGE = frozenset({".inf", "0x1F", "On", "NO"})  # upper case or a leading dot: no image reference
NOT_KEY = frozenset({"1e-4", ".inf", "0x1F", "~", "null", "true"})  # YAML 1.2 reads a number, null or bool key

# Formatted twice (slot fields, then the value): braces are doubled twice.
FLYTE = "flyte: {{{{project: {p}, domain: {d}, version: {ver}, name: {n}}}}}\n"

STRING_SLOTS = [
    Slot("name", "str", "name: {v}\nimage: x:1\ncommand: [python, t.py]\n", _path("metadata", "name"),
         rejects=NOT_DNS1035),
    Slot("namespace", "str", BASE + "namespace: {v}\n", _path("metadata", "namespace"), rejects=NOT_DNS1123),
    Slot("image", "str", "name: t\nimage: {v}\ncommand: [python, t.py]\n", _in_container("image"), rejects=NOT_IMAGE),
    Slot("command arg", "str", "name: t\nimage: x:1\ncommand: [python, {v}]\n", _in_container("args", -1)),
    Slot("function arg", "str", "name: t\nimage: x:1\nfunction: {{target: 'a.b:c', args: [{v}]}}\n",
         _in_container("args", -1)),
    Slot("label value", "str", BASE + "labels: {{team: {v}}}\n", _path("metadata", "labels", "team"),
         rejects=NOT_LABEL_VALUE),
    Slot("label name", "str", BASE + "labels: {{{v}: x}}\n", _first_key("metadata", "labels"),
         rejects=NOT_KEY | {"1:30"}),
    Slot("annotation", "str", BASE + "annotations: {{note: {v}}}\n", _path("metadata", "annotations", "note")),
    Slot("pod label", "str", BASE + "pod_template: {{metadata: {{labels: {{l: {v}}}}}}}\n",
         lambda doc: _worker(doc)["metadata"]["labels"]["l"], rejects=NOT_LABEL_VALUE),
    Slot("pod annotation", "str", BASE + "pod_template: {{metadata: {{annotations: {{a: {v}}}}}}}\n",
         lambda doc: _worker(doc)["metadata"]["annotations"]["a"]),
    Slot("rdzv.id", "str", BASE + MULTI + "rdzv: {{id: {v}}}\n", _path("spec", "elasticPolicy", "rdzvId"),
         rejects=frozenset({".inf"})),  # a run id starts with a letter or digit (contract_values)
    Slot("rdzv.host", "str", BASE + MULTI + "rdzv: {{host: {v}}}\n", _path("spec", "elasticPolicy", "rdzvHost"),
         rejects=frozenset({"1:30", ".inf"})),  # neither a host name nor an IP address
    Slot("rdzv.conf value", "str",
         BASE + MULTI + "rdzv: {{backend: etcd-v2, host: etcd, conf: {{ssl_cert: {v}}}}}\n",
         _path("spec", "elasticPolicy", "rdzvConf", 0, "value")),  # a free-text key (c10d has none)
    Slot("env map value", "str", BASE + "env: {{V: {v}}}\n", _in_container("env", USER_ENV, "value")),
    Slot("env list value", "str", BASE + "env: [{{name: V, value: {v}}}]\n", _in_container("env", USER_ENV, "value")),
    Slot("env name", "str", BASE + "env: {{{v}: x}}\n", _in_container("env", USER_ENV, "name"),
         rejects=NOT_KEY | {"1:30", "0755", "1_000"}),
    # The key, not the Secret's name: a name is a lower-case DNS subdomain, so every surprise is
    # refused there for its case or characters (the API server's rule, found by the cluster fuzz).
    Slot("secretKeyRef.key", "str", BASE + "env: [{{name: V, valueFrom: {{secretKeyRef: {{name: s, key: {v}}}}}}}]\n",
         _in_container("env", USER_ENV, "valueFrom", "secretKeyRef", "key"),
         rejects=frozenset({"1:30"})),  # a key is letters, digits, '-', '_' and '.'
    Slot("scheduling.queue", "str", BASE + "run_policy: {{scheduling: {{queue: {v}}}}}\n",
         _path("spec", "runPolicy", "schedulingPolicy", "queue")),
    Slot("flyte.project", "str", BASE + FLYTE.format(p="{v}", d="d", ver="'1'", n="x"), _flyte("project"), "flyte"),
    Slot("flyte.domain", "str", BASE + FLYTE.format(p="p", d="{v}", ver="'1'", n="x"), _flyte("domain"), "flyte"),
    Slot("flyte.version", "str", BASE + FLYTE.format(p="p", d="d", ver="{v}", n="x"), _flyte("version"), "flyte"),
    Slot("flyte.name", "str", BASE + FLYTE.format(p="p", d="d", ver="'1'", n="{v}"), _flyte("name"), "flyte"),
]  # fmt: skip

COUNT_SLOTS = [
    Slot("nnodes", "count", BASE + "nnodes: {v}\n", _nnodes, accepts={"0x1F": (31, 31), "1:30": (1, 30)}),
    Slot("nproc_per_node", "count", BASE + "nproc_per_node: {v}\n", _path("spec", "nprocPerNode"),
         optional=True, unset="1", accepts={"0x1F": "31"}),
    Slot("max_restarts", "count", BASE + MULTI + "max_restarts: {v}\n", _path("spec", "elasticPolicy", "maxRestarts")),
    Slot("rdzv.port", "count", BASE + MULTI + "rdzv: {{port: {v}}}\n", _path("spec", "elasticPolicy", "rdzvPort"),
         optional=True),
    Slot("ttl_seconds_after_finished", "count", BASE + "run_policy: {{ttl_seconds_after_finished: {v}}}\n",
         _path("spec", "runPolicy", "ttlSecondsAfterFinished"), optional=True),
    Slot("active_deadline_seconds", "count", BASE + "run_policy: {{active_deadline_seconds: {v}}}\n",
         _path("spec", "runPolicy", "activeDeadlineSeconds"), optional=True),
    Slot("backoff_limit", "count", BASE + "run_policy: {{backoff_limit: {v}}}\n",
         _path("spec", "runPolicy", "backoffLimit"), optional=True),
    Slot("scheduling.min_available", "count",
         BASE + "nnodes: 32\nrun_policy: {{scheduling: {{min_available: {v}}}}}\n",
         _path("spec", "runPolicy", "schedulingPolicy", "minAvailable"), optional=True),
    Slot("scheduling.schedule_timeout_seconds", "count",
         BASE + "run_policy: {{scheduling: {{schedule_timeout_seconds: {v}}}}}\n",
         _path("spec", "runPolicy", "schedulingPolicy", "scheduleTimeoutSeconds"), optional=True),
]  # fmt: skip

DURATION_SLOTS = [
    Slot(f"rdzv.{key}", "duration", BASE + f"rdzv: {{{{{key}: {{v}}}}}}\n", _opt(option))
    for key, option in [
        ("join_timeout", "--join-timeout"),
        ("last_call_timeout", "--last-call-timeout"),
        ("close_timeout", "--close-timeout"),
        ("heartbeat_timeout", "--heartbeat-timeout"),
        ("read_timeout", "--read-timeout"),
    ]
] + [
    Slot("monitor_interval", "duration", BASE + "monitor_interval: {v}\n", _opt("--monitor-interval")),
    Slot("shutdown_timeout", "duration", BASE + "shutdown_timeout: {v}\n", _opt("--shutdown-timeout")),
]

QUANTITY_SLOTS = [
    Slot("resources.requests.cpu", "quantity", BASE + "resources: {{requests: {{cpu: {v}}}}}\n",
         _in_container("resources", "requests", "cpu")),
    Slot("resources.limits.memory", "quantity", BASE + "resources: {{limits: {{memory: {v}}}}}\n",
         _in_container("resources", "limits", "memory")),
    Slot("resources.requests.gpu", "quantity", BASE + "resources: {{requests: {{gpu: {v}}}}}\n",
         _in_container("resources", "requests", "nvidia.com/gpu"), rejects=frozenset({"1e-4"})),
    Slot("shared_memory", "quantity", BASE + "shared_memory: {v}\n", _shm, accepts={"true": MEMORY_BACKED}),
]  # fmt: skip

BOOL_SLOTS = [
    Slot("istio_sidecar", "bool", BASE + "istio_sidecar: {v}\n",
         lambda doc: _worker(doc).get("metadata", {}).get("annotations", {}).get("sidecar.istio.io/inject", MISSING),
         accepts={"true": MISSING}),
    Slot("run_policy.suspend", "bool", BASE + "run_policy: {{suspend: {v}}}\n", _path("spec", "runPolicy", "suspend")),
    Slot("secretKeyRef.optional", "bool",
         BASE + "env: [{{name: V, valueFrom: {{secretKeyRef: {{name: s, key: k, optional: {v}}}}}}}]\n",
         _in_container("env", USER_ENV, "valueFrom", "secretKeyRef", "optional"), optional=True),
]  # fmt: skip

SLOTS = STRING_SLOTS + COUNT_SLOTS + DURATION_SLOTS + QUANTITY_SLOTS + BOOL_SLOTS


@dataclass(frozen=True)
class Expect:
    """What must happen: ``value`` in the output, or an error containing ``fragment``."""

    ok: bool
    value: Any = None
    fragment: str = ""


def expect(slot: Slot, v: str) -> Expect:
    """The table's rule for one field kind and one unquoted value."""
    if v in slot.accepts:
        return Expect(True, slot.accepts[v])
    if v in slot.rejects:
        return Expect(False)  # the field's own syntax; (given: v) proves the text was not reinterpreted
    if v in NULLISH and slot.optional:
        return Expect(True, slot.unset)  # null is null in every YAML version: the field is unset
    if slot.kind == "str":
        return Expect(False, fragment="quote it") if v in NULLISH | {"true"} else Expect(True, v)
    if slot.kind in ("count", "duration") and v == "0x1F":
        return Expect(True, 31 if slot.kind == "count" else "31")  # YAML 1.1 and 1.2 agree: 31
    if slot.kind == "duration" and v == "1:30":
        return Expect(False, fragment="base-60")  # the unit to write, not just "invalid"
    if slot.kind == "quantity" and v in ("0755", "1e-4"):
        return Expect(True, v)  # quantity text kept as written; the API server parses it
    if slot.name == "shared_memory" and v in BOOL_WORDS:
        return Expect(False, fragment="true")  # a boolean-or-size field: the hint must offer true/false
    if slot.kind == "bool" and v == "true":
        return Expect(True, True)
    if (
        slot.kind in ("count", "bool")
        and v in [*BOOL_WORDS, "1:30", "0755", "1_000"]
        and slot.name
        not in (
            "nnodes",
            "nproc_per_node",
        )
    ):
        return Expect(False, fragment="YAML 1.1")  # the surprise itself is named
    return Expect(False, fragment="")  # any message with guidance (see GUIDANCE)


# Behaviour that is neither right value nor helpful error: the fix belongs in a file this
# suite does not own, so each row is a strict xfail with the reason (it turns red once fixed).
KNOWN_GAPS: dict[tuple[str, str], str] = {}  # none left


def _params() -> list[Any]:
    params = []
    for slot in SLOTS:
        for v in VALUES:
            marks = []
            if (slot.name, v) in KNOWN_GAPS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[(slot.name, v)]))
            params.append(pytest.param(slot, v, id=f"{slot.name}={v}", marks=marks))
    return params


def _compile(slot: Slot, v: str) -> dict[str, Any]:
    compiled = compile_text(slot.template.format(v=v), "s.yaml", [slot.target])
    # What a YAML 1.1 reader (kubectl) makes of the emitted bytes, not our in-memory dict.
    doc: dict[str, Any] = yaml.safe_load(stream_text([compiled], "yaml"))
    return doc


@pytest.mark.parametrize(("slot", "v"), _params())
def test_unquoted_surprise(slot: Slot, v: str) -> None:
    wanted = expect(slot, v)
    if wanted.ok:
        try:
            doc = _compile(slot, v)
        except SpecError as e:
            pytest.fail(f"rejected, but {slot.name}: {v} means {wanted.value!r}: {e}")
        got = slot.extract(doc)
        assert got == wanted.value and type(got) is type(wanted.value), f"{slot.name}: {v} became {got!r}"
        return
    with pytest.raises(SpecError) as e:
        _compile(slot, v)
    [problem] = e.value.problems
    assert problem.file == "s.yaml" and problem.line >= 1 and problem.col >= 1
    assert problem.given == v, f"the error shows {problem.given!r}, not the text written ({v})"
    if wanted.fragment:
        assert wanted.fragment in problem.message, str(problem)
    elif v not in slot.rejects:
        assert any(g in problem.message for g in GUIDANCE), f"no hint what to write: {problem}"


def test_tilde_quote_hint_repeats_the_text() -> None:
    with pytest.raises(SpecError) as e:
        compile_text(BASE + "env: {HOME_DIR: ~}\n", "s.yaml")
    assert 'quote it: "~"' in e.value.problems[0].message


def test_the_table_covers_every_kind_the_brief_names() -> None:
    kinds = {slot.kind for slot in SLOTS}
    assert kinds == {"str", "count", "duration", "quantity", "bool"}
    names = {slot.name for slot in SLOTS}
    for required in ("env map value", "env list value", "function arg", "rdzv.id", "rdzv.host", "flyte.version"):
        assert required in names
    assert {"on", "off", "yes", "no", "y", "n", "1:30", "0755", "1_000", "1e-4", ".inf", "0x1F", "~", "null"} <= set(
        VALUES
    )
