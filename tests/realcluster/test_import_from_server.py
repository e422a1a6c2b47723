"""``import`` and ``doctor`` on the objects the API server gives back (its defaults filled in, its
metadata added, Trainer's webhook's ``runtimePatches[].time``), against the same on the file.

For each example and golden spec, for both generations where the compiler accepts them, the
compiled objects go through a server-side dry run (our TrainingRuntime for real); what the
server answers is what ``kubectl get -o yaml`` would show. ``import`` of it must give the same
spec as ``import`` of the compiled file, and ``doctor`` the same findings (by field and code:
the lines differ, the server's object being longer).

Documented exception: the PyTorchJob CRD defaults a container port's ``protocol`` to ``TCP``;
a port of a sidecar carried in ``pod_template`` keeps it (same meaning).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import Cluster, apply, compile_spec, documents, run_cli
from specs import SPECS, platform_runtimes, rel, trainjob_refusal

from elastic_compile.targets.trainjob.readback import JOB_DEFAULTS, JOBSET_DEFAULTS

CASES = [
    pytest.param(s, t, id=f"{rel(s)}-{t}")
    for s in SPECS
    for t in ("pytorchjob", "trainjob")
    if t != "trainjob" or trainjob_refusal(s) is None
]
#: The elastic TrainJob's runtime (issue 30): its JobSet failurePolicy and node job, as the server serves them.
ELASTIC_RUNTIME = Path(__file__).parents[1] / "golden" / "trainjob-elastic" / "elastic.yaml"


def _without_tcp(node: Any) -> Any:
    """The spec with each port's ``protocol: TCP`` (the CRD's default) left out."""
    if isinstance(node, dict):
        return {k: _without_tcp(v) for k, v in node.items() if not (k == "protocol" and v == "TCP")}
    if isinstance(node, list):
        return [_without_tcp(v) for v in node]
    return node


def _imported(path: Path) -> Any:
    status, out, err = run_cli(["import", str(path)])
    assert status == 0, err
    body = "".join(line for line in out.splitlines(keepends=True) if not line.startswith("# Imported from"))
    return body, _without_tcp(yaml.safe_load(body))


_LOCATION = re.compile(r"^[^:]+:[0-9]+:[0-9]+: ")


def _doctor(path: Path) -> tuple[int, list[str]]:
    status, out, _ = run_cli(["doctor", str(path)])
    return status, sorted(_LOCATION.sub("", line) for line in out.splitlines())


@pytest.mark.parametrize(("spec", "target"), CASES)
def test_import_and_doctor_read_the_server_object_as_the_file(
    cluster: Cluster, dry_namespace: str, tmp_path: Path, spec: Path, target: str
) -> None:
    docs = compile_spec(spec, target)
    for runtime in platform_runtimes(cluster, docs):
        apply(cluster, runtime, namespace=dry_namespace)
    served = []
    for doc in docs:
        doc["metadata"]["namespace"] = dry_namespace
        served.append(apply(cluster, doc, namespace=dry_namespace, dry_run=doc["kind"] != "TrainingRuntime").obj)
    assert any("managedFields" in s["metadata"] for s in served)  # really the server's objects
    file, server = tmp_path / "file.yaml", tmp_path / "server.yaml"
    # JSON documents: unambiguous under YAML 1.1 and 1.2 alike (PyYAML's dump leaves 1e-4 unquoted,
    # which the YAML 1.2 reader of import takes for a number), as kubectl's sigs.k8s.io/yaml quotes it.
    file.write_text("---\n".join(json.dumps(d) + "\n" for d in docs))
    server.write_text("---\n".join(json.dumps(d) + "\n" for d in served))
    assert documents(server.read_text())

    (file_text, file_spec), (server_text, server_spec) = _imported(file), _imported(server)
    assert server_spec == file_spec, f"{rel(spec)} -t {target}: import differs:\n{file_text}\n---\n{server_text}"
    assert _doctor(server) == _doctor(file)


def _added(written: Any, served: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """What the server added to ``written`` (each new key's path and value); a changed value fails."""
    if isinstance(written, dict) and isinstance(served, dict):
        added: dict[tuple[Any, ...], Any] = {}
        for key, value in served.items():
            if key in written:
                added.update(_added(written[key], value, (*path, key)))
            else:
                added[(*path, key)] = value
        return added
    if isinstance(written, list) and isinstance(served, list) and len(written) == len(served):
        pairs = enumerate(zip(written, served, strict=True))
        return {k: v for i, (w, s) in pairs for k, v in _added(w, s, (*path, i)).items()}
    assert written == served, f"{path}: written {written!r}, served {served!r}"
    return {}


def test_the_defaults_the_server_fills_in_our_runtime_are_the_ones_import_knows(
    cluster: Cluster, dry_namespace: str
) -> None:
    """The defaults import discounts when it recognises our runtime (readback.JOB_DEFAULTS,
    JOBSET_DEFAULTS) are exactly what the real server adds to the elastic runtime we compile."""
    runtime = next(d for d in compile_spec(ELASTIC_RUNTIME, "trainjob") if d["kind"] == "TrainingRuntime")
    runtime["metadata"]["namespace"] = dry_namespace
    served = apply(cluster, runtime, namespace=dry_namespace, dry_run=True).obj
    jobset: tuple[Any, ...] = ("spec", "template", "spec")
    (node,) = [i for i, j in enumerate(runtime["spec"]["template"]["spec"]["replicatedJobs"]) if j["name"] == "node"]
    known = {(*jobset, field, k): v for field, defaults in JOBSET_DEFAULTS.items() for k, v in defaults.items()}
    known |= {(*jobset, "replicatedJobs", node, k): v for k, v in JOB_DEFAULTS.items()}
    assert "failurePolicy" in runtime["spec"]["template"]["spec"]  # the elastic runtime's own, which the server fills
    assert _added(runtime["spec"], served["spec"], ("spec",)) == known
