"""What the kubelet does with a container spec, for every engine: env resolution and ``$(VAR)``.

A pod's environment is its env list in order: each literal value is expanded against the
entries before it, downward-API references are resolved from the pod's facts, and
references that need the cluster (Secrets, ConfigMaps) come from a lookup or are left
out. Command and args are then expanded against the whole environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LOCAL_IP = "127.0.0.1"


@dataclass(frozen=True)
class Pod:
    """One pod as its engine would create it."""

    name: str
    replica_type: str
    index: int
    image: str
    argv: tuple[str, ...]
    env: dict[str, str]
    restart_policy: str
    labels: dict[str, str]
    unresolved: tuple[str, ...] = field(default=())  # env entries that need a cluster (secrets, ...)
    looked_up: tuple[str, ...] = field(default=())  # such entries whose value came from ``lookup``
    mounts: tuple[ConfigMapMount, ...] = field(default=())  # the container's ConfigMap volumes


@dataclass(frozen=True)
class ConfigMapMount:
    """A ConfigMap volume the container mounts: where, which ConfigMap, and which keys at which paths."""

    volume: str
    mount_path: str
    config_map: str
    items: tuple[tuple[str, str], ...] | None  # (key, path); None: every key at its own name
    optional: bool


def config_map_mounts(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[ConfigMapMount, ...]:
    """The ConfigMap volumes ``container`` mounts whole (a ``subPath`` mount is left out: run does not mount it)."""
    volumes = {
        v.get("name"): v["configMap"]
        for v in pod_spec.get("volumes") or []
        if isinstance(v, Mapping) and isinstance(v.get("configMap"), Mapping)
    }
    out: list[ConfigMapMount] = []
    for mount in container.get("volumeMounts") or []:
        source = volumes.get(mount.get("name")) if isinstance(mount, Mapping) else None
        if source is None or mount.get("subPath") or mount.get("subPathExpr"):
            continue
        items = source.get("items")
        out.append(
            ConfigMapMount(
                volume=str(mount["name"]),
                mount_path=str(mount.get("mountPath", "")),
                config_map=str(source.get("name", "")),
                items=None if items is None else tuple((str(i.get("key")), str(i.get("path"))) for i in items),
                optional=bool(source.get("optional")),
            )
        )
    return tuple(out)


def expand(text: str, mapping: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion).

    The kubelet applies it to env values (with the variables defined before them) and to
    command and args (with the container's whole env). ``$$`` is a literal ``$``; an unknown
    or unclosed reference is kept as written.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(" and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            name = text[i + 2 : end]
            out.append(mapping.get(name, f"$({name})"))
            i = end + 1
        else:  # "$x" or an unclosed "$(": both kept, scanning resumes after the second character
            out.append(text[i : i + 2])
            i += 2
    return "".join(out)


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(path: str, pod: Mapping[str, Any]) -> str | None:
    direct = {
        "metadata.name": pod["name"],
        "metadata.namespace": pod["namespace"],
        "status.podIP": pod["ip"],
        "status.hostIP": pod["ip"],
        "spec.nodeName": "localhost",
        "spec.serviceAccountName": pod.get("serviceAccountName", "default"),
    }
    if path in direct:
        return str(direct[path])
    match = _LABEL_REF.match(path)
    if match:
        # A missing label or annotation resolves to "" in Kubernetes.
        return str(pod[match.group(1)].get(match.group(2), ""))
    return None


def resolve_env(
    entries: Iterable[Mapping[str, Any]], facts: Mapping[str, Any], lookup: Mapping[str, str] | None
) -> tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]:
    """The environment of ``entries`` in order, with what was left out and what came from ``lookup``.

    A repeated name takes the later entry. A value is expanded against the entries before
    it; no value at all is "". ``facts`` are the pod's downward-API fields (name,
    namespace, ip, labels, annotations, serviceAccountName).
    """
    env: dict[str, str] = {}
    unresolved: list[str] = []
    looked_up: list[str] = []
    for var in entries:
        var_name = str(var["name"])
        if "valueFrom" not in var:
            env[var_name] = expand(str(var.get("value", "")), env)
            continue
        ref = (var.get("valueFrom") or {}).get("fieldRef")
        value = field_ref(ref["fieldPath"], facts) if ref else None
        if value is None and lookup is not None and var_name in lookup:
            value = lookup[var_name]
            looked_up.append(var_name)
        if value is None:
            unresolved.append(var_name)
        else:
            env[var_name] = value
    return env, tuple(unresolved), tuple(looked_up)
