"""``-t trainjob``: the spec's default target, ``-t all``, document order, and Trainer v2.3's rules.

The goldens (tests/golden/*/trainjob.yaml) pin the output and pass the strict CRD check;
the error catalogue (tests/errors/trainjob-*) pins what v2 cannot carry. Here: the choices
around them, and the re-implemented webhooks (targets/trainjob/checks.py) proven on
documents that break each rule, so that none of those checks can pass everything.
"""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile import contract, targets
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.schema.models import TargetName
from elastic_compile.targets.trainjob import api
from elastic_compile.targets.trainjob.checks import manifest_errors, runtime_errors, runtime_jobs, trainjob_errors

GOLDEN = Path(__file__).parent / "golden"
Checker = Callable[[Mapping[str, Any]], list[str]]

SPEC = """\
name: train
image: ghcr.io/example/trainer:1.0
command: [python, train.py]
nnodes: 2
"""
SIDECAR = """\
pod_template:
  spec:
    containers:
    - {name: proxy, image: "envoyproxy/envoy:v1.30"}
"""


def _kinds(text: str, targets_: tuple[str, ...] | None = None) -> list[str]:
    return [o.doc["kind"] for o in compile_text(text, targets=targets_).outputs]


def test_target_names_are_the_builtin_targets() -> None:
    """The spec's closed set of targets is exactly the built-in ones -t offers (plus all, which only -t takes).

    A target registered from outside the package is reached with -t only: the spec's
    ``target`` stays a closed set, so that editors offer it and a typo fails.
    """
    assert set(typing.get_args(TargetName)) == set(targets.BUILTIN)
    assert set(targets.BUILTIN) <= set(targets.names())


def test_the_spec_names_its_default_target() -> None:
    assert _kinds(SPEC) == ["PyTorchJob"]
    assert _kinds("target: trainjob\n" + SPEC) == ["TrainJob"]
    # -t beats the spec's choice.
    assert _kinds("target: trainjob\n" + SPEC, ("pytorchjob",)) == ["PyTorchJob"]


def test_plain_cli_gives_a_trainjob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "elastic.yaml"
    spec.write_text("target: trainjob\n" + SPEC, encoding="utf-8")
    assert main([str(spec)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["TrainJob"]


def test_all_gives_one_job_per_spec() -> None:
    """-t all: the job of the spec's generation, never a PyTorchJob and a TrainJob that would train twice."""
    assert "TrainJob" not in _kinds(SPEC, ("all",))
    assert "PyTorchJob" in _kinds(SPEC, ("all",))
    v2 = _kinds("target: trainjob\n" + SPEC, ("all",))
    assert "TrainJob" in v2 and "PyTorchJob" not in v2 and "PodTemplate" in v2
    # An elastic v1 spec never fails -t all over what Trainer v2 cannot carry.
    assert "PyTorchJob" in _kinds(SPEC.replace("nnodes: 2", "nnodes: 1:4"), ("all",))


def test_our_runtime_comes_first_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TrainJob webhook refuses a TrainJob whose runtime does not exist yet."""
    monkeypatch.chdir(tmp_path)  # -o writes only below the working directory
    text = "target: trainjob\n" + SPEC + SIDECAR
    assert _kinds(text) == ["TrainingRuntime", "TrainJob"]
    spec = tmp_path / "elastic.yaml"
    spec.write_text(text, encoding="utf-8")
    assert main([str(spec), "-o", str(tmp_path / "base")]) == 0
    kustomization = yaml.safe_load((tmp_path / "base" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["resources"] == ["trainingruntime.yaml", "trainjob.yaml"]
    # kubectl apply -f DIR goes by file name: the runtime sorts first there too.
    assert sorted(kustomization["resources"]) == kustomization["resources"]


def test_no_v1_lint_on_a_trainjob(capsys: pytest.CaptureFixture[str]) -> None:
    """EC110 (the operator's backoffLimit misses ExitCode recreations) is about v1 only."""
    from elastic_compile.compiler import lint

    text = SPEC + "run_policy: {backoff_limit: 2}\n"
    assert lint.report([compile_text(text)], [], strict=True)
    assert "EC110" in capsys.readouterr().err
    assert not lint.report([compile_text("target: trainjob\n" + text)], [], strict=True)
    assert capsys.readouterr().err == ""


def test_runtime_patches_never_carry_env_or_time() -> None:
    job = compile_text("target: trainjob\n" + SPEC + "env: {A: b}\n").outputs[0].doc
    (patch,) = job["spec"]["runtimePatches"]
    assert set(patch) == {"manager", "trainingRuntimeSpec"}
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (node,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    assert node["name"] == api.NODE and "env" not in node
    assert {"name": "A", "value": "b"} in job["spec"]["trainer"]["env"]
    # elastic-launch reads the PET_* variables itself (contract.OPT_RDZV_AT_MASTER): no $(VAR) anywhere.
    assert contract.OPT_RDZV_AT_MASTER in job["spec"]["trainer"]["args"]
    assert "$(" not in json.dumps(job["spec"]["trainer"])


def test_golden_trainjobs_pass_the_webhooks_against_their_runtime() -> None:
    """Each pinned TrainJob against the runtime it references: ours, or the stock one (api.STOCK_JOBS)."""
    cases = sorted(p.parent.name for p in GOLDEN.glob("*/trainjob.yaml"))
    assert len(cases) >= 8
    for case in cases:
        docs = list(yaml.safe_load_all((GOLDEN / case / "trainjob.yaml").read_text(encoding="utf-8")))
        job, runtime = docs[-1], (docs[0] if len(docs) == 2 else None)
        assert manifest_errors(job, runtime) == [], case
        if runtime is not None:
            assert runtime_errors(runtime) == [], case


def test_stock_runtime_facts(crds_dir: Path, check_manifest: Checker) -> None:
    """api.STOCK_JOBS is what upstream's torch-distributed runtime holds."""
    stock = yaml.safe_load((crds_dir / "torch_distributed_runtime_v2.3.0.yaml").read_text(encoding="utf-8"))
    assert runtime_jobs(stock) == api.STOCK_JOBS
    assert stock["metadata"]["name"] == api.STOCK_RUNTIME
    assert check_manifest(stock) == []


# --------------------------------------------------------------------------- the webhooks, rule by rule


def _golden(case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    runtime, job = yaml.safe_load_all((GOLDEN / case / "trainjob.yaml").read_text(encoding="utf-8"))
    return runtime, job


def _node_patch(job: dict[str, Any]) -> dict[str, Any]:
    rjob = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    return typing.cast(dict[str, Any], rjob["template"]["spec"]["template"]["spec"])


JOB_BREAKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "reserved env": (
        lambda j: j["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "2"}),
        "PET_NNODES is reserved",
    ),
    "env reference": (
        lambda j: j["spec"]["trainer"]["env"].append({"name": "X", "value": "$(PET_MASTER_ADDR)"}),
        "does not expand in env",
    ),
    "manager without domain": (lambda j: j["spec"]["runtimePatches"][0].update(manager="compiler"), "domain-prefixed"),
    "manager twice": (
        lambda j: j["spec"]["runtimePatches"].append(copy.deepcopy(j["spec"]["runtimePatches"][0])),
        "patches twice",
    ),
    "unknown job": (
        lambda j: j["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0].update(
            name="trainer"
        ),
        "no replicated job trainer",
    ),
    "new container": (lambda j: _node_patch(j)["containers"].append({"name": "extra"}), "cannot add containers"),
    "env on node": (lambda j: _node_patch(j)["containers"][0].update(env=[{"name": "A", "value": "b"}]), "env patches"),
    "no trainer": (lambda j: j["spec"].pop("trainer"), "no PET_* variables"),
    "nproc keyword": (lambda j: j["spec"]["trainer"].update(numProcPerNode="auto"), "numProcPerNode"),
    "zero nodes": (lambda j: j["spec"]["trainer"].update(numNodes=0), "numNodes"),
    "long name": (lambda j: j["metadata"].update(name="x" * 49), "at most 48 characters"),
    "deadline": (lambda j: j["spec"].update(activeDeadlineSeconds=0), "activeDeadlineSeconds"),
    "runtime kind": (lambda j: j["spec"]["runtimeRef"].update(kind="JobSet"), "unsupported runtime"),
}


@pytest.mark.parametrize("case", sorted(JOB_BREAKS))
def test_trainjob_webhook_rule(case: str) -> None:
    runtime, job = _golden("trainjob-sidecar-runtime")
    assert manifest_errors(job, runtime) == []
    break_it, expected = JOB_BREAKS[case]
    break_it(job)
    errors = manifest_errors(job, runtime)
    assert any(expected in e for e in errors), errors


def _trainer_job(r: dict[str, Any]) -> dict[str, Any]:
    return typing.cast(dict[str, Any], r["spec"]["template"]["spec"]["replicatedJobs"][0])


RUNTIME_BREAKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "two replicas": (lambda r: _trainer_job(r).update(replicas=2), "must be 1"),
    "no node container": (
        lambda r: _trainer_job(r)["template"]["spec"]["template"]["spec"]["containers"][0].update(name="trainer"),
        "needs a container named node",
    ),
    "regular sidecar": (
        lambda r: _trainer_job(r)["template"]["spec"]["template"]["spec"]["containers"].append(
            {"name": "proxy", "image": "envoy"}
        ),
        "native sidecar",
    ),
    "ttl": (lambda r: r["spec"]["template"]["spec"].update(ttlSecondsAfterFinished=60), "#3779"),
    "subdomain": (lambda r: r["spec"]["template"]["spec"].update(network={"subdomain": "x"}), "subdomain"),
    "no framework label": (lambda r: r["metadata"].pop("labels"), api.LABEL_FRAMEWORK),
    "two frameworks": (lambda r: r["spec"]["mlPolicy"].update(mpi={}), "at most one of"),
    "inject into node": (
        lambda r: r["spec"]["mlPolicy"]["torch"].update(
            envInjection={"targets": [{"jobName": "node", "containerNames": ["node"]}]}
        ),
        "no injectable container node",
    ),
}


@pytest.mark.parametrize("case", sorted(RUNTIME_BREAKS))
def test_runtime_webhook_rule(case: str) -> None:
    runtime, _job = _golden("trainjob-sidecar-runtime")
    assert runtime_errors(runtime) == []
    break_it, expected = RUNTIME_BREAKS[case]
    break_it(runtime)
    errors = runtime_errors(runtime)
    assert any(expected in e for e in errors), errors


def test_stock_reference_is_checked_without_a_runtime_document() -> None:
    """A TrainJob on torch-distributed may patch only job node and container node."""
    job = compile_text("target: trainjob\n" + SPEC).outputs[0].doc
    assert trainjob_errors(job, dict(api.STOCK_JOBS)) == []
    _node_patch(job)["containers"][0]["name"] = "trainer"  # upstream's docs example, wrong for the stock runtime
    assert any("no container trainer in job node" in e for e in manifest_errors(job))


# ------------------------------------------------------------------------- elastic TrainJobs (issue 30)

ELASTIC = SPEC.replace("nnodes: 2", 'nnodes: "2:4"')


def _docs(text: str) -> dict[str, dict[str, Any]]:
    return {o.doc["kind"]: o.doc for o in compile_text("target: trainjob\n" + text).outputs}


def test_an_elastic_range_gives_max_pods_min_to_the_launcher_and_our_runtime() -> None:
    docs = _docs(ELASTIC)
    job, runtime = docs["TrainJob"], docs["TrainingRuntime"]
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 4 and runtime["spec"]["mlPolicy"]["numNodes"] == 4
    args = trainer["args"]
    assert args[args.index(contract.OPT_MIN_NODES) + 1] == "2" and contract.OPT_RDZV_AT_MASTER in args
    assert job["spec"]["runtimeRef"] == {"apiGroup": api.GROUP, "kind": api.TRAINING_RUNTIME, "name": "train"}
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == api.ELASTIC_FAILURE_POLICY
    node_job = jobset["replicatedJobs"][0]["template"]["spec"]
    assert node_job["successPolicy"] == api.ELASTIC_SUCCESS_POLICY
    assert node_job["podReplacementPolicy"] == api.ELASTIC_POD_REPLACEMENT
    assert node_job["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "backoffLimit" not in node_job, "Kubernetes' default unless run_policy.backoff_limit"
    assert manifest_errors(job, runtime) == [] and manifest_errors(runtime) == []
    # A fixed count keeps the stock runtime and no --min-nodes.
    fixed = _docs(SPEC)
    assert "TrainingRuntime" not in fixed and contract.OPT_MIN_NODES not in fixed["TrainJob"]["spec"]["trainer"]["args"]


def test_an_elastic_range_keeps_the_users_restart_policy_and_backoff_limit() -> None:
    docs = _docs(ELASTIC + "restart_policy: Never\nrun_policy: {backoff_limit: 12}\n")
    node_job = docs["TrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert node_job["backoffLimit"] == 12 and node_job["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    ("extra", "where", "says"),
    [
        ("trainjob: {own_runtime: never}\n", ": nnodes: an elastic range", "give a fixed count such as 4"),
        ("trainjob: {runtime: mine}\n", ": trainjob.runtime: an elastic range", "instead of the runtime named here"),
    ],
)
def test_an_elastic_range_without_our_runtime_is_a_located_error(extra: str, where: str, says: str) -> None:
    from elastic_compile.core.errors import SpecError

    with pytest.raises(SpecError) as raised:
        compile_text("target: trainjob\n" + ELASTIC + extra)
    text = str(raised.value)
    assert where in text and says in text, text


@pytest.mark.parametrize("launcher", ["elastic-launch", "torchrun"])
def test_an_elastic_range_back_through_import(launcher: str) -> None:
    """torchrun gets --nnodes MIN:$(PET_NNODES) (the command line beats PET_NNODES); import reads either back."""
    from elastic_compile.compiler.importer import import_stream

    docs = _docs(ELASTIC + f"launcher: {launcher}\n")
    args = docs["TrainJob"]["spec"]["trainer"]["args"]
    if launcher == "torchrun":
        assert args[args.index("--nnodes") + 1] == "2:$(PET_NNODES)"
    (imported,) = import_stream(yaml.safe_dump_all([docs["TrainingRuntime"], docs["TrainJob"]]), "job.yaml")
    assert str(imported.spec.nnodes) == "2:4"
    assert imported.spec.trainjob.runtime == api.STOCK_RUNTIME, "our runtime's policies are the range's"
    assert not imported.notes, [p.message for p in imported.notes]
    assert _docs(imported.text.replace("target: trainjob\n", "")) == docs, "compiles to the same job"


def test_import_recognises_our_elastic_runtime_with_the_defaults_the_server_fills() -> None:
    """As the API server serves it (tests/realcluster/test_import_from_server.py holds these defaults against
    the real one): JobSet's CRD fills failurePolicy.restartStrategy and the replicated job's groupName."""
    from elastic_compile.compiler.importer import import_stream
    from elastic_compile.targets.trainjob.readback import JOB_DEFAULTS, JOBSET_DEFAULTS

    docs = _docs(ELASTIC)
    served = copy.deepcopy(docs["TrainingRuntime"])
    jobset = served["spec"]["template"]["spec"]
    for field, defaults in JOBSET_DEFAULTS.items():
        jobset[field] = {**jobset[field], **defaults}
    jobset["replicatedJobs"][0].update(JOB_DEFAULTS)
    (imported,) = import_stream(yaml.safe_dump_all([served, docs["TrainJob"]]), "job.yaml")
    assert str(imported.spec.nnodes) == "2:4" and imported.spec.trainjob.runtime == api.STOCK_RUNTIME
    assert not imported.notes, [p.message for p in imported.notes]
    assert _docs(imported.text.replace("target: trainjob\n", "")) == docs, "compiles to the same job"


def test_import_of_an_elastic_trainjob_without_its_runtime_says_how_to_finish() -> None:
    """The runtime that holds the range's policies is not in the input: one located line that says what to give,
    or which spec to write; the spec it names compiles to the same job (the advice does not loop)."""
    from elastic_compile.compiler.importer import import_stream
    from elastic_compile.core.errors import SpecError

    docs = _docs(ELASTIC)
    with pytest.raises(SpecError) as raised:
        import_stream(yaml.safe_dump(docs["TrainJob"]), "job.yaml")
    (problem,) = raised.value.problems
    assert problem.path == "spec.runtimeRef.name"
    assert "the TrainingRuntime train that holds its Job and JobSet policies is not in the input" in problem.message
    assert "`kubectl get trainingruntime train -o yaml`" in problem.message
    assert 'a spec with nnodes: "2:4" and no trainjob.runtime emits it again' in problem.message
    # The input it asks for imports, to the spec it names: the range, no trainjob.runtime, the same job back.
    (imported,) = import_stream(yaml.safe_dump_all([docs["TrainingRuntime"], docs["TrainJob"]]), "job.yaml")
    assert str(imported.spec.nnodes) == "2:4" and "runtime" not in imported.spec.trainjob.model_fields_set
    assert _docs(imported.text.replace("target: trainjob\n", "")) == docs


ETCD = SPEC + "rdzv: {backend: etcd}\n"


@pytest.mark.parametrize(
    ("head", "chosen", "says"),
    [
        ("target: trainjob\n", None, ["rdzv.backend: Trainer v2 points every pod at node 0"]),
        ("", ("trainjob",), ["rdzv.backend: Trainer v2 points every pod at node 0"]),
        ("target: trainjob\n", ("all",), ["rdzv.backend: Trainer v2 points every pod at node 0"]),
        ("", None, ["rdzv.backend: the etcd backend needs rdzv.host"]),
        ("", ("all",), ["rdzv.backend: the etcd backend needs rdzv.host"]),
        ("target: trainjob\n", ("pytorchjob",), ["rdzv.backend: the etcd backend needs rdzv.host"]),
    ],
)
def test_etcd_without_host_under_trainjob_is_the_targets_refusal_alone(
    head: str, chosen: tuple[str, ...] | None, says: list[str]
) -> None:
    """Asking for rdzv.host first would send the user to write a host that -t trainjob then refuses too."""
    from elastic_compile.core.errors import SpecError

    with pytest.raises(SpecError) as raised:
        compile_text(head + ETCD, targets=chosen)
    lines = [f"{p.path}: {p.message}" for p in raised.value.problems]
    assert len(lines) == len(says) and all(line.startswith(s) for line, s in zip(lines, says, strict=True)), lines


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        (ELASTIC, "run_policy.backoff_limit: 6  # not set: our TrainingRuntime writes no backoffLimit on the node Job"),
        (SPEC, "run_policy.backoff_limit: 6  # not set: the stock torch-distributed writes no backoffLimit"),
        (SPEC + "trainjob: {runtime: mine}\n", "run_policy.backoff_limit: null  # not set: the node Job of the runtime "
         "mine decides (Kubernetes' default 6 when it sets none)"),
        (ELASTIC + "run_policy: {backoff_limit: 12}\n", "run_policy.backoff_limit: 12  # <string>:"),
    ],
)  # fmt: skip
def test_explain_shows_the_backoff_limit_a_trainjob_gets(extra: str, shown: str) -> None:
    """Unset, the runtime's node Job gets Kubernetes' default (the real server fills 6 in:
    tests/realcluster/test_trainjob_elastic.py), not the PyTorchJob's "no limit"."""
    from elastic_compile.compiler.explain import explain

    (row,) = [line for line in explain(compile_text("target: trainjob\n" + extra)).splitlines()
              if line.startswith("run_policy.backoff_limit:")]  # fmt: skip
    assert " ".join(row.split()).startswith(" ".join(shown.split())), row
    assert str(api.JOB_BACKOFF_LIMIT_DEFAULT) in shown or "12" in shown
    # Beside a PyTorchJob, which takes the spec's default, both are said.
    (both,) = [line for line in explain(compile_text(SPEC, targets=("pytorchjob", "trainjob"))).splitlines()
               if line.startswith("run_policy.backoff_limit:")]  # fmt: skip
    assert "default: no limit" in both and "under -t trainjob: not set: the stock torch-distributed" in both


def test_import_of_an_elastic_trainjob_whose_runtime_holds_more_than_ours_says_how_to_finish() -> None:
    """The range runs only in our runtime; a runtime with more (a podGroupPolicy) cannot be referenced with it:
    one located line in the runtime's document that names what is extra and the two ways out, each of which
    imports."""
    from elastic_compile.compiler.importer import import_stream
    from elastic_compile.core.errors import SpecError

    docs = _docs(ELASTIC)
    runtime = copy.deepcopy(docs["TrainingRuntime"])
    runtime["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    text = yaml.safe_dump_all([runtime, docs["TrainJob"]])
    with pytest.raises(SpecError) as raised:
        import_stream(text, "job.yaml")
    (problem,) = raised.value.problems
    assert problem.path == "spec.podGroupPolicy", problem
    assert problem.line <= text.splitlines().index("---"), problem  # located in the runtime's document
    assert "the runtime train also has what the spec cannot carry (spec.podGroupPolicy)" in problem.message
    assert "remove that from the runtime" in problem.message and "a fixed node count" in problem.message
    # Either way out imports: without the extra, onto our runtime; with a fixed count, referencing the runtime.
    (ours,) = import_stream(yaml.safe_dump_all([docs["TrainingRuntime"], docs["TrainJob"]]), "job.yaml")
    assert str(ours.spec.nnodes) == "2:4"
    fixed = copy.deepcopy(docs["TrainJob"])
    args = fixed["spec"]["trainer"]["args"]
    del args[args.index(contract.OPT_MIN_NODES) : args.index(contract.OPT_MIN_NODES) + 2]
    (kept,) = import_stream(yaml.safe_dump_all([runtime, fixed]), "job.yaml")
    assert str(kept.spec.nnodes) == "4" and kept.spec.trainjob.runtime == "train"
