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

#: Known, not yet fixed (found when issue 30's elastic TrainJobs met these tests): import does not
#: recognise our elastic runtime once the server has filled in its defaults, and refuses the
#: TrainJob ("cannot import: trainjob.runtime"). Strict: the day it passes, this list must go.
ELASTIC_RUNTIME_NOT_RECOGNISED = {
    "tests/golden/elastic-range/elastic.yaml",
    "tests/golden/trainjob-elastic/elastic.yaml",
}
CASES = [
    pytest.param(s, t, marks=pytest.mark.xfail(strict=True, reason="import of our elastic runtime as served"))
    if t == "trainjob" and rel(s) in ELASTIC_RUNTIME_NOT_RECOGNISED
    else pytest.param(s, t)
    for s in SPECS
    for t in ("pytorchjob", "trainjob")
    if t != "trainjob" or trainjob_refusal(s) is None
]


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


@pytest.mark.parametrize(("spec", "target"), CASES, ids=[f"{rel(c.values[0])}-{c.values[1]}" for c in CASES])
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
