"""``--explain``: the resolved spec, one line per value, with where each value came from.

It is built from the same ``Compiled`` result the real output comes from, so it can never
describe a different job than the one emitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from yaml.nodes import ScalarNode

from elastic_compile import contract
from elastic_compile.compiler.pipeline import Compiled
from elastic_compile.core.errors import printable
from elastic_compile.core.loader import Loaded, dotted
from elastic_compile.schema.models import NNodes
from elastic_compile.targets import accelerator
from elastic_compile.targets.launcher import GRACE_MARGIN_SECONDS, command_comment
from elastic_compile.targets.pod import HOST_NETWORK_DNS, SCRATCH_VOLUME, host_network_dns, needs_scratch, sidecar_names


def _default_note(description: str | None) -> str:
    """'default' plus the reason given in a field description ('Default 900, not ...')."""
    index = (description or "").find("Default")
    if index < 0:
        return "default"
    rest = (description or "")[index + len("Default") :]
    return "default" + (":" + rest[1:] if rest.startswith(":") else rest)


def _value(value: Any) -> str:
    if isinstance(value, NNodes):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=_model_json)


def _model_json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"cannot show {type(value).__name__}")


# Fields shown only when set: they change nothing in the output.
_ONLY_WHEN_SET = {"schema_", "extends"}

# Fields of the training operator v1 that a TrainJob does not carry (targets/trainjob/plan.py makes a
# value written for them an error): under a TrainJob their defaults say what the TrainJob does instead.


def _lines(model: BaseModel, prefix: tuple[str, ...], compiled: Compiled) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = field.alias or name
        path = (*prefix, key)
        if name in _ONLY_WHEN_SET and value is None:
            continue
        if isinstance(value, BaseModel) and not isinstance(value, NNodes):
            loaded = compiled.loaded
            found = loaded.source(path) if loaded is not None else None
            if loaded is not None and found is not None and isinstance(found[1], ScalarNode):
                # Written in its short form (accelerator: nvidia-l4, function: "pkg.mod:fn"): one row, there.
                rows += _written(loaded, path, value, "")
            else:
                rows += _lines(value, path, compiled)
            continue
        if compiled.loaded is not None and compiled.loaded.source(path) is not None:
            rows += _written(compiled.loaded, path, value, "")
            continue
        source = compiled.spec.derived_note(".".join(path)) or _default_note(field.description)
        rows.append((".".join(path), _value(value), source))
    return rows


def _written(loaded: Loaded, path: tuple[str | int, ...], value: Any, parent: str) -> list[tuple[str, str, str]]:
    """Rows for a value written in the spec or a base: one, or one per entry when several files wrote it.

    A mapping or list that ``extends:`` merged from several files is shown entry by entry
    (``env.NCCL_DEBUG``, ``pod_template.spec.containers[0].image``), each with its own file.
    """
    found = loaded.source(path)
    if found is None:  # an entry the schema renamed (ephemeral_storage): where its mapping is
        return [(dotted(path), _value(value), parent)]
    file, node = found
    where = f"{file}:{node.start_mark.line + 1}"
    if id(node) in loaded.merged:
        data = _model_json(value) if isinstance(value, BaseModel) else value
        data = [_model_json(v) if isinstance(v, BaseModel) else v for v in data] if isinstance(data, list) else data
        if isinstance(data, dict):
            return [row for key, item in data.items() for row in _written(loaded, (*path, key), item, where)]
        if isinstance(data, list):
            return [row for i, item in enumerate(data) for row in _written(loaded, (*path, i), item, where)]
    return [(dotted(path), _value(value), where)]


def _unused(path: str, unused: Sequence[Mapping[str, str]]) -> str | None:
    """Why ``path`` (or a section above it) reaches no output, when every target says so; else None."""
    whys = [next((why for key, why in settings.items() if path == key or path.startswith(key + ".")), None)
            for settings in unused]  # fmt: skip
    return whys[0] if whys and all(w is not None for w in whys) else None


def _applied(
    row: tuple[str, str, str],
    applied: Mapping[str, Mapping[str, tuple[Any, str]]],
    unused: Mapping[str, Mapping[str, str]],
) -> tuple[str, str, str]:
    """A default row as the targets' output applies it (:meth:`Target.default_settings`).

    When every other target of the compile leaves the setting out, the target's value and reason
    replace the row; beside a target that takes the spec's default, each reason is added to it.
    """
    path, value, source = row
    if not source.startswith("default"):
        return row
    found = {name: settings[path] for name, settings in applied.items() if path in settings}
    if not found:
        return row
    others = [name for name in applied if name not in found and _unused(path, [unused[name]]) is None]
    if not others and len(found) == 1:
        ((shown, why),) = found.values()
        return path, _value(shown), why
    return path, value, source + "".join(f"; under -t {name}: {why}" for name, (_v, why) in found.items())


def _written_here(source: str) -> bool:
    """Whether an explain row's value was written in a spec (a file:line), not a default or derived."""
    return not source.startswith(("default", "derived"))


def explain(compiled: Compiled) -> str:
    """The --explain text for one compiled spec."""
    rows = _lines(compiled.spec, (), compiled)
    # A setting no output of this compile carries (each target says which of its own): shown as
    # null with what the engine does instead, unless the spec wrote it.
    chosen = {o.target.name: o.target for o in compiled.outputs}.values()
    unused = [t.unused_settings for t in chosen]
    if unused:
        rows = [(path, "null", why) if (why := _unused(path, unused)) is not None and not _written_here(source)
                else (path, value, source) for path, value, source in rows]  # fmt: skip
    applied = {t.name: t.default_settings(compiled.spec) for t in chosen}
    rows = [_applied(row, applied, {t.name: t.unused_settings for t in chosen}) for row in rows]
    width = min(max(len(f"{p}: {v}") for p, v, _ in rows), 60)
    origin = compiled.loaded.file if compiled.loaded else "<python>"
    if compiled.loaded is not None and len(compiled.loaded.chain) > 1:
        origin += ", extending " + ", ".join(compiled.loaded.chain[1:])
    out = [f"# {compiled.spec.name}: every setting, resolved from {origin}\n"]
    for path, value, source in rows:
        out.append(f"{f'{path}: {value}':<{width}}  # {source}\n")
    placed = accelerator.describe(compiled.spec)
    if placed is not None and any(o.target.places_accelerator for o in compiled.outputs):
        out.append(placed)
    for output in compiled.outputs:
        lines = output.target.explain(output.document, compiled.spec)
        if lines is not None:
            out.extend(lines)
            return _printable(out)
    plan = compiled.plan
    layout = (
        f"{plan.replicas} Worker pod(s), elasticPolicy {json.dumps(plan.elastic_policy)}"
        if plan.elastic_policy
        else "1 Worker pod, no elasticPolicy: rendezvous on localhost"
    )
    out.append(f"# layout: {layout}; nprocPerNode {plan.nproc_per_node}; restartPolicy {plan.restart_policy}\n")
    if plan.restart_policy == "ExitCode":
        out.append(
            "# restartPolicy ExitCode: exit 1-127 fails the job; 128 or more deletes and recreates the pod, without "
            "limit (backoffLimit counts in-place restarts only; active_deadline_seconds bounds the job)\n"
        )
    out.append(
        f"# terminationGracePeriodSeconds: shutdown_timeout + {GRACE_MARGIN_SECONDS} unless the pod template sets it\n"
    )
    training = plan.pod_template["spec"]["containers"][0]
    out.append(command_comment(training["command"], training["args"]))
    if host_network_dns(compiled.spec):
        out.append(
            f"# dnsPolicy: {HOST_NETWORK_DNS}: with hostNetwork, ClusterFirst would give the pod the node's DNS, where "
            f"{compiled.spec.name}-worker-0 (the rendezvous) does not resolve\n"
        )
    if needs_scratch(compiled.spec):
        out.append(
            f"# {contract.SCRATCH_MOUNT}: an emptyDir ({SCRATCH_VOLUME}): readOnlyRootFilesystem leaves the image's "
            f"{contract.SCRATCH_MOUNT} read-only, and elastic-launch and Python's tempfile need a writable one\n"
        )
    for name in sidecar_names(compiled.spec):
        out.append(
            f"# sidecar {name}: a native sidecar (initContainers, restartPolicy: Always; Kubernetes >= 1.29): as a "
            "regular container it would keep the pod Running after training ends, and the job would never complete\n"
        )
    return _printable(out)


def _printable(out: list[str]) -> str:
    # JSON escapes C0 controls but leaves bidi controls, C1 (CSI) and invisible characters raw.
    return "".join(printable(line[:-1]) + "\n" for line in out)
