"""The values the compiler refuses, field by field, and the objects it would have made of them.

``test_refusals_vs_server.py`` holds each of our refusals against the real API server. This
module makes the cases, with no cluster:

* :data:`FIELDS`: every field of the spec whose value lands in a Kubernetes object field (a
  name, a label key or value, a quantity, a port, an env name, a Secret's name and key, a
  toleration, a node selector, a run policy number, ...). Each has a spec that holds a
  placeholder there (a valid value found nowhere else in the output) and a seeded generator of
  values around a valid one: characters Kubernetes' rules treat differently, lengths at their
  limits, numbers at their bounds, and the rule's own refused examples (reserved names).
* :func:`verdict`: our verdict on one value (compile it; the problems of a refusal), and the
  objects the compiler made, or would have made: the placeholder's output with the value put
  where the placeholder landed. For a value we accept, that is exactly what the compiler made
  (the test checks it), so for one we refuse it is what we would have made had we let it pass.
* :data:`RULES`: each rule, by a pattern of its message. A refusal whose message no rule of its
  field names fails the test: a new rule must be judged against the server.
* :func:`pod_value_cases`: the pod values of ``tests/cluster/test_cluster_api_values.py`` (one
  refused example per rule of ``schema/podvalues.py``), rendered with those checks switched off.
* :func:`documented_strictness`: the list in docs/cluster.md ("Stricter than the API server"),
  which the test holds true both ways.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kube_helpers import REPO

from elastic_compile import contract
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.schema import podvalues

#: The targets whose output the server judges: the PyTorchJob (the CRD and the operator's
#: webhook) and the PodTemplate (Kubernetes' own validation of the pod the operator creates).
TARGETS = ("pytorchjob", "podtemplate")
#: Each generation's targets, judged apart: a value is accepted for a generation when the
#: server accepts every object of it. Trainer v2's TrainJob (with our TrainingRuntime when the
#: spec needs one) meets Trainer's webhooks and JobSet's, which the PyTorchJob does not.
#: Each has the PodTemplate of its pod: a CRD takes a pod template with any value, and the pods its
#: operator makes are what Kubernetes validates.
GENERATIONS: dict[str, tuple[str, ...]] = {"v1": TARGETS, "v2": ("trainjob", "podtemplate")}

Spec = dict[str, Any]
Doc = dict[str, Any]

_BASE: Spec = {"name": "zqbase", "image": "ghcr.io/x/y:1.0", "command": ["python", "t.py"]}


def _spec(**fields: Any) -> Spec:
    return {**json.loads(json.dumps(_BASE)), **fields}


def _pod(spec: dict[str, Any], **fields: Any) -> Spec:
    """A spec with ``pod_template.spec`` (and other top-level fields)."""
    return _spec(pod_template={"spec": spec}, **fields)


def _training(container: dict[str, Any], **pod: Any) -> Spec:
    return _pod({"containers": [{"name": contract.TRAINING_CONTAINER, **container}], **pod})


def _sidecar(container: dict[str, Any]) -> Spec:
    return _pod({"containers": [{"name": "side", "image": "ghcr.io/x/side:1.0", **container}]})


# --------------------------------------------------------------------------- generators

#: Characters the Kubernetes name rules treat differently: case, separators, white space,
#: controls, letters outside ASCII (one that upper-cases to ASCII), shell and URL syntax.
_ODD = ["A", "Z", "_", ".", "-", "/", ":", " ", "\n", "\t", "é", "ſ", "0", "9", "@", "=", "$", "*", "~", "%", "'"]


def strings(base: str, limits: tuple[int, ...], extra: tuple[str, ...] = ()) -> Callable[[random.Random], list[str]]:
    """Values around ``base``: one or two characters replaced, inserted, prepended or appended
    (from :data:`_ODD`), case changed, repeated to each length of ``limits`` and one either
    side, empty; then ``extra`` (a rule's own refused examples)."""

    def make(rng: random.Random) -> list[str]:
        out = ["", base.upper(), base.lower(), *extra]
        for n in limits:
            for length in (n - 1, n, n + 1):
                out.append((base * (length // len(base) + 1))[:length])
                out.append(base[0] + "a" * (length - 2) + base[-1] if length >= 2 else base[:length])
        for _ in range(PER_FIELD):
            text = list(base)
            for _ in range(rng.choice((1, 1, 2))):
                odd = rng.choice(_ODD)
                where = rng.randrange(len(text) + 1)
                action = rng.choice(("replace", "insert", "start", "end"))
                if action == "replace" and where < len(text):
                    text[where] = odd
                elif action == "start":
                    text.insert(0, odd)
                elif action == "end":
                    text.append(odd)
                else:
                    text.insert(where, odd)
            out.append("".join(text))
        return out

    return make


def numbers(low: int, high: int) -> Callable[[random.Random], list[int]]:
    """Integers at and around ``low`` and ``high`` (the rule's bounds), the int32 and int64 edges,
    and random ones between them."""

    def make(rng: random.Random) -> list[int]:
        out = [low - 1, low, low + 1, high - 1, high, high + 1, -1, 0, 2**31 - 1, 2**31, 2**32, 2**63 - 1, -(2**31)]
        out += [rng.randint(-(2**33), 2**33) for _ in range(PER_FIELD // 4)]
        out += [rng.randint(low - 10, low + 10) for _ in range(PER_FIELD // 4)]
        return out

    return make


_SUFFIXES = ["", "", "m", "k", "K", "Ki", "Mi", "M", "Gi", "G", "Ti", "Pi", "Ei", "E", "e3", "E3", "e-3", "n", "u"]
_BAD_SUFFIXES = ["mi", "KB", "gb", "Kib", " ", "i", "b", "e", "e+", "ki", "MI"]


def quantities(rng: random.Random) -> list[str]:
    """Quantity texts: numbers (signed, decimal, exponent, many digits) with Kubernetes' suffixes
    and with near misses."""
    out = ["0", "-0", "+1", ".5", "5.", "1.5", "0.0001", "1e3", "1E3", "1.5Gi", "-1", "1 Gi", "１"]
    for _ in range(PER_FIELD):
        number = rng.choice(
            [str(rng.randint(0, 4096)), f"{rng.random() * 100:.{rng.randint(1, 4)}f}", str(rng.randint(1, 9)) * 20]
        )
        if rng.random() < 0.2:
            number = rng.choice(["-", "+"]) + number
        suffix = rng.choice(_SUFFIXES if rng.random() < 0.7 else _BAD_SUFFIXES)
        out.append(number + suffix)
    return out


def counts(rng: random.Random) -> list[str]:
    """Quantities, and whole numbers around the most units of a device the API server counts
    (in thousandths, in 64 bits)."""
    edge = (2**63 - 1) // 1000
    return [*quantities(rng), *(str(n) for n in (edge - 1, edge, edge + 1, 2**53 + 1, 2**63 - 1, 2**63))]


def one_of(*values: object) -> Callable[[random.Random], list[object]]:
    """The rule's own values (a closed set and what it refuses), each once."""
    return lambda _rng: list(values)


# --------------------------------------------------------------------------- the fields

#: Values per field from the random part of a generator (the fixed part adds about 20).
PER_FIELD = 30

_RESERVED_ENV = (
    *sorted(contract.WORKER_ENV_NAMES),
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_LOG_DIR",
    "PET_MY_OWN",
    "ELASTIC_LAUNCH_X",
    "PYTHONUNBUFFERED",
)


@dataclass(frozen=True)
class Field:
    """A field of the spec whose value lands in a Kubernetes object."""

    id: str
    #: The spec with ``value`` in the field.
    build: Callable[[Any], Spec]
    #: A valid value that appears nowhere else in the output: where it lands, a value goes.
    placeholder: Any
    values: Callable[[random.Random], list[Any]]
    #: The rules (keys of :data:`RULES`) that may refuse a value here.
    rules: tuple[str, ...]
    #: Objects the value makes beyond the compiled ones (a namespace's Namespace).
    extra: Callable[[Any], list[Doc]] = lambda _value: []
    #: Whether an accepted value's output is the placeholder's with the value in its place; not
    #: for a mount path: a mount at /dev/shm replaces the compiler's own volume there.
    exact: bool = True
    #: The generations (keys of GENERATIONS) whose output the field lands in.
    generations: tuple[str, ...] = ("v1", "v2")


def _namespace(value: Any) -> list[Doc]:
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": value}}]


_LABEL_KEY = ("label-key",)
_GPU_NODE: Spec = {"resources": {"requests": {"gpu": 1}}, "accelerator": "nvidia-tesla-a100"}

FIELDS: tuple[Field, ...] = (
    Field(
        "name", lambda v: _spec(name=v), "zqjob", strings("zqjob", (52, 53, 63, 64)), ("job-name", "job-name-length")
    ),
    Field("namespace", lambda v: _spec(namespace=v), "zqns", strings("zqns", (63, 64)), ("namespace",), _namespace),
    Field(
        "labels key",
        lambda v: _spec(labels={v: "x"}),
        "example.com/zqkey",
        strings("example.com/zqkey", (63, 64, 253)),
        _LABEL_KEY,
    ),
    Field("labels value", lambda v: _spec(labels={"k": v}), "zqvalue", strings("zqvalue", (63, 64)), ("label-value",)),
    Field(
        "annotations key",
        lambda v: _spec(annotations={v: "x"}),
        "example.com/zqkey",
        strings("example.com/zqkey", (63, 64, 253)),
        ("annotation-key",),
    ),
    Field(
        "pod_template.metadata.labels key",
        lambda v: _spec(pod_template={"metadata": {"labels": {v: "x"}}}),
        "example.com/zqkey",
        strings("example.com/zqkey", (63, 64)),
        _LABEL_KEY,
    ),
    Field(
        "pod_template.metadata.labels value",
        lambda v: _spec(pod_template={"metadata": {"labels": {"k": v}}}),
        "zqvalue",
        strings("zqvalue", (63, 64)),
        ("label-value",),
    ),
    Field(
        "pod_template.metadata.annotations key",
        lambda v: _spec(pod_template={"metadata": {"annotations": {v: "x"}}}),
        "example.com/zqkey",
        strings("example.com/zqkey", (63, 64)),
        ("annotation-key",),
    ),
    Field(
        "image", lambda v: _spec(image=v), "ghcr.io/zq/img:1.0", strings("ghcr.io/zq/img:1.0", (255, 256)), ("image",)
    ),
    Field(
        "sidecar image",
        lambda v: _sidecar({"image": v}),
        "ghcr.io/zq/side:1.0",
        strings("ghcr.io/zq/side:1.0", ()),
        ("sidecar-image",),
    ),
    Field(
        "env name",
        lambda v: _spec(env={v: "x"}),
        "ZQ_ENV",
        strings("ZQ_ENV", (), _RESERVED_ENV),
        ("env-name", "env-name-launcher", "env-name-worker", "env-name-elastic-launch", "env-name-operator"),
    ),
    Field(
        "env name twice",
        lambda v: _spec(env=[{"name": "ZQA", "value": "1"}, {"name": v, "value": "2"}]),
        "ZQB",
        strings("ZQA", ()),
        ("env-name", "env-twice", "env-name-launcher"),
    ),
    Field(
        "pod_template env name",
        lambda v: _training({"env": [{"name": v, "value": "x"}]}),
        "ZQ_ENV",
        strings("ZQ_ENV", (), _RESERVED_ENV),
        ("env-name", "env-name-launcher", "env-name-worker", "env-name-elastic-launch", "env-name-operator"),
    ),
    Field(
        "secretKeyRef.name",
        lambda v: _spec(env=[{"name": "S", "valueFrom": {"secretKeyRef": {"name": v, "key": "k"}}}]),
        "zqsecret",
        strings("zqsecret", (253, 254)),
        ("object-name",),
    ),
    Field(
        "configMapKeyRef.key",
        lambda v: _spec(env=[{"name": "S", "valueFrom": {"configMapKeyRef": {"name": "c", "key": v}}}]),
        "zq.key",
        strings("zq.key", (253, 254), (".", "..", "..zq")),
        ("config-key",),
    ),
    Field(
        "resources quantity",
        lambda v: _spec(resources={"requests": {"cpu": v}}),
        "777m",
        quantities,
        ("quantity", "quantity-negative", "quantity-too-large"),
    ),
    Field(
        "resources name",
        lambda v: _spec(resources={"requests": {v: "1"}}),
        "example.com/zqdev",
        strings("example.com/zqdev", (63, 64)),
        ("resource-name",),
    ),
    Field(
        "device count",
        lambda v: _spec(resources={"requests": {"example.com/zqdev": v}}),
        "737",
        counts,
        ("quantity", "quantity-negative", "quantity-too-large", "device-whole"),
    ),
    Field(
        "shared_memory",
        lambda v: _spec(shared_memory=v),
        "777Mi",
        quantities,
        ("quantity", "quantity-negative", "quantity-too-large", "shm-size"),
    ),
    Field(
        "accelerator_label",
        lambda v: _spec(accelerator_label=v, **_GPU_NODE),
        "example.com/zqacc",
        strings("example.com/zqacc", (63, 64)),
        ("node-label-key",),
    ),
    Field("kueue.queue", lambda v: _spec(kueue={"queue": v}), "zqqueue", strings("zqqueue", (63, 64)), ("kueue-name",)),
    Field(
        "run_policy.ttl_seconds_after_finished",
        lambda v: _spec(run_policy={"ttl_seconds_after_finished": v}),
        7771,
        numbers(0, 2**31 - 1),
        ("int-range",),
    ),
    Field(
        "run_policy.active_deadline_seconds",
        lambda v: _spec(run_policy={"active_deadline_seconds": v}),
        7771,
        numbers(1, 2**31 - 1),
        ("int-range",),
    ),
    Field(
        "run_policy.backoff_limit",
        lambda v: _spec(run_policy={"backoff_limit": v}),
        7771,
        numbers(0, 2**31 - 1),
        ("int-range",),
    ),
    Field(
        "run_policy.scheduling.schedule_timeout_seconds",
        lambda v: _spec(run_policy={"scheduling": {"schedule_timeout_seconds": v}}),
        7771,
        numbers(1, 2**31 - 1),
        ("int-range",),
    ),
    Field(
        "toleration key",
        lambda v: _pod({"tolerations": [{"key": v, "operator": "Exists"}]}),
        "example.com/zqtaint",
        strings("example.com/zqtaint", (63, 64)),
        ("qualified-name",),
    ),
    Field(
        "nodeSelector key",
        lambda v: _pod({"nodeSelector": {v: "x"}}),
        "example.com/zqnode",
        strings("example.com/zqnode", (63, 64)),
        ("node-selector-key",),
    ),
    Field(
        "nodeSelector value",
        lambda v: _pod({"nodeSelector": {"k": v}}),
        "zqnodevalue",
        strings("zqnodevalue", (63, 64)),
        ("node-selector-value",),
    ),
    Field(
        "serviceAccountName",
        lambda v: _pod({"serviceAccountName": v}),
        "zqsa",
        strings("zqsa", (253, 254)),
        ("object-name",),
    ),
    Field(
        "container name", lambda v: _sidecar({"name": v}), "zqside", strings("zqside", (63, 64)), ("container-name",)
    ),
    Field(
        "volume name",
        lambda v: _training({"volumeMounts": [{"name": v, "mountPath": "/zq"}]}, volumes=[{"name": v, "emptyDir": {}}]),
        "zqvol",
        strings("zqvol", (63, 64), ("dshm", "elastic-tmp")),
        ("volume-name", "volume-dshm", "volume-tmp"),
    ),
    Field(
        "port name",
        lambda v: _training({"ports": [{"name": v, "containerPort": 9000}]}),
        "zqport",
        strings("zqport", (15, 16)),
        ("port-name",),
    ),
    Field(
        "containerPort",
        lambda v: _training({"ports": [{"name": "zq", "containerPort": v}]}),
        7771,
        numbers(1, 65535),
        ("port-range", "int32"),
    ),
    Field(
        "mountPath",
        lambda v: _training(
            {"volumeMounts": [{"name": "zq", "mountPath": v}]}, volumes=[{"name": "zq", "emptyDir": {}}]
        ),
        "/zqmnt",
        strings("/zqmnt", (), ("/dev/shm", "/dev/shm/x", "/dev//shm/", "dev/shm/x", "/tmp")),
        ("mount-in-shm", "mount-path"),
        exact=False,
    ),
    Field(
        "dnsPolicy with hostNetwork",
        lambda v: _pod({"hostNetwork": True, "dnsPolicy": v}, nnodes=2),
        "ClusterFirstWithHostNet",
        one_of("ClusterFirst", "Default", "None", "clusterFirst", "ClusterFirstWithHostNet"),
        ("host-network-dns", "closed-set", "dns-none"),
    ),
    Field(
        "terminationGracePeriodSeconds",
        lambda v: _pod({"terminationGracePeriodSeconds": v}),
        7771,
        numbers(0, 31),
        ("grace-period",),
    ),
    Field(
        "restart_policy",
        lambda v: _spec(restart_policy=v),
        "OnFailure",
        one_of("OnFailure", "ExitCode", "Never", "Always", "onFailure", "always", "Sometimes", ""),
        ("restart-policy",),
        generations=("v1",),  # a TrainJob has no such setting
    ),
    Field(
        "run_policy.clean_pod_policy",
        lambda v: _spec(run_policy={"clean_pod_policy": v}),
        "Running",
        one_of("All", "Running", "None", "all", "running", "Succeeded", ""),
        ("clean-pod-policy",),
        generations=("v1",),  # a TrainJob has no such setting
    ),
    Field(
        "run_policy.managed_by",
        lambda v: _spec(run_policy={"managed_by": v}, kueue={"queue": "q"}),
        "kueue.x-k8s.io/multikueue",
        one_of("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue", "example.com/mine", "kueue", ""),
        ("managed-by",),
        generations=("v1",),  # a TrainJob has no such setting
    ),
    Field(
        "run_policy.scheduling.min_available",
        lambda v: _spec(nnodes=9000, run_policy={"scheduling": {"min_available": v}}),
        7771,
        numbers(1, 9000),
        ("int-range", "min-available-above"),
        generations=("v1",),  # a TrainJob has no such setting
    ),
    Field(
        "trainjob.runtime",
        lambda v: _spec(trainjob={"runtime": v, "runtime_kind": "TrainingRuntime"}),
        "zqruntime",
        strings("zqruntime", (253, 254)),
        ("runtime-name",),
        generations=("v2",),
    ),
)

#: Each rule by a pattern of its message (what the compiler says when it refuses).
RULES: dict[str, str] = {
    "job-name": r"not a DNS-1035 label",
    "job-name-length": r"so that pod names up to|JobSet names the pods <name>-node-0",
    "namespace": r"not a valid namespace",
    "label-key": r"not a valid label name",
    "label-value": r"label values are at most 63",
    "annotation-key": r"not a valid annotation name",
    "image": r"not an image reference",
    "sidecar-image": r"needs an image reference",
    "env-name": r"not a valid environment variable name",
    "env-name-launcher": r"^torchrun reads it",
    "env-name-worker": r"torch elastic sets it for every worker",
    "env-name-elastic-launch": r"reserved for elastic-launch",
    "env-name-operator": r"^the training operator v1 appends",
    "env-twice": r"set twice in env",
    "object-name": r"must be a lowercase RFC 1123 subdomain",
    "config-key": r"not a Secret or ConfigMap key",
    "quantity": r"not a Kubernetes quantity|expected a Kubernetes quantity",
    "quantity-negative": r"must not be negative",
    "quantity-too-large": r"too large: a quantity must be below",
    "resource-name": r"unknown resource",
    "device-whole": r"whole units|whole number",
    "shm-size": r"a size must be above 0|YAML 1.1 reads",
    "node-label-key": r"not a node label key",
    "kueue-name": r"it becomes a label value",
    "int-range": r"^must be [<>]= -?[0-9]+$",
    "int32": r"out of range for int32",
    "qualified-name": r"not a qualified name",
    "node-selector-key": r"^not a label key",
    "node-selector-value": r"^not a label value",
    "mount-path": r"must not be empty: the directory",
    "container-name": r"a container name is a DNS-1123 label",
    "volume-name": r"a volume name is a DNS-1123 label",
    "volume-dshm": r"is the compiler's /dev/shm volume",
    "volume-tmp": r"is the compiler's /tmp volume",
    "port-name": r"a port name is at most 15",
    "port-range": r"must be between 1 and 65535",
    "mount-in-shm": r"inside /dev/shm, where the compiler mounts",
    "host-network-dns": r"with hostNetwork, dnsPolicy",
    "closed-set": r"must be one of",
    "dns-none": r"None needs dnsConfig.nameservers",
    "grace-period": r"must be above shutdown_timeout",
    "restart-policy": r"^must be one of '",
    "clean-pod-policy": r"^must be one of '",
    "managed-by": r"^must be one of '",
    "min-available-above": r"above the most pods the job has",
    "runtime-name": r"not a runtime name",
}


def values_of(field: Field, seed: str) -> list[Any]:
    """The field's values for ``seed``, each once, in the generator's order."""
    made = field.values(random.Random(f"{seed}:{field.id}"))
    seen: dict[str, Any] = {}
    for value in made:
        seen.setdefault(json.dumps(value), value)
    return list(seen.values())


# --------------------------------------------------------------------------- verdicts


def spec_text(spec: Spec) -> str:
    """The spec as YAML (PyYAML quotes every string a YAML 1.1 or 1.2 reader would take for another type)."""
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=10**6)


def compile_docs(spec: Spec, targets: tuple[str, ...] = TARGETS) -> list[Doc]:
    """The objects of ``targets`` the compiler makes of ``spec`` (plain JSON types); SpecError if it refuses."""
    compiled = compile_text(spec_text(spec), "refusal.yaml", targets)
    return [json.loads(json.dumps(o.doc)) for o in compiled.outputs]


def substitute(node: Any, old: Any, new: Any) -> tuple[Any, int]:
    """``node`` with ``old`` replaced by ``new``: whole values of old's type, and inside strings
    (keys too) when both are strings. Returns the result and how many places changed."""
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        count = 0
        for key, value in node.items():
            key2, n1 = substitute(key, old, new)
            value2, n2 = substitute(value, old, new)
            out[key2] = value2
            count += n1 + n2
        return out, count
    if isinstance(node, list):
        items = [substitute(item, old, new) for item in node]
        return [item for item, _ in items], sum(n for _, n in items)
    if type(node) is type(old) and node == old:
        return new, 1
    if isinstance(node, str) and isinstance(old, str) and isinstance(new, str) and old in node:
        return node.replace(old, new), node.count(old)
    return node, 0


@dataclass(frozen=True)
class Ours:
    """Our verdict on one value: the problems of a refusal (none: accepted) and the objects."""

    problems: tuple[str, ...]
    docs: list[Doc]


def verdict(field: Field, value: Any, placed: list[Doc], targets: tuple[str, ...] = TARGETS) -> Ours:
    """Compile ``value`` in ``field`` for ``targets``; the objects are the compiler's when it accepts,
    else ``placed`` (the placeholder's output) with the value where the placeholder landed."""
    try:
        docs = compile_docs(field.build(value), targets)
    except SpecError as e:
        made, _ = substitute(placed, field.placeholder, value)
        return Ours(tuple(f"{p.path}: {p.message}" for p in e.problems), made)
    return Ours((), docs)


def rules_hit(field: Field, problems: tuple[str, ...]) -> tuple[set[str], list[str]]:
    """The rules of ``field`` whose messages are among ``problems``, and the problems none names."""
    hit: set[str] = set()
    unnamed: list[str] = []
    for line in problems:
        message = line.partition(": ")[2]
        named = {rule for rule in field.rules if re.search(RULES[rule], message)}
        hit |= named
        if not named:
            unnamed.append(line)
    return hit, unnamed


# --------------------------------------------------------------------------- pod values


#: Rows that are no rule of the API server's, and why.
NOT_POD_VALUES: dict[str, str] = {
    "defaultMode-yaml11-octal": "a YAML reading, not a value: 0600 is 384 to YAML 1.1 and 600 to YAML 1.2",
}


def pod_value_cases() -> dict[str, tuple[Spec, Spec]]:
    """``tests/cluster/test_cluster_api_values.py``'s rows: case -> (the refused spec, its valid twin)."""
    folder = str(REPO / "tests" / "cluster")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import test_cluster_api_values as rows

    base = yaml.safe_load(rows.BASE)

    def spec(fragment: str) -> Spec:
        return {**base, "pod_template": {"spec": yaml.safe_load(fragment)}}

    return {
        case: (spec(bad), spec(good))
        for case, (bad, good, _path, _message) in rows.CASES.items()
        if case not in NOT_POD_VALUES
    }


def pod_value_text(case: str) -> str:
    """The refused spec of ``case`` as its row writes it (a YAML 1.2 reading: 0600 is decimal)."""
    import test_cluster_api_values as rows

    return str(rows.BASE) + "pod_template:\n  spec:\n" + textwrap.indent(rows.CASES[case][0], "    ")


@contextlib.contextmanager
def pod_values_unchecked() -> Iterator[None]:
    """Switch ``schema/podvalues.py``'s checks off (the schema and every target call ``podvalues.check``),
    so the compiler renders a refused pod value as it would have."""
    real = podvalues.check

    def nothing(*_args: object) -> None:
        return None

    podvalues.check = nothing
    try:
        yield
    finally:
        podvalues.check = real


def compile_text_docs(text: str) -> list[Doc]:
    """The objects of TARGETS the compiler makes of spec text."""
    return [json.loads(json.dumps(o.doc)) for o in compile_text(text, "refusal.yaml", TARGETS).outputs]


# --------------------------------------------------------------------------- the documented list

DOC = REPO / "docs" / "cluster.md"
_SECTION = "## Stricter than the API server"
_ROW = re.compile(r"^\| `([A-Za-z0-9:-]+)` \|")


def documented_strictness(doc: Path = DOC, section: str = _SECTION) -> list[str]:
    """The rule ids (the first column, in backticks) of the tables in ``section`` of ``doc``, in
    order: by default docs/cluster.md's "Stricter than the API server"."""
    text = doc.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end >= 0 else len(text)]
    return [m.group(1) for line in body.splitlines() if (m := _ROW.match(line))]
