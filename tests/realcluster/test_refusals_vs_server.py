"""What the compiler refuses, held against the real API server: issue 26's other half of the fuzz.

``test_server_fuzz.py`` sends the specs we accept, and the server must accept them all. This
test sends what we refuse. For every field of the spec whose value lands in a Kubernetes
object (``refusals.FIELDS``), a seeded generator makes values around a valid one; each is
compiled, and the objects the compiler made (or, for a value it refuses, would have made:
the output of a valid placeholder with the value put where the placeholder landed) go to the
server as strict dry runs (``fieldValidation=Strict``, admission webhooks included), for each
generation apart (``refusals.GENERATIONS``): the PyTorchJob, or the TrainJob with our
TrainingRuntime, each with the PodTemplate of its pod. The pod-value rules of
``schema/podvalues.py`` go too, one refused example each (``tests/cluster``'s table),
rendered with those checks off.

It fails when:

* a value we accept is refused by the server (a defect of ours, as in the fuzz);
* a value we refuse is accepted by the server and its rule is not in the list of deliberate
  strictness (docs/cluster.md, "Stricter than the API server"): relax the rule, or document
  why the value still fails on the cluster;
* a rule of that list is refused by the server for every value we sent it (the list must stay
  true), or is no rule of ours at all;
* a refusal's message is no rule of its field's (a new rule must be judged here), or a
  generator never reaches one of its field's rules.

Work is bounded by counts (the fields, ``refusals.PER_FIELD``), not by time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import refusals
from kube_helpers import ApplyError, Cluster, apply
from kubernetes.client.exceptions import ApiException
from specs import platform_runtimes

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.schema import compact

SEED = "refusals"


@dataclass(frozen=True)
class ServerVerdict:
    """The server's answer to a value's objects: refusals (kind: message) and warnings."""

    refused: tuple[str, ...]
    warnings: tuple[str, ...]


def dry_create(cluster: Cluster, doc: Mapping[str, Any], namespace: str) -> tuple[str | None, list[str]]:
    """POST ``doc`` as a dry run with strict field validation (the name goes in the body, so any
    name reaches validation); the refusal's message or None, and the warnings."""
    body = json.loads(json.dumps(doc))
    resource = cluster.dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    ns = None
    if resource.namespaced:
        ns = namespace
        body.setdefault("metadata", {})["namespace"] = ns
    method, url, headers, payload, _ = cluster.api.param_serialize(
        method="POST",
        resource_path=resource.path(namespace=ns),
        query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
        # JSON as YAML, in UTF-8 bytes: the client re-encodes a JSON body's dict with \\u escapes (see apply()).
        header_params={"Content-Type": "application/yaml", "Accept": "application/json"},
        body=json.dumps(body, ensure_ascii=False).encode("utf-8"),
        auth_settings=["BearerToken"],
    )
    resp = cluster.api.call_api(method, url, header_params=headers, body=payload)
    data = json.loads(resp.read() or b"{}")
    warnings = list(resp.headers.getlist("Warning"))
    if 200 <= resp.status < 300:
        return None, warnings
    return f"HTTP {resp.status}: {data.get('message', data)}", warnings


def judge(cluster: Cluster, docs: list[dict[str, Any]], namespace: str) -> ServerVerdict:
    """The server's verdict on the objects of one value. Our TrainingRuntime is applied for real (a
    TrainJob's webhook looks its runtime up), the rest dry-run."""
    refused: list[str] = []
    warnings: list[str] = []
    for doc in [*platform_runtimes(cluster, docs), *docs]:
        if doc["kind"] == "TrainingRuntime":
            try:
                said = apply(cluster, doc, namespace=namespace).warnings
                why = None
            except ApplyError as e:
                why, said = str(e), []
            except ApiException as e:  # a name the URL cannot carry
                why, said = f"HTTP {e.status}: {e.reason}", []
        else:
            why, said = dry_create(cluster, doc, namespace)
        warnings += said
        if why is not None:
            refused.append(f"{doc['kind']}: {why}")
    return ServerVerdict(tuple(refused), tuple(warnings))


@dataclass
class Tally:
    """What was sent for one rule: values the server accepted and refused."""

    accepted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


# Several minutes of dry runs at the machine's usual load; the bound is the count of values
# (fields x refusals.PER_FIELD plus the fixed ones), this timeout only a safety net.
@pytest.mark.timeout(900, func_only=True)
def test_each_refusal_against_the_server(cluster: Cluster, dry_namespace: str) -> None:
    documented = refusals.documented_strictness()
    assert len(documented) == len(set(documented)), "a rule twice in docs/cluster.md's list"
    tallies: dict[str, Tally] = defaultdict(Tally)
    defects: list[str] = []  # values we accept that the server refuses
    unnamed: list[str] = []  # refusals no rule of the field names
    unplaced: list[str] = []  # fields whose placeholder landed nowhere
    drift: list[str] = []  # accepted values whose output is not the placeholder's with the value
    sent = refused_sent = objects = 0
    skipped: list[str] = []  # fields a generation refuses even the placeholder of
    for spec_field in refusals.FIELDS:
        for generation in spec_field.generations:
            targets = refusals.GENERATIONS[generation]
            try:
                placed = refusals.compile_docs(spec_field.build(spec_field.placeholder), targets)
            except SpecError:
                skipped.append(f"{spec_field.id} ({generation})")
                continue
            if refusals.substitute(placed, spec_field.placeholder, spec_field.placeholder)[1] == 0:
                unplaced.append(spec_field.id)
                continue
            for value in refusals.values_of(spec_field, SEED):
                ours = refusals.verdict(spec_field, value, placed, targets)
                docs = ours.docs + spec_field.extra(value)
                server = judge(cluster, docs, dry_namespace)
                sent += 1
                objects += len(docs)
                where = f"{spec_field.id} = {_show(value)} ({generation})"
                if not ours.problems:
                    exact = refusals.substitute(placed, spec_field.placeholder, value)[0] == ours.docs
                    if spec_field.exact and not exact:
                        drift.append(where)
                    if server.refused:
                        defects.append(f"{where}: {'; '.join(server.refused)}")
                    continue
                refused_sent += 1
                hit, lines = refusals.rules_hit(spec_field, ours.problems)
                unnamed += [f"{where}: {line}" for line in lines]
                for rule in hit:
                    tally = tallies[rule]
                    if server.refused:
                        # Evidence against the rule's strictness only when no other rule refused the value.
                        if len(hit) == 1:
                            tally.refused.append(f"{where}: {server.refused[0]}")
                    else:
                        warned = f" (warned: {server.warnings[0]})" if server.warnings else ""
                        tally.accepted.append(where + warned)

    # The pod values: one refused example per rule of schema/podvalues.py.
    for case in sorted(refusals.pod_value_cases()):
        rule = f"pod:{case}"
        text = refusals.pod_value_text(case)
        try:
            refusals.compile_text_docs(text)
        except SpecError:
            pass
        else:
            pytest.fail(f"{rule}: the compiler accepts the row's refused example")
        with refusals.pod_values_unchecked():
            docs = refusals.compile_text_docs(text)
        server = judge(cluster, docs, dry_namespace)
        sent += 1
        objects += len(docs)
        refused_sent += 1
        tally = tallies[rule]
        if server.refused:
            tally.refused.append(f"{rule}: {server.refused[0]}")
        else:
            tally.accepted.append(rule)

    field_rules = {rule for f in refusals.FIELDS for rule in f.rules}
    pod_rules = {f"pod:{case}" for case in refusals.pod_value_cases()}
    unreached = sorted(set(refusals.RULES) - set(tallies))
    strict = {rule for rule, t in tallies.items() if t.accepted}
    undocumented = sorted(strict - set(documented))
    untrue = sorted(rule for rule in documented if rule in tallies and not tallies[rule].accepted)
    unknown = sorted(set(documented) - field_rules - pod_rules)
    print(f"\n{sent} values ({refused_sent} refused by us) in {objects} objects; per rule, server accepted/refused:")
    for rule in sorted(tallies):
        t = tallies[rule]
        mark = "documented" if rule in documented else ""
        print(f"  {rule}: {len(t.accepted)}/{len(t.refused)} {mark}")
        for example in t.accepted[:6]:
            print(f"      accepted: {example}")
    report = []
    if defects:
        report.append(f"{len(defects)} values we accept, refused by the server:\n  " + "\n  ".join(defects[:40]))
    if undocumented:
        said = [f"{r}: e.g. {tallies[r].accepted[0]}" for r in undocumented]
        report.append("refusals the server accepts, not in docs/cluster.md's list:\n  " + "\n  ".join(said))
    if untrue:
        said = [f"{r}: e.g. {tallies[r].refused[0] if tallies[r].refused else '(no value of its own)'}" for r in untrue]
        report.append("documented as stricter, but the server refuses them too:\n  " + "\n  ".join(said))
    if unknown:
        report.append(f"docs/cluster.md lists rules that are none of ours: {unknown}")
    if unnamed:
        report.append("refusals no rule of the field names:\n  " + "\n  ".join(unnamed[:40]))
    if unreached:
        report.append(f"rules no generated value reached: {unreached}")
    if skipped != _SKIPPED:
        report.append(f"fields a generation refuses the placeholder of: {skipped} (expected {_SKIPPED})")
    if unplaced or drift:
        report.append(f"placeholders landing nowhere: {unplaced}; outputs not the placeholder's: {drift[:10]}")
    assert not report, "\n".join(report)
    assert refused_sent >= len(refusals.FIELDS) * 5


def test_a_bare_fractional_quantity(cluster: Cluster, dry_namespace: str) -> None:
    """``cpu: 1.5`` unquoted, in each custom resource we emit: the compact schema refuses it where the
    CRD's int-or-string does, and takes it where a webhook decodes the object first (compact.WEBHOOK_DECODED:
    Trainer's mutating webhook on a TrainJob), which is what ``import`` and ``doctor`` follow."""
    placeholder = "777m"
    spec = refusals._spec(resources={"requests": {"cpu": placeholder}})
    docs = refusals.compile_docs(spec)
    docs += [
        json.loads(json.dumps(o.doc)) for o in compile_text(refusals.spec_text(spec), "s.yaml", "trainjob").outputs
    ]
    seen = []
    for doc in docs:
        if doc["kind"] not in ("PyTorchJob", "TrainJob"):
            continue
        bare, count = refusals.substitute(doc, placeholder, 1.5)
        assert count == 1, doc["kind"]
        why, _ = dry_create(cluster, bare, dry_namespace)
        decoded = (doc["apiVersion"], doc["kind"]) in compact.WEBHOOK_DECODED
        seen.append((doc["kind"], why is None))
        assert (why is None) == decoded, f"{doc['kind']}: {why or 'accepted'}"
    assert sorted(seen) == [("PyTorchJob", False), ("TrainJob", True)]


#: The fields whose placeholder one generation refuses outright: a TrainJob takes no run_policy
#: TTL (docs/trainer-v2.md, Checks: ttl) and has no gang scheduling timeout.
_SKIPPED = ["run_policy.ttl_seconds_after_finished (v2)", "run_policy.scheduling.schedule_timeout_seconds (v2)"]
