"""Structure-aware fuzzer for elastic.yaml: every input is accepted with valid output or rejected with a location.

It mutates the example and golden specs two ways:

* **data level**: the spec is loaded into a tree, then keys are dropped, duplicated,
  renamed or moved; values are retyped (scalars become lists or maps and back), pushed
  to extremes (huge and negative numbers, empty, very long and unicode strings), replaced
  by YAML 1.1 look-alikes written unquoted (``on``, ``no``, ``1:30``, ``0755``, ``1e-4``,
  ``.inf``), given anchors, aliases, merge keys and explicit tags (``!!python/object``),
  or nested deeply; the tree is then written as YAML text in one of several styles
  (block with 2 or 4 spaces, flow, JSON-like, mixed; plain, quoted or literal strings);
* **text level**: bytes and lines of a seed (or of a data-level case) are flipped,
  inserted (invalid UTF-8, BOM, NUL, NEL, tabs, YAML indicators), deleted, duplicated,
  swapped, re-indented or truncated.

Each case is compiled through the real pipeline (``compile_text`` for the pytorchjob and
podtemplate targets) and emitted with ``stream_text``, then classified:

``accepted``
    the emitted text must read back (PyYAML, YAML 1.1, as kubectl's sigs.k8s.io/yaml
    would) to exactly the compiled documents, and every document must pass
    ``crdcheck.check_manifest`` (strict PyTorchJob CRD + webhook + strict core schemas; the
    upstream CRD when ``$ELASTIC_COMPILE_CRDS`` names it, else the compact schema the package
    ships, judged by jsonschema rather than by the compiler's own validator);
``rejected``
    a ``SpecError`` whose problems all carry line >= 1, col >= 1, a path and a message;
``pod_template passthrough``
    the output (or a ``CompileError``) fails only because the user's free-form
    ``pod_template.spec`` fragment is itself not a valid PodSpec: a known gap, counted
    apart so the defect signal stays clear;
defects
    ``uncaught`` (any other exception, including a per-case timeout), ``unlocated``
    (a rejection without a full location), ``invalid_output`` (accepted, but the output
    fails the checks or reads back differently) and ``compile_error`` (our templates
    produced something invalid from a spec the schema accepted).

Usage::

    python bench/fuzz_spec.py --cases 100000 --seed 1 --report fuzz.json --save-failures /tmp/fuzz
    python bench/fuzz_spec.py --seed 1 --show-case 4711          # print one generated case
    python bench/fuzz_spec.py --replay case.yaml                 # classify one file
    python bench/fuzz_spec.py --minimize case.yaml               # shrink a defect, same signature

Every case is generated from ``Random(f"{seed}:{index}")``, so any case can be replayed
alone. Exit status: 0 when no defect was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests"):  # run as a script from anywhere; the test oracle is tests/support
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import yaml  # noqa: E402
from support import crdcheck  # noqa: E402

from elastic_compile.compiler import lint  # noqa: E402
from elastic_compile.compiler.output import stream_text  # noqa: E402
from elastic_compile.compiler.pipeline import compile_text  # noqa: E402
from elastic_compile.core.emit import PurePythonDumper, plain, to_yaml  # noqa: E402
from elastic_compile.core.errors import CompileError, SpecError  # noqa: E402
from elastic_compile.core.loader import load_text, pure_python  # noqa: E402
from elastic_compile.core.scalars import SourceFloat, SourceInt  # noqa: E402
from elastic_compile.schema import ElasticSpec  # noqa: E402

TARGETS = ("pytorchjob", "podtemplate")

# Classes of outcome. The first three are fine; the rest are defects and must stay at 0.
ACCEPTED, REJECTED, PASSTHROUGH = "accepted", "rejected", "pod_template_passthrough"
UNCAUGHT, UNLOCATED, INVALID_OUTPUT, COMPILE_ERROR = "uncaught", "unlocated", "invalid_output", "compile_error"
BACKEND_MISMATCH = "backend_mismatch"
DEFECTS = (UNCAUGHT, UNLOCATED, INVALID_OUTPUT, COMPILE_ERROR, BACKEND_MISMATCH)
LABELS = {
    UNCAUGHT: "uncaught exceptions",
    UNLOCATED: "unlocated rejections",
    INVALID_OUTPUT: "invalid accepted outputs",
    COMPILE_ERROR: "compile errors",
    BACKEND_MISMATCH: "libyaml/pure-Python parser or emitter disagreements",
}

# A case slower than this is listed in the report (the CLI promises well under a second).
SLOW_SECONDS = 1.0


# --------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Raw:
    """Text written verbatim where a scalar goes: look-alikes, tags, huge numbers."""

    text: str


@dataclass
class Anchored:
    """A value carrying an anchor (``&name value``)."""

    name: str
    value: Any


@dataclass(frozen=True)
class Alias:
    """``*name``."""

    name: str


class Pairs(list):  # type: ignore[type-arg]
    """A mapping as [key, value] pairs: it can hold duplicate and non-string keys."""


def to_tree(value: Any) -> Any:
    """Loaded spec data -> a mutable tree; numbers keep the text they were written as."""
    if isinstance(value, dict):
        return Pairs([[k, to_tree(v)] for k, v in value.items()])
    if isinstance(value, list):
        return [to_tree(v) for v in value]
    if isinstance(value, (SourceInt, SourceFloat)):
        return Raw(value.text)
    return value


# --------------------------------------------------------------------------- value pools

# Unquoted, YAML 1.1 readers give these another meaning than the text (https://yaml.org/type/);
# YAML 1.2 readers give some of them yet another.
LOOKALIKES = [
    "on", "off", "On", "OFF", "yes", "no", "Yes", "NO", "y", "n", "Y", "N", "1:30", "2:00:00", "0:30", "0755",
    "007", "1_000", "1e-4", "1e3", "1E3", "1.0e-2", ".inf", "-.inf", ".nan", "+.inf", "0x1F", "0o17", "0b101",
    "~", "null", "Null", "NULL", "true", "False", "TRUE", "1.10", "+12", "-0", "00", "7.", ".5", "1:4", "4:1",
    "0:0", "1 : 4", "=", "<<",
]  # fmt: skip
TAGS = [
    "!!python/object:os.system", "!!python/object/apply:os.system ['touch /tmp/fuzz-pwned']",
    "!!python/name:os.system", "!!python/tuple [1, 2]", "!!binary aGk=", "!!timestamp 2001-12-14", "!!set {a: null}",
    "!!omap [a: 1]", "!custom x", "!<tag:yaml.org,2002:str> x", "!!str 1", "!!int 7", "!!float 1", "!!bool true",
    "!!null ''", "!!map {}", "!!seq []", "!!int '0x1F'", "!!float x", "!!int x", "!!bool yes", "! 12", "!!str",
    "!!merge <<",
]  # fmt: skip
STRINGS = [
    "", " ", "a" * 10_000, "a" * 64, "a" * 254, "é", "日本語", "\U0001f600", "\u2028", "\x85", "\ufeff", "\x00", "\x07",
    "\t", "a: b", "#x", "x #y", "{{ x }}", "{% raw %}", "- a", "[a]", "{a: b}", "&a", "*a", "|", ">", "x\ny",
    "line\r\n", "trailing\n", " lead", "trail ", "$(touch /tmp/x)", "${HOME}", "'", '"', "\\", "---", "...", "UPPER",
    "with space", "x/y", "a.b/c", "-leading", "trailing-", "ok", "123abc", "1", "example.com/x", "\ud800x",
    "registry.example.com:5000/team/img@sha256:" + "a" * 64, "img:latest", "img", "TOKEN", "a=b", "a,b",
]  # fmt: skip
NUMBERS: list[Any] = [
    0, -1, 1, 2, 3, 7, 8, 63, 64, 299, 300, 1024, 1025, 10_000, 10_001, 65535, 65536, 2**31 - 1, 2**31, 2**63,
    10**30, -(10**30), 1.5, -0.0, 0.001, 1e308, 5e-324,
]  # fmt: skip
HUGE_DIGITS = [20, 400, 4_299, 4_301, 10_000]

# Keys from the schema and from Kubernetes pod specs: renames and insertions use them so
# that mutations land on real fields (and on fields one level off).
POD_KEYS = [
    "hostNetwork", "hostIPC", "hostPID", "securityContext", "privileged", "runAsUser", "nodeSelector", "tolerations",
    "affinity", "serviceAccountName", "volumes", "containers", "initContainers", "env", "valueFrom", "secretKeyRef",
    "configMapKeyRef", "fieldRef", "fieldPath", "volumeMounts", "mountPath", "ports", "containerPort", "image",
    "imagee", "resources", "limits", "requests", "name", "command", "args", "restartPolicy",
    "terminationGracePeriodSeconds", "dnsPolicy", "priorityClassName", "schedulerName", "emptyDir", "medium",
    "sizeLimit", "key", "value", "labels", "annotations", "metadata", "spec", "kind", "apiVersion",
]  # fmt: skip


def _schema_keys() -> list[str]:
    keys: set[str] = set()
    stack: list[type[Any]] = [ElasticSpec]
    seen: set[type[Any]] = set()
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            keys.add(info.alias or name)
            for sub in _models_in(info.annotation):
                stack.append(sub)
    return sorted(keys)


def _models_in(annotation: Any) -> Iterator[type[Any]]:
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


SCHEMA_KEYS = _schema_keys()
ALL_KEYS = SCHEMA_KEYS + POD_KEYS

# Plausible values per field name: mutations that stay valid, so the output checks run
# on many variants and not only on the seeds.
PLAUSIBLE: dict[str, list[Any]] = {
    "name": ["job", "a", "llm-finetune", "a" * 40, "x-1"],
    "namespace": ["ml", "default", "team-a"],
    "image": ["ghcr.io/x/y:1.0", "busybox:1.36", "img@sha256:" + "b" * 64, "registry:5000/a/b:c"],
    "nnodes": [1, 2, Raw("1:4"), "2:8", Raw("3"), 16, Raw("1:1")],
    "nproc_per_node": [1, 4, 8, "auto", "gpu", "cpu"],
    "max_restarts": [0, 1, 3, 100],
    "monitor_interval": [1, 0.5, "5s", "1m"],
    "shutdown_timeout": [30, "1m", "2h"],
    "join_timeout": [60, 900, "15m", "1h30m"],
    "last_call_timeout": [1, 30],
    "read_timeout": [60, "15m"],
    "close_timeout": [30],
    "heartbeat_timeout": [5],
    "backend": ["c10d", "etcd", "etcd-v2"],
    "port": [23456, 29500, 2379, 1],
    "host": ["etcd.example.com", "worker-0"],
    "id": ["run-1", "exp.42"],
    "shared_memory": [True, False, "1Gi", "64Gi", Raw("8Gi")],
    "istio_sidecar": [True, False],
    "suspend": [True, False],
    "restart_policy": ["ExitCode", "OnFailure", "Never", "Always"],
    "start_method": ["spawn", "fork", "forkserver"],
    "clean_pod_policy": ["All", "Running", "None"],
    "cpu": [Raw("1"), "500m", Raw("64"), "2"],
    "memory": ["1Gi", "480Gi", "512Mi"],
    "gpu": [Raw("1"), Raw("8")],
    "command": [["python", "train.py"], ["torchrun", Raw("1e-4"), Raw("on")]],
    "function": ["pkg.mod:fn", Pairs([["target", "a.b:c"], ["args", ["x", Raw("1")]]])],
    "env": [Pairs([["A", "1"], ["B", Raw("on")]]), [Pairs([["name", "A"], ["value", "x"]])]],
    "hostNetwork": [True, False],
    "privileged": [True, False],
}


@dataclass(frozen=True)
class Seed:
    """One spec to mutate: its file name, text and tree."""

    name: str
    text: str
    tree: Any


def load_seeds(root: Path = ROOT) -> list[Seed]:
    """The example specs and, when present, the golden specs."""
    paths = sorted((root / "examples").glob("*.yaml")) + sorted((root / "tests" / "golden").glob("*/elastic.yaml"))
    seeds = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        try:
            tree = to_tree(load_text(text, str(path)).data)
        except SpecError:
            continue  # a seed under construction by someone else; the text level still uses it
        seeds.append(Seed(str(path.relative_to(root)), text, tree))
    return seeds


# --------------------------------------------------------------------------- tree walking


def _containers(tree: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every mapping and list in ``tree`` with its path (for picking a mutation site)."""
    node = tree.value if isinstance(tree, Anchored) else tree
    if isinstance(node, (Pairs, list)):
        yield path, node
        items = enumerate(node) if not isinstance(node, Pairs) else ((i, kv[1]) for i, kv in enumerate(node))
        for i, child in items:
            yield from _containers(child, (*path, i))


def _pick_container(rng: random.Random, tree: Any, kind: type | None = None) -> Any:
    found = [c for _, c in _containers(tree) if kind is None or type(c) is kind]
    return rng.choice(found) if found else None


def _slots(tree: Any) -> list[tuple[Any, int]]:
    """(container, index) for every value position: ``container[index]`` or its pair's value."""
    out = []
    for _, c in _containers(tree):
        out.extend((c, i) for i in range(len(c)))
    return out


def _get(c: Any, i: int) -> Any:
    return c[i][1] if isinstance(c, Pairs) else c[i]


def _set(c: Any, i: int, value: Any) -> None:
    if isinstance(c, Pairs):
        c[i][1] = value
    else:
        c[i] = value


def _key_at(c: Any, i: int) -> Any:
    return c[i][0] if isinstance(c, Pairs) else None


def _clone(value: Any) -> Any:
    if isinstance(value, Pairs):
        return Pairs([[k, _clone(v)] for k, v in value])
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, Anchored):
        return Anchored(value.name, _clone(value.value))
    return value


def _find_key(tree: Any, key: str) -> list[Any]:
    return [c[i][1] for c, i in _slots(tree) if isinstance(c, Pairs) and c[i][0] == key]


# --------------------------------------------------------------------------- value generators


def random_scalar(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(STRINGS)
    if roll < 0.45:
        return Raw(rng.choice(LOOKALIKES))
    if roll < 0.65:
        return rng.choice(NUMBERS)
    if roll < 0.72:
        return Raw(("-" if rng.random() < 0.3 else "") + "1" + "0" * rng.choice(HUGE_DIGITS))
    if roll < 0.8:
        return rng.choice([True, False, None])
    if roll < 0.9:
        return Raw(rng.choice(TAGS))
    return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0x3000)])) for _ in range(8))


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.15:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if depth < 3 and roll < 0.3:
        return Pairs([[rng.choice(ALL_KEYS), random_value(rng, depth + 1)] for _ in range(rng.randrange(0, 4))])
    return random_scalar(rng)


def nested(rng: random.Random, value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value] if rng.random() < 0.5 else Pairs([[rng.choice(ALL_KEYS), value]])
    return value


def _typo(rng: random.Random, key: str) -> str:
    if not key:
        return "x"
    i = rng.randrange(len(key))
    ops: list[Callable[[], str]] = [
        lambda: key[:i] + key[i + 1 :],  # drop a letter
        lambda: key[:i] + key[i] * 2 + key[i + 1 :],  # double it
        lambda: key[:i] + key[i:].upper(),  # wrong case
        lambda: key.replace("_", "-"),  # kebab-case
        lambda: re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key),  # camelCase
        lambda: key + " ",  # trailing space, quoted
    ]
    return rng.choice(ops)()


# --------------------------------------------------------------------------- data-level mutations


def mutate_tree(rng: random.Random, tree: Any, seeds: Sequence[Seed]) -> str:
    """Apply one random mutation to ``tree`` in place; returns its name."""
    slots = _slots(tree)
    op = rng.choice(DATA_OPS)
    return op(rng, tree, slots, seeds)


def _op_drop(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    c = _pick_container(rng, tree)
    if not c:
        return "drop:none"
    i = rng.randrange(len(c))
    key = _key_at(c, i)
    del c[i]
    return f"drop:{key}"


def _op_duplicate(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    c = _pick_container(rng, tree, Pairs)
    if not c:
        return "dup:none"
    k, v = rng.choice(c)
    c.insert(rng.randrange(len(c) + 1), [k, _clone(v) if rng.random() < 0.5 else random_value(rng)])
    return f"dup:{k}"


def _op_retype(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if not slots:
        return "retype:none"
    c, i = rng.choice(slots)
    old = _get(c, i)
    choice = rng.random()
    if choice < 0.25:
        new: Any = [old]
    elif choice < 0.4:
        new = Pairs([[rng.choice(ALL_KEYS), old]])
    elif choice < 0.5 and isinstance(old, (list, Pairs)) and old:
        new = _get(old, 0)  # a collection becomes its first element
    else:
        new = random_value(rng)
    _set(c, i, new)
    return f"retype:{_key_at(c, i)}"


def _op_plausible(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    candidates = [(c, i) for c, i in slots if isinstance(c, Pairs) and c[i][0] in PLAUSIBLE]
    if not candidates:
        return "plausible:none"
    c, i = rng.choice(candidates)
    c[i][1] = _clone(rng.choice(PLAUSIBLE[c[i][0]]))
    return f"plausible:{c[i][0]}"


def _op_extreme(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    scalars = [(c, i) for c, i in slots if not isinstance(_get(c, i), (list, Pairs))]
    if not scalars:
        return "extreme:none"
    c, i = rng.choice(scalars)
    roll = rng.random()
    if roll < 0.4:
        value: Any = rng.choice(NUMBERS)
    elif roll < 0.6:
        value = Raw(("-" if rng.random() < 0.4 else "") + "9" * rng.choice(HUGE_DIGITS))
    else:
        value = rng.choice(STRINGS)
    _set(c, i, value)
    return f"extreme:{_key_at(c, i)}"


def _op_lookalike(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if not slots:
        return "lookalike:none"
    c, i = rng.choice(slots)
    _set(c, i, Raw(rng.choice(LOOKALIKES)))
    return f"lookalike:{_key_at(c, i)}"


def _op_tag(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if not slots:
        return "tag:none"
    c, i = rng.choice(slots)
    old = _get(c, i)
    if rng.random() < 0.5 and isinstance(old, (str, int, float)) and not isinstance(old, bool):
        tag = rng.choice(["!!str", "!!int", "!!float", "!!bool", "!!null", "!", "!!python/str", "!local"])
        _set(c, i, Raw(f"{tag} {json.dumps(old) if isinstance(old, str) else old}"))
    else:
        _set(c, i, Raw(rng.choice(TAGS)))
    return f"tag:{_key_at(c, i)}"


def _op_alias(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if len(slots) < 2:
        return "alias:none"
    (c1, i1), (c2, i2) = rng.sample(slots, 2)
    name = rng.choice(["a", "b", "x1", "anchor"])
    _set(c1, i1, Anchored(name, _get(c1, i1)))
    roll = rng.random()
    if roll < 0.6:
        _set(c2, i2, Alias(name))  # may come before the anchor: an undefined alias
    elif roll < 0.8:
        target = _pick_container(rng, tree, Pairs)
        if target is not None:
            target.append([Raw("<<"), Alias(name)])  # merge key
    else:
        _set(c2, i2, Alias(rng.choice(["a", "undefined", name])))
    return f"alias:{_key_at(c1, i1)}"


def _op_bomb(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    c = _pick_container(rng, tree, Pairs) or tree
    width, levels = rng.randrange(2, 12), rng.randrange(2, 9)
    c.append(["x_b0", Anchored("b0", ["lol"] * width)])
    for level in range(1, levels):
        c.append([f"x_b{level}", Anchored(f"b{level}", [Alias(f"b{level - 1}")] * width)])
    return f"bomb:{width}^{levels}"


def _op_deep(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if not slots:
        return "deep:none"
    if _depth(tree) > 100:  # keep the writer (recursive, default stack) within its limits
        return "deep:skip"
    c, i = rng.choice(slots)
    levels = rng.choice([5, 30, 55, 60, 62, 63, 64, 65, 100, 150])
    _set(c, i, nested(rng, _get(c, i), levels))
    return f"deep:{levels}"


def _depth(value: Any) -> int:
    if isinstance(value, Anchored):
        return _depth(value.value)
    if isinstance(value, Pairs):
        return 1 + max((_depth(v) for _, v in value), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _op_rename(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    c = _pick_container(rng, tree, Pairs)
    if not c:
        return "rename:none"
    pair = rng.choice(c)
    old = pair[0]
    roll = rng.random()
    if roll < 0.5 and isinstance(old, str):
        pair[0] = _typo(rng, old)
    elif roll < 0.85:
        pair[0] = rng.choice(ALL_KEYS)
    else:
        pair[0] = rng.choice([1, True, None, 1.5, Raw("? [a]"), Raw("[a, b]"), Raw("{a: b}"), Raw("<<"), ""])
    return f"rename:{old}"


def _op_insert(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    c = _pick_container(rng, tree)
    if c is None:
        return "insert:none"
    key = rng.choice(ALL_KEYS)
    value = _clone(rng.choice(PLAUSIBLE[key])) if key in PLAUSIBLE and rng.random() < 0.6 else random_value(rng)
    if isinstance(c, Pairs):
        c.insert(rng.randrange(len(c) + 1), [key, value])
    else:
        c.insert(rng.randrange(len(c) + 1), value)
    return f"insert:{key}"


def _op_crossover(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    donor = rng.choice(seeds).tree
    donor_pairs = [(c, i) for c, i in _slots(donor) if isinstance(c, Pairs)]
    if not donor_pairs:
        return "cross:none"
    dc, di = rng.choice(donor_pairs)
    key, value = dc[di][0], _clone(dc[di][1])
    targets = [(c, i) for c, i in slots if isinstance(c, Pairs) and c[i][0] == key]
    if targets and rng.random() < 0.7:
        c, i = rng.choice(targets)
        c[i][1] = value
    else:
        c = _pick_container(rng, tree, Pairs) or tree
        c.append([key, value])
    return f"cross:{key}"


def _op_swap(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    if len(slots) < 2:
        return "swap:none"
    (c1, i1), (c2, i2) = rng.sample(slots, 2)
    a, b = _get(c1, i1), _get(c2, i2)
    if _contains(a, b) or _contains(b, a):
        return "swap:nested"
    _set(c1, i1, b)
    _set(c2, i2, a)
    return f"swap:{_key_at(c1, i1)}/{_key_at(c2, i2)}"


def _contains(outer: Any, inner: Any) -> bool:
    if outer is inner:
        return True
    if isinstance(outer, Pairs):
        return any(_contains(v, inner) for _, v in outer)
    if isinstance(outer, list):
        return any(_contains(v, inner) for v in outer)
    return False


def _op_pod(rng: random.Random, tree: Any, slots: list[Any], seeds: Sequence[Seed]) -> str:
    """Grow pod_template.spec: containers, env, security settings (where the merge logic lives)."""
    if not isinstance(tree, Pairs):
        return "pod:none"
    root = tree
    templates = [v for k, v in root if k == "pod_template" and isinstance(v, Pairs)]
    template = templates[0] if templates else Pairs()
    if not templates:
        root.append(["pod_template", template])
    specs = [v for k, v in template if k == "spec" and isinstance(v, Pairs)]
    pod = specs[0] if specs else Pairs()
    if not specs:
        template.append(["spec", pod])
    container = Pairs([["name", rng.choice(["pytorch", "sidecar", "pytorch", "x"])]])
    for key in rng.sample(["image", "env", "volumeMounts", "ports", "securityContext", "resources", "args"], 2):
        container.append([key, _pod_value(rng, key)])
    what = rng.choice(["container", "field", "volume"])
    if what == "container":
        lists = [v for k, v in pod if k == "containers" and type(v) is list]  # a Pairs is a list too
        (lists[0] if lists else _appended(pod, "containers", [])).append(container)
    elif what == "field":
        key = rng.choice(["hostNetwork", "hostIPC", "hostPID", "nodeSelector", "tolerations", "securityContext"])
        pod.append([key, _pod_value(rng, key)])
    else:
        volume = Pairs([["name", rng.choice(["data", "dshm", "v"])], ["emptyDir", Pairs([["medium", "Memory"]])]])
        lists = [v for k, v in pod if k == "volumes" and type(v) is list]
        (lists[0] if lists else _appended(pod, "volumes", [])).append(volume)
    return f"pod:{what}"


def _appended(pairs: Pairs, key: str, value: Any) -> Any:
    pairs.append([key, value])
    return value


def _pod_value(rng: random.Random, key: str) -> Any:
    if rng.random() < 0.2:
        return random_value(rng)
    values: dict[str, list[Any]] = {
        "image": ["busybox:1.36", "img", "img:latest", ""],
        "env": [[Pairs([["name", "API_TOKEN"], ["value", "x"]])], [Pairs([["name", "A"], ["value", Raw("on")]])]],
        "volumeMounts": [[Pairs([["name", "dshm"], ["mountPath", "/dev/shm"]])]],
        "ports": [[Pairs([["containerPort", 9102]])], [Pairs([["name", "pytorchjob-port"], ["containerPort", 1]])]],
        "securityContext": [Pairs([["privileged", True]]), Pairs([["runAsUser", 1000]])],
        "resources": [Pairs([["limits", Pairs([["cpu", Raw("1")]])]])],
        "args": [["--x", Raw("1e-4")]],
        "hostNetwork": [True, Raw("yes")],
        "hostIPC": [True],
        "hostPID": [False],
        "nodeSelector": [Pairs([["gpu", "a100"]]), Pairs([["k", Raw("on")]])],
        "tolerations": [[Pairs([["key", "k"], ["operator", "Exists"], ["tolerationSeconds", 300]])]],
    }
    return _clone(rng.choice(values.get(key, [None])))


DATA_OPS: list[Callable[[random.Random, Any, list[Any], Sequence[Seed]], str]] = [
    _op_drop, _op_duplicate, _op_retype, _op_plausible, _op_plausible, _op_plausible, _op_extreme, _op_lookalike,
    _op_lookalike, _op_tag, _op_alias, _op_bomb, _op_deep, _op_rename, _op_insert, _op_insert, _op_crossover,
    _op_crossover, _op_swap, _op_pod, _op_pod,
]  # fmt: skip


# --------------------------------------------------------------------------- writing the tree as YAML

_PLAIN_SAFE = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@=+-]*$")
_PLAIN_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}


@dataclass
class Style:
    """How one case writes its tree: indentation, flow below a depth, string quoting."""

    indent: int = 2
    flow_depth: int = 99  # collections at this depth or deeper are written in flow style
    json_like: bool = False  # every string double-quoted, every key too
    quote: str = "auto"  # auto | single | double
    ascii_only: bool = False


def _string(s: str, style: Style, flow: bool) -> str:
    if style.json_like or style.quote == "double" or not s.isprintable() or "\n" in s:
        return json.dumps(s, ensure_ascii=style.ascii_only)
    if style.quote == "auto" and _PLAIN_SAFE.match(s) and s.lower() not in _PLAIN_WORDS:
        return s
    return "'" + s.replace("'", "''") + "'"


def _scalar(value: Any, style: Style, flow: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Alias):
        return f"*{value.name}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ".nan"
    if isinstance(value, str):
        return _string(value, style, flow)
    raise TypeError(type(value))


def _key(key: Any, style: Style) -> str:
    if isinstance(key, str) and style.json_like:
        return json.dumps(key, ensure_ascii=style.ascii_only)
    return _scalar(key, style, True)


def _flow(value: Any, style: Style) -> str:
    if isinstance(value, Anchored):
        return f"&{value.name} {_flow(value.value, style)}"
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{_key(k, style)}: {_flow(v, style)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v, style) for v in value) + "]"
    return _scalar(value, style, True)


def _literal_ok(s: str) -> bool:
    lines = s.split("\n")
    return (
        "\n" in s.rstrip("\n")
        and not s.startswith((" ", "\n"))
        and all(line == line.rstrip() and line.isprintable() for line in lines)
        and not s.endswith("\n\n")
    )


def _after(value: Any, indent: int, depth: int, style: Style) -> str:
    """Text after ``key:`` or ``-`` for ``value`` whose parent sits at ``indent``."""
    anchor = ""
    if isinstance(value, Anchored):
        anchor, value = f" &{value.name}", value.value
    if depth >= style.flow_depth or not isinstance(value, (Pairs, list)) or not value:
        if isinstance(value, str) and not style.json_like and _literal_ok(value):
            marker = "|" if value.endswith("\n") else "|-"
            pad = " " * (indent + style.indent)
            return f"{anchor} {marker}\n" + "".join(f"{pad}{line}\n" for line in value.rstrip("\n").split("\n"))
        return f"{anchor} {_flow(value, style)}\n"
    return anchor + "\n" + _block(value, indent + style.indent, depth + 1, style)


def _block(value: Any, indent: int, depth: int, style: Style) -> str:
    pad = " " * indent
    out = []
    if isinstance(value, Pairs):
        for k, v in value:
            out.append(f"{pad}{_key(k, style)}:{_after(v, indent, depth, style)}")
    else:
        for v in value:
            out.append(f"{pad}-{_after(v, indent, depth, style)}")
    return "".join(out)


def write_tree(tree: Any, style: Style) -> str:
    """The tree as YAML text in ``style``."""
    if style.flow_depth == 0 or not isinstance(tree, (Pairs, list)) or not tree:
        return _flow(tree, style) + "\n"
    return _block(tree, 0, 1, style)


def random_style(rng: random.Random) -> Style:
    roll = rng.random()
    if roll < 0.15:
        return Style(flow_depth=0, json_like=True, ascii_only=rng.random() < 0.5)
    if roll < 0.25:
        return Style(flow_depth=0)
    return Style(
        indent=rng.choice([2, 2, 4, 1, 3]),
        flow_depth=rng.choice([99, 99, 2, 3]),
        quote=rng.choice(["auto", "auto", "single", "double"]),
        ascii_only=rng.random() < 0.2,
    )


# --------------------------------------------------------------------------- text-level mutations

BYTE_POOL = [
    b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\x1b", b"\t", b"\r", b"\r\n",
    b"\xef\xbb\xbf", b"\xc2\x85", b"\xe2\x80\xa8", b"\x7f", b"\xc2\x9b",
]  # fmt: skip
TOKEN_POOL = [
    "&a ", "*a", "<<: *a\n", "!!python/object/apply:os.system ['touch /tmp/fuzz-pwned']", "---\n", "...\n",
    "%YAML 1.1\n---\n", "%YAML 1.2\n---\n", "%TAG ! tag:x,2000:\n---\n", "? ", "{", "}", "[", "]", "|", ">", "- ",
    "# ", "'", '"', "\\", ": ", ":", ",", "\t", "!!binary ", "!", "@", "`", "%", "\"\\x", "\"\\ud800\"", "'''",
]  # fmt: skip


def mutate_text(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One byte- or line-level mutation of ``data``."""
    op = rng.choice(TEXT_OPS)
    return op(rng, data)


def _t_flip(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if not data:
        return b"\xff", "flip"
    i = rng.randrange(len(data))
    return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :], "flip"


def _t_insert_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    i = rng.randrange(len(data) + 1)
    chunk = rng.choice(BYTE_POOL)
    return data[:i] + chunk + data[i:], f"bytes:{chunk!r}"


def _t_insert_token(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    i = rng.randrange(len(data) + 1)
    token = rng.choice(TOKEN_POOL)
    return data[:i] + token.encode() + data[i:], f"token:{token!r}"


def _t_delete(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if not data:
        return data, "delete:none"
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.choice([1, 2, 5, 20, 200]))
    return data[:i] + data[j:], "delete"


def _t_truncate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    return data[: rng.randrange(len(data) + 1)], "truncate"


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def _t_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    op = rng.choice(["del", "dup", "swap", "indent", "dedent", "repeat", "value", "tab", "colon"])
    if op == "del":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    elif op == "swap":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "indent":
        lines[i] = b" " * rng.choice([1, 2, 4]) + lines[i]
    elif op == "dedent":
        lines[i] = lines[i].lstrip(b" ")
    elif op == "repeat":
        lines[i : i + 1] = [lines[i]] * rng.choice([10, 1000, 20_000])
    elif op == "value":
        m = re.match(rb"^(\s*(?:- )?[^\s:#]+:) ?(.*?)(\r?\n?)$", lines[i])
        if m:
            word = rng.choice(LOOKALIKES + TAGS + ["", "[]", "{}", "[[[[", "&a", "*a", "'x", '"x'])
            lines[i] = m.group(1) + b" " + word.encode() + m.group(3)
    elif op == "tab":
        lines[i] = lines[i].replace(b"  ", b"\t", 1)
    else:
        lines[i] = lines[i].replace(b": ", b":", 1)
    return b"".join(lines), f"line:{op}"


def _t_crlf(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    return data.replace(b"\n", rng.choice([b"\r\n", b"\r", b"\x85", b"\n\n"])), "eol"


TEXT_OPS: list[Callable[[random.Random, bytes], tuple[bytes, str]]] = [
    _t_flip, _t_insert_bytes, _t_insert_bytes, _t_insert_token, _t_insert_token, _t_delete, _t_truncate,
    _t_line, _t_line, _t_line, _t_crlf,
]  # fmt: skip


# --------------------------------------------------------------------------- case generation


@dataclass(frozen=True)
class Case:
    """One generated input."""

    index: int
    seed: str
    ops: tuple[str, ...]
    data: bytes


def make_case(seed: int | str, index: int, seeds: Sequence[Seed]) -> Case:
    """Case ``index`` of run ``seed``: the same arguments always give the same bytes."""
    rng = random.Random(f"{seed}:{index}")
    if index < len(seeds):  # the unmutated seeds first: they must all be accepted
        return Case(index, seeds[index].name, ("seed",), seeds[index].text.encode())
    source = rng.choice(seeds)
    ops: list[str] = []
    roll = rng.random()
    if roll < 0.75:
        tree = _clone(source.tree)
        for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
            ops.append(mutate_tree(rng, tree, seeds))
        style = random_style(rng)
        ops.append(f"style:{style.indent}/{style.flow_depth}/{'json' if style.json_like else style.quote}")
        data = write_tree(tree, style).encode("utf-8", "surrogatepass")
        if rng.random() < 0.1:  # both levels
            data, op = mutate_text(rng, data)
            ops.append(op)
    else:
        data = source.text.encode()
        for _ in range(rng.choice([1, 1, 2, 3])):
            data, op = mutate_text(rng, data)
            ops.append(op)
    return Case(index, source.name, tuple(ops), data)


# --------------------------------------------------------------------------- the oracle


class CaseTimeout(BaseException):
    """Raised by the per-case alarm. A BaseException, so code under test cannot swallow it."""


@dataclass
class Outcome:
    """How one case ended."""

    kind: str
    signature: str = ""  # defects and passthroughs: what groups identical failures
    detail: str = ""


def _norm(text: str) -> str:
    """A message without its values, for grouping: digits, quoted text and (given: ...) go."""
    text = re.sub(r"\(given: .*?\)$", "(given: _)", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", text)
    text = re.sub(r"\[\d+\]", "[_]", text)
    return re.sub(r"\d+", "N", text)[:200]


def _where(e: BaseException) -> str:
    """The innermost frame in our package (else the innermost frame) of ``e``."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "elastic_compile" in f.filename]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    return f"{Path(frame.filename).name}:{frame.name}"


def _user_fragment_errors(spec: ElasticSpec) -> list[str]:
    """Errors of the user's pod_template.spec on its own, as a PodSpec (strict core schema).

    Fields the compiler owns are filled in first (the pytorch container's image), so that
    only what the user wrote is judged.
    """
    fragment = json.loads(json.dumps(plain(spec.pod_template.spec), default=str))
    containers = fragment.get("containers")
    if containers is None:
        fragment["containers"] = [{"name": "pytorch", "image": "x"}]
    elif isinstance(containers, list):
        for c in containers:
            if isinstance(c, dict) and c.get("name") == "pytorch":
                c.setdefault("image", "x")
    template = {"spec": fragment}
    if spec.pod_template.metadata.labels or spec.pod_template.metadata.annotations:
        template["metadata"] = spec.pod_template.metadata.model_dump(exclude_defaults=True)
    return crdcheck.pod_template_spec_errors(template)


def _passthrough(spec: ElasticSpec | None) -> bool:
    if spec is None or not spec.pod_template.spec:
        return False
    try:
        return bool(_user_fragment_errors(spec))
    except (ValueError, TypeError, RecursionError):
        return True  # not even JSON (a NaN, a cycle): certainly not a valid PodSpec


def _located(problems: Sequence[Any]) -> bool:
    return bool(problems) and all(
        isinstance(p.line, int)
        and p.line >= 1
        and isinstance(p.col, int)
        and p.col >= 1
        and isinstance(p.path, str)
        and p.path
        and isinstance(p.message, str)
        and p.message.strip()
        and "\n" not in str(p)
        for p in problems
    )


def _node_tree(node: Any, seen: dict[int, int] | None = None) -> Any:
    """A node tree as comparable data: tags, values, styles and start marks (aliases by number)."""
    seen = {} if seen is None else seen
    if id(node) in seen:
        return ("alias", seen[id(node)])
    seen[id(node)] = len(seen)
    mark = (node.start_mark.line, node.start_mark.column)
    if isinstance(node.value, str):
        style = node.style or None  # plain: libyaml's "", PyYAML's None
        return (node.tag, node.value, style, mark, (node.end_mark.line, node.end_mark.column))
    if node.value and isinstance(node.value[0], tuple):
        return (node.tag, mark, [(_node_tree(k, seen), _node_tree(v, seen)) for k, v in node.value])
    return (node.tag, mark, [_node_tree(item, seen) for item in node.value])


def _load_outcome(data: bytes) -> Any:
    try:
        loaded = load_text(data, "fuzz.yaml")
    except SpecError as e:
        return [str(p) for p in e.problems]
    except Exception as e:  # the compile below meets it again and classifies it
        return f"{type(e).__name__}: {e}"
    return _node_tree(loaded.root), repr(loaded.data)


def reference_yaml(docs: list[Any]) -> str:
    """What PyYAML's pure-Python emitter writes for ``docs`` (libyaml's must write the same)."""
    return to_yaml(docs, PurePythonDumper)


def _parsers_disagree(data: bytes) -> str:
    """How libyaml's load of ``data`` differs from the pure-Python parser's ('' when it does not)."""
    fast = _load_outcome(data)
    with pure_python():
        slow = _load_outcome(data)
    if fast == slow:
        return ""
    return f"libyaml: {str(fast)[:900]}\npure Python: {str(slow)[:900]}"


def classify(data: bytes, file: str = "fuzz.yaml") -> Outcome:
    """Compile ``data`` through the real pipeline and judge the result."""
    spec: ElasticSpec | None = None
    disagreement = _parsers_disagree(data)
    if disagreement:
        return Outcome(BACKEND_MISMATCH, "the parsers load the case differently", disagreement)
    try:
        compiled = compile_text(data, file, TARGETS)
        spec = compiled.spec
        text = stream_text([compiled], "yaml")
        # What a YAML 1.1 reader (kubectl's sigs.k8s.io/yaml, PyYAML) makes of our bytes.
        docs = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
        errors: list[str] = []
        if docs != [plain(o.doc) for o in compiled.outputs]:
            errors.append("emitted text reads back differently under YAML 1.1")
        reference = reference_yaml([o.doc for o in compiled.outputs])
        if text != reference:
            return Outcome(
                BACKEND_MISMATCH, "libyaml's emitter differs from PyYAML's", f"{text}\n---- PyYAML:\n{reference}"
            )
        for doc in docs:
            errors += crdcheck.check_manifest(doc)
        # The lints run on every accepted spec in the CLI: they must not crash, and each
        # must point at a line of the file.
        for found in lint.lint(compiled.spec, compiled.plan):
            if not _located([found.problem(compiled.loaded)]):
                errors.append(f"lint {found.code} at {found.path} is not located")
    except SpecError as e:
        if _located(e.problems):
            return Outcome(REJECTED, _norm(e.problems[0].message))
        bad = next(p for p in e.problems if not _located([p])) if e.problems else None
        return Outcome(UNLOCATED, f"{bad.path}: {_norm(bad.message)}" if bad else "no problems", str(e)[:500])
    except CompileError as e:
        if _passthrough(spec) or _passthrough_from_data(data):
            return Outcome(PASSTHROUGH, f"compile: {_norm(str(e))}", str(e)[:500])
        return Outcome(COMPILE_ERROR, _norm(str(e)), str(e)[:500])
    except Exception as e:  # RecursionError and MemoryError included; CaseTimeout is not
        if isinstance(e, RecursionError):  # where the stack ran out varies; the module does not
            sig = f"RecursionError in {_where(e).split(':')[0]}"
        else:
            sig = f"{type(e).__name__} at {_where(e)}: {_norm(str(e))[:80]}"
        return Outcome(UNCAUGHT, sig, "".join(traceback.format_exception(e))[-2000:])
    if errors:
        if _passthrough(spec):
            return Outcome(PASSTHROUGH, _norm(errors[0]), "\n".join(errors)[:500])
        return Outcome(INVALID_OUTPUT, _norm(errors[0]), "\n".join(errors)[:2000])
    return Outcome(ACCEPTED)


def _passthrough_from_data(data: bytes) -> bool:
    """A CompileError raised before the spec was returned: validate it again to decide."""
    from elastic_compile.schema.validate import validate

    try:
        return _passthrough(validate(load_text(data, "fuzz.yaml")))
    except Exception:
        return False


def run_case(case: Case, timeout: float | None) -> tuple[Outcome, float]:
    """Classify one case under an optional wall-clock alarm; returns the outcome and seconds taken."""
    start = time.perf_counter()
    if timeout is None:
        outcome = classify(case.data)
        return outcome, time.perf_counter() - start

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        outcome = classify(case.data)
    except CaseTimeout:
        outcome = Outcome(UNCAUGHT, f"timeout after {timeout:g} s", "the case did not finish")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return outcome, time.perf_counter() - start


# --------------------------------------------------------------------------- running and reporting


@dataclass
class Summary:
    """Counts, defect groups, timing; what --report writes."""

    seed: str
    cases: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # "class|signature" -> first case, count
    rejection_kinds: Counter[str] = field(default_factory=Counter)
    slow: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    max_case_seconds: float = 0.0
    generator_errors: list[str] = field(default_factory=list)

    @property
    def defects(self) -> int:
        return sum(self.counts[k] for k in DEFECTS)

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "cases": self.cases,
            "accepted": self.counts[ACCEPTED],
            "rejected": self.counts[REJECTED],
            "pod_template_passthrough": self.counts[PASSTHROUGH],
            "defects": {k: self.counts[k] for k in DEFECTS},
            "defect_total": self.defects,
            "distinct_rejection_messages": len(self.rejection_kinds),
            "seconds": round(self.seconds, 2),
            "cases_per_second": round(self.cases / self.seconds, 1) if self.seconds else None,
            "max_case_seconds": round(self.max_case_seconds, 3),
            "slow_cases": self.slow[:50],
            "generator_errors": self.generator_errors[:50],
            "groups": sorted(self.groups.values(), key=lambda g: (g["class"], -g["count"])),
        }

    def text(self) -> str:
        rate = self.cases / self.seconds if self.seconds else 0.0
        lines = [
            f"cases: {self.cases}",
            f"accepted: {self.counts[ACCEPTED]}",
            f"rejected: {self.counts[REJECTED]} ({len(self.rejection_kinds)} distinct messages)",
            f"pod_template passthrough (known gap, not a defect): {self.counts[PASSTHROUGH]}",
            "defects:",
            *(f"  {LABELS[k]}: {self.counts[k]}" for k in DEFECTS),
            f"cases per second: {rate:.1f} ({self.seconds:.1f} s; slowest case {self.max_case_seconds:.3f} s)",
        ]
        if self.slow:
            lines.append(f"cases over {SLOW_SECONDS:g} s: {len(self.slow)}")
        if self.generator_errors:
            lines.append(f"fuzzer errors (cases skipped): {len(self.generator_errors)}")
        for group in sorted(self.groups.values(), key=lambda g: (g["class"], -g["count"])):
            if group["class"] in DEFECTS or group["class"] == PASSTHROUGH:
                lines.append(f"  [{group['class']}] x{group['count']} case {group['first_case']}: {group['signature']}")
        return "\n".join(lines)


def run(
    cases: int,
    seed: int | str = 0,
    *,
    timeout: float | None = 10.0,
    save_failures: Path | None = None,
    progress: Callable[[Summary], None] | None = None,
    seeds: Sequence[Seed] | None = None,
) -> Summary:
    """Generate and classify ``cases`` cases; the work of the command line and of the sample test."""
    seeds = list(seeds) if seeds is not None else load_seeds()
    summary = Summary(seed=str(seed))
    start = time.perf_counter()
    for index in range(cases):
        try:
            case = make_case(seed, index, seeds)
        except Exception as e:  # a bug in the fuzzer, not in the compiler: count it and go on
            summary.generator_errors.append(f"case {index}: {type(e).__name__}: {e}")
            continue
        outcome, seconds = run_case(case, timeout)
        summary.cases += 1
        summary.counts[outcome.kind] += 1
        summary.max_case_seconds = max(summary.max_case_seconds, seconds)
        if seconds > SLOW_SECONDS:
            summary.slow.append({"case": index, "seconds": round(seconds, 3), "ops": list(case.ops)})
        if outcome.kind == REJECTED:
            summary.rejection_kinds[outcome.signature] += 1
        elif outcome.kind != ACCEPTED:
            _record(summary, case, outcome, save_failures)
        if progress is not None and index and index % 1000 == 0:
            summary.seconds = time.perf_counter() - start
            progress(summary)
    summary.seconds = time.perf_counter() - start
    return summary


def _record(summary: Summary, case: Case, outcome: Outcome, save_failures: Path | None) -> None:
    key = f"{outcome.kind}|{outcome.signature}"
    group = summary.groups.get(key)
    if group is None:
        group = summary.groups[key] = {
            "class": outcome.kind,
            "signature": outcome.signature,
            "count": 0,
            "first_case": case.index,
            "seed_file": case.seed,
            "ops": list(case.ops),
            "detail": outcome.detail[:1000],
        }
    group["count"] += 1
    if save_failures is not None and group["count"] <= 3:
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        folder = save_failures / outcome.kind
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"{digest}-{case.index}"
        stem.with_suffix(".yaml").write_bytes(case.data)
        meta = {"seed": summary.seed, "case": case.index, "ops": list(case.ops), "source": case.seed, **group}
        stem.with_suffix(".json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- minimizing


def minimize(data: bytes, keep: Callable[[bytes], bool]) -> bytes:
    """Shrink ``data`` while ``keep`` holds: drop line chunks (ddmin), then characters of each line."""
    lines = _lines(data)
    chunk = max(1, len(lines) // 2)
    while chunk >= 1:
        i, changed = 0, False
        while i < len(lines):
            trial = lines[:i] + lines[i + chunk :]
            if trial and keep(b"".join(trial)):
                lines, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    for n in range(len(lines)):
        line = lines[n]
        j = 0
        while j < len(line):
            for width in (16, 4, 1):
                trial_line = line[:j] + line[j + width :]
                candidate = b"".join([*lines[:n], trial_line, *lines[n + 1 :]])
                if j + width <= len(line) and keep(candidate):
                    line = trial_line
                    lines[n] = line
                    break
            else:
                j += 1
    return b"".join(lines)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fuzzer; exit 1 if any defect was found."""
    p = argparse.ArgumentParser(prog="fuzz_spec.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=1000, help="number of cases (default 1000)")
    p.add_argument("--seed", default="0", help="run seed: the same seed gives the same cases")
    p.add_argument("--report", nargs="?", const="-", metavar="FILE", help="write a JSON summary (to FILE or stdout)")
    p.add_argument("--save-failures", type=Path, metavar="DIR", help="write up to 3 inputs per defect group here")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before a case counts as a hang")
    p.add_argument("--show-case", type=int, metavar="N", help="print the bytes of case N and its classification")
    p.add_argument("--replay", type=Path, metavar="FILE", help="classify one file")
    p.add_argument("--minimize", type=Path, metavar="FILE", help="shrink FILE keeping its outcome signature")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ns = p.parse_args(argv)

    if ns.show_case is not None:
        case = make_case(ns.seed, ns.show_case, load_seeds())
        sys.stdout.buffer.write(case.data)
        outcome = classify(case.data)
        print(f"\n# ops: {' '.join(case.ops)}\n# {outcome.kind}: {outcome.signature}", file=sys.stderr)
        return 1 if outcome.kind in DEFECTS else 0
    if ns.replay is not None or ns.minimize is not None:
        path = ns.replay or ns.minimize
        data = path.read_bytes()
        outcome = classify(data, str(path))
        print(f"{outcome.kind}: {outcome.signature}\n{outcome.detail}", file=sys.stderr)
        if ns.minimize is not None:
            target = (outcome.kind, outcome.signature)

            def keep(candidate: bytes) -> bool:
                o = classify(candidate, str(path))
                return (o.kind, o.signature) == target

            sys.stdout.buffer.write(minimize(data, keep))
        return 1 if outcome.kind in DEFECTS else 0

    def progress(s: Summary) -> None:
        if not ns.quiet:
            rate = s.cases / s.seconds if s.seconds else 0.0
            print(
                f"[{s.cases}] accepted {s.counts[ACCEPTED]} rejected {s.counts[REJECTED]} "
                f"passthrough {s.counts[PASSTHROUGH]} defects {s.defects} ({rate:.0f}/s)",
                file=sys.stderr,
                flush=True,
            )

    summary = run(ns.cases, ns.seed, timeout=ns.timeout or None, save_failures=ns.save_failures, progress=progress)
    print(summary.text())
    if ns.report:
        text = json.dumps(summary.as_json(), indent=2, ensure_ascii=False) + "\n"
        if ns.report == "-":
            sys.stdout.write(text)
        else:
            Path(ns.report).write_text(text, encoding="utf-8")
    return 1 if summary.defects else 0


if __name__ == "__main__":
    sys.exit(main())
