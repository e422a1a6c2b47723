"""Golden tests: each ``tests/golden/<case>/elastic.yaml`` and the exact output it compiles to.

Every case holds the input spec and one expected file per target (``pytorchjob.yaml``,
``podtemplate.yaml``: the CLI's stdout for ``-t <target>``), plus ``explain.txt`` for a
few, and ``trainjob.yaml`` exactly for the specs that Trainer v2 can carry (the others
are located errors under ``-t trainjob``: tests/errors/trainjob-*). The output is
compared as bytes and as parsed data, in-process and through the CLI. After an intended
change, regenerate and review the diff:

    ELASTIC_COMPILE_REGEN=1 .venv/bin/pytest tests/test_golden.py

One canonical case is also written out in full below (``test_canonical_job``), as living
documentation of what a spec becomes (torchx ``test_submit_dryrun``).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile import contract
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.explain import explain
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import Compiled, compile_path, compile_spec, compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import load_file
from elastic_compile.schema.validate import validate

GOLDEN = Path(__file__).parent / "golden"
SPEC = "elastic.yaml"
TARGETS = ("pytorchjob", "podtemplate")
# Present in a case exactly when its spec compiles under -t trainjob (test_catalogue_is_complete).
OPTIONAL_TARGETS = ("trainjob",)
EXPLAIN = "explain.txt"
REGEN_ENV = "ELASTIC_COMPILE_REGEN"
REGEN_COMMAND = f"{REGEN_ENV}=1 .venv/bin/pytest tests/test_golden.py"
REGEN_HINT = f"if the change is intended, regenerate with `{REGEN_COMMAND}` and review the diff"

CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / SPEC).is_file())
# Cases whose explain.txt is pinned too (regeneration writes it only for these).
EXPLAIN_CASES = (
    "accelerator-gke-partition", "elastic-range", "env-secret-refs", "minimal", "pod-template-sidecar",
    "single-node-function", "trainjob-sidecar-runtime",
)  # fmt: skip

# Cases the compiler currently gets wrong, case -> reason. Their expected files hold the
# correct output (reviewed by hand); the mark is strict, so the fix makes these tests fail
# until the entry is removed.
KNOWN_BUGS: dict[str, str] = {}

Checker = Callable[[Mapping[str, Any]], list[str]]


def targets_of(case: str) -> tuple[str, ...]:
    """The targets whose output ``case`` pins."""
    return TARGETS + tuple(t for t in OPTIONAL_TARGETS if (GOLDEN / case / f"{t}.yaml").is_file())


PAIRS = [(case, target) for case in CASES for target in targets_of(case)]


def _pair_params() -> list[Any]:
    return [
        pytest.param(c, t, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c])) if c in KNOWN_BUGS else (c, t)
        for c, t in PAIRS
    ]


def _params(cases: Iterator[str] | list[str] | tuple[str, ...]) -> list[Any]:
    """Cases as pytest params; known bugs become strict xfails (only for tests that compile)."""
    return [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c])) if c in KNOWN_BUGS else c
        for c in cases
    ]


def _regen() -> bool:
    return os.environ.get(REGEN_ENV) == "1"


def assert_golden(path: Path, actual: str, *, parse: bool = True) -> None:
    """``actual`` equals the file at ``path``, as parsed YAML and as bytes (or rewrite it in regen mode)."""
    data = actual.encode("utf-8")
    if _regen():
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
        return
    rel = path.relative_to(GOLDEN.parent.parent)
    if not path.is_file():
        pytest.fail(f"{rel} is missing; {REGEN_HINT}")
    expected = path.read_bytes()
    if expected == data:
        return
    diff = "".join(
        difflib.unified_diff(
            expected.decode("utf-8", "replace").splitlines(True),
            actual.splitlines(True),
            f"expected/{rel}",
            "actual",
        )
    )
    if parse and yaml.safe_load(expected) == yaml.safe_load(actual):
        pytest.fail(f"{rel}: same data, different bytes (formatting changed); {REGEN_HINT}\n{diff}")
    pytest.fail(f"{rel} differs from the compiler output; {REGEN_HINT}\n{diff}")


def expected_text(case: str, name: str) -> str:
    return (GOLDEN / case / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the catalogue itself


def test_catalogue_is_complete() -> None:
    assert len(CASES) >= 10
    assert set(EXPLAIN_CASES) <= set(CASES)
    assert set(KNOWN_BUGS) <= set(CASES)
    allowed = {SPEC, *(f"{t}.yaml" for t in (*TARGETS, *OPTIONAL_TARGETS)), EXPLAIN}
    for case in CASES:
        files = {p.name for p in (GOLDEN / case).iterdir()}
        assert files <= allowed, f"{case}: unexpected files {sorted(files - allowed)}"
        if _regen():
            continue
        expected = {SPEC, *(f"{t}.yaml" for t in targets_of(case))} | ({EXPLAIN} if case in EXPLAIN_CASES else set())
        assert files == expected, f"{case}: missing {sorted(expected - files)}; {REGEN_HINT}"
        first = expected_text(case, SPEC).splitlines()[0]
        assert first.startswith("# "), f"{case}: the spec starts with a comment saying what it shows"


# --------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("target", OPTIONAL_TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_optional_target_pinned_exactly_when_it_compiles(case: str, target: str) -> None:
    """A case pins trainjob.yaml if and only if its spec compiles under -t trainjob."""
    path = GOLDEN / case / f"{target}.yaml"
    try:
        compiled: Compiled | None = compile_path(GOLDEN / case / SPEC, (target,))
    except SpecError:
        compiled = None
    if _regen():
        if compiled is not None:
            assert_golden(path, stream_text([compiled], "yaml"))
        return
    if compiled is None:
        assert not path.is_file(), f"{case}: -t {target} fails now but {path.name} is pinned"
    else:
        assert path.is_file(), f"{case}: -t {target} compiles, so pin it; {REGEN_HINT}"


@pytest.mark.parametrize(("case", "target"), _pair_params())
def test_golden_in_process(case: str, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(GOLDEN / case)
    compiled = compile_path(SPEC, (target,))
    assert_golden(GOLDEN / case / f"{target}.yaml", stream_text([compiled], "yaml"))


@pytest.mark.parametrize(("case", "target"), _pair_params())
def test_golden_cli(
    case: str, target: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(GOLDEN / case)
    code = main([SPEC, "-t", target])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert_golden(GOLDEN / case / f"{target}.yaml", out)


@pytest.mark.parametrize("case", _params(EXPLAIN_CASES))
def test_golden_explain(case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(GOLDEN / case)
    code = main([SPEC, "--explain"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == explain(compile_path(SPEC)), "--explain must come from the compile path"
    assert_golden(GOLDEN / case / EXPLAIN, out, parse=False)


@pytest.mark.parametrize("case", _params(CASES))
def test_golden_manifests_pass_offline_validation(case: str, check_manifest: Checker) -> None:
    """PyTorchJob and Trainer v2 CRDs (strict) + webhooks + core PodTemplate schema: no errors."""
    compiled = compile_path(GOLDEN / case / SPEC, targets_of(case))
    for output in compiled.outputs:
        assert check_manifest(output.doc) == [], output.target.name


# --------------------------------------------------------------------------- determinism, purity


@pytest.mark.parametrize("case", _params(CASES))
def test_golden_same_bytes_twice(case: str) -> None:
    first = stream_text([compile_path(GOLDEN / case / SPEC, targets_of(case))], "yaml")
    second = stream_text([compile_path(GOLDEN / case / SPEC, targets_of(case))], "yaml")
    assert first == second


def _run_cli(specs: list[Path], target: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    env.pop(REGEN_ENV, None)
    return subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", *map(str, specs), "-t", target],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def batch_in_subprocess(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """Every working case compiled by one CLI process per target, elsewhere, with another hash seed.

    One process for all specs keeps this fast; the stream is split back per case (as many
    documents as its expected file has, and ``---`` only ever starts a line between documents).
    """
    cwd = tmp_path_factory.mktemp("elsewhere")
    out: dict[tuple[str, str], str] = {}
    for target in (*TARGETS, *OPTIONAL_TARGETS):
        cases = [c for c, t in PAIRS if t == target and c not in KNOWN_BUGS]
        run = _run_cli([GOLDEN / c / SPEC for c in cases], target, cwd)
        # nothing but the line that ends a run of several specs
        summary = f"elastic-compile: {len(cases)} specs, printed to standard output, 0 warnings, 0 errors\n"
        assert (run.returncode, run.stderr) == (0, summary if len(cases) > 1 else "")
        docs = [d if d.endswith("\n") else d + "\n" for d in run.stdout.split("\n---\n")]
        for case in cases:
            count = expected_text(case, f"{target}.yaml").count("\n---\n") + 1
            out[case, target] = "---\n".join(docs[:count])
            docs = docs[count:]
        assert docs == []
    return out


@pytest.mark.parametrize(("case", "target"), _pair_params())
def test_golden_same_bytes_in_another_process(
    case: str, target: str, batch_in_subprocess: dict[tuple[str, str], str], tmp_path: Path
) -> None:
    """No dependence on hash seed, cwd, or anything else of the process."""
    if case in KNOWN_BUGS:
        run = _run_cli([GOLDEN / case / SPEC], target, tmp_path)
        assert (run.returncode, run.stderr) == (0, "")
        out = run.stdout
    else:
        out = batch_in_subprocess[case, target]
    if _regen():
        return
    assert out == expected_text(case, f"{target}.yaml")


def _snapshot(value: Any) -> str:
    # JSON text, not deepcopy: a copy would share nothing, which is the point, and it
    # works on the loader's int subclasses.
    return json.dumps(value, sort_keys=True, default=repr)


def _collection_ids(value: Any) -> set[int]:
    """ids of every dict and list inside ``value``."""
    if isinstance(value, dict):
        return {id(value)}.union(*(_collection_ids(v) for v in value.values()))
    if isinstance(value, list):
        return {id(value)}.union(*(_collection_ids(v) for v in value))
    return set()


@pytest.mark.parametrize("case", _params(CASES))
def test_compiling_does_not_mutate_the_spec(case: str) -> None:
    loaded = load_file(GOLDEN / case / SPEC)
    spec = validate(loaded)
    data, dump, pod = _snapshot(loaded.data), _snapshot(spec.model_dump()), _snapshot(spec.pod_template.spec)
    first = compile_spec(spec, targets_of(case), loaded=loaded)
    assert _snapshot(spec.pod_template.spec) == pod
    assert _snapshot(spec.model_dump()) == dump
    assert _snapshot(loaded.data) == data
    # flytekit appends to the caller's pod template, so compiling it twice doubles things
    second = compile_spec(spec, targets_of(case), loaded=loaded)
    assert stream_text([first], "yaml") == stream_text([second], "yaml")
    # and the plan shares no mutable object with the spec, so later edits cannot leak back
    shared = _collection_ids(first.plan.pod_template) & _collection_ids(spec.pod_template.spec)
    assert not shared, "the pod template must be built from a deep copy of pod_template"


# --------------------------------------------------------------------------- what the outputs must be


def _containers(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    template = (
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] if doc["kind"] == "PyTorchJob" else doc["template"]
    )
    return template["spec"]["containers"]


def _operator_owned(name: str) -> bool:
    return (
        name in contract.OPERATOR_ENV_NAMES
        or name in contract.WORKER_ENV_NAMES
        or name.startswith(contract.OPERATOR_ENV_PREFIX)
    )


@pytest.mark.parametrize("case", CASES)
def test_golden_files_follow_the_operator_rules(case: str) -> None:
    """The operator rules the plan follows (env injection, its traps, our layout), on the frozen files."""
    spec = validate(load_file(GOLDEN / case / SPEC))  # not yaml.safe_load: it reads 1:4 as 64
    job = yaml.safe_load(expected_text(case, "pytorchjob.yaml"))
    podtemplate = yaml.safe_load(expected_text(case, "podtemplate.yaml"))
    lo, hi = spec.nnodes.min, spec.nnodes.max

    assert list(job)[:4] == ["apiVersion", "kind", "metadata", "spec"]
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"], "Worker only, never Master"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == hi
    assert worker["restartPolicy"] in ("OnFailure", "ExitCode", "Never", "Always")
    assert isinstance(job["spec"]["nprocPerNode"], str)
    policy = job["spec"].get("elasticPolicy")
    if hi > 1:
        assert policy is not None
        assert (policy["minReplicas"], policy["maxReplicas"]) == (lo, hi)
        assert "maxRestarts" in policy
        assert "standalone" not in policy and "nProcPerNode" not in policy
        assert policy.get("rdzvConf", [None]) != [], "never an empty rdzvConf"
    else:
        assert policy is None
    assert "restartPolicy" not in worker["template"]["spec"]
    assert worker["template"] == podtemplate["template"], "the PodTemplate holds the same pod"

    containers = _containers(job)
    training, sidecars = containers[0], containers[1:]
    assert training["name"] == contract.TRAINING_CONTAINER
    assert training["command"] == [contract.LAUNCHER]
    names = [e["name"] for e in training["env"]]
    # First, so that the kubelet expands $(ELASTIC_LAUNCH_*) in the user's values.
    assert [n for n, _ in contract.DOWNWARD_ENV] == names[: len(contract.DOWNWARD_ENV)]
    assert len(names) == len(set(names))
    for container in containers:
        assert not [e["name"] for e in container.get("env", []) if _operator_owned(e["name"])]
    resources = training.get("resources", {})
    for name, value in resources.get("requests", {}).items():
        if "/" in name:
            assert resources["limits"][name] == value, f"extended resource {name}: limit == request"

    volumes = {v["name"]: v for v in worker["template"]["spec"].get("volumes", [])}
    shm_mounts = [m for m in training.get("volumeMounts", []) if m["mountPath"].rstrip("/") == "/dev/shm"]
    if spec.shared_memory is False:
        assert not shm_mounts and "dshm" not in volumes
    else:
        assert len(shm_mounts) == 1
        assert shm_mounts[0]["name"] in volumes
    for sidecar in sidecars:
        assert not [m for m in sidecar.get("volumeMounts", []) if m["name"] == "dshm"], "dshm on pytorch only"
        user = next(c for c in spec.pod_template.spec["containers"] if c["name"] == sidecar["name"])
        assert sidecar == user, "sidecars are copied untouched"


# --------------------------------------------------------------------------- living documentation

CANONICAL_SPEC = """\
name: train
image: ghcr.io/example/trainer:1.0
command: [python, train.py, --lr, 1e-4]
nnodes: 1:2
resources:
  requests: {gpu: 1}
env:
  NCCL_DEBUG: WARN
"""

CANONICAL_JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
spec:
  elasticPolicy:
    rdzvBackend: c10d
    minReplicas: 1
    maxReplicas: 2
    maxRestarts: 3
  nprocPerNode: '1'
  runPolicy:
    cleanPodPolicy: Running
    schedulingPolicy:
      minAvailable: 1
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        metadata:
          annotations:
            sidecar.istio.io/inject: 'false'
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/example/trainer:1.0
            command:
            - elastic-launch
            args:
            - --join-timeout
            - '900'
            - --last-call-timeout
            - '30'
            - --close-timeout
            - '30'
            - --heartbeat-timeout
            - '5'
            - --read-timeout
            - '900'
            - --monitor-interval
            - '5'
            - --start-method
            - spawn
            - --shutdown-timeout
            - '30'
            - --
            - python
            - train.py
            - --lr
            - '1e-4'
            env:
            - name: ELASTIC_LAUNCH_POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            - name: ELASTIC_LAUNCH_POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: ELASTIC_LAUNCH_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: ELASTIC_LAUNCH_JOB_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.labels['training.kubeflow.org/job-name']
            - name: NCCL_DEBUG
              value: WARN
            resources:
              requests:
                nvidia.com/gpu: '1'
              limits:
                nvidia.com/gpu: '1'
            volumeMounts:
            - name: dshm
              mountPath: /dev/shm
          volumes:
          - name: dshm
            emptyDir:
              medium: Memory
          terminationGracePeriodSeconds: 45
"""


def test_canonical_job() -> None:
    """An elastic 1:2 job with one GPU per node: Worker-only, elasticPolicy, launcher args, /dev/shm.

    - nnodes 1:2 -> elasticPolicy min 1, max 2, and replicas 2 (the job starts full), and a gang
      scheduler's minAvailable 1 (not every replica);
    - the topology reaches the pods as the operator's PET_* env, so the launcher args
      hold only timeouts; the user's argv follows ``--`` and ``1e-4`` stays text;
    - gpu: 1 -> nvidia.com/gpu with limit == request, and nprocPerNode "1" (one per GPU);
    - the downward-API env comes before the user's (so $(ELASTIC_LAUNCH_POD_IP) expands in
      a user value); /dev/shm is a memory emptyDir.
    """
    compiled = compile_text(CANONICAL_SPEC, "canonical.yaml", ("pytorchjob",))
    assert stream_text([compiled], "yaml") == CANONICAL_JOB


def test_unquoted_range_is_min_max_not_base_60() -> None:
    """YAML 1.1 reads ``1:4`` as 64; the loader keeps it text and the schema reads MIN:MAX."""
    compiled = compile_text("name: t\nimage: i:1\ncommand: [x]\nnnodes: 1:4\n", "range.yaml")
    policy = compiled.outputs[0].doc["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == (1, 4)


def test_the_plan_of_a_compile_is_the_one_its_job_printed() -> None:
    # Lints and --explain describe the very plan the PyTorchJob was rendered from.
    compiled = compile_path(GOLDEN / "minimal" / SPEC, ("all",))
    (job,) = [o for o in compiled.outputs if o.document.kind == "PyTorchJob"]
    assert compiled.plan is compiled.known_plan is job.document.context["plan"]


def test_a_trainjob_compile_plans_a_worker_pod_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled.plan (for lints and --explain) is made on first use when no target made it, then kept."""
    from elastic_compile.compiler import pipeline

    calls: list[object] = []
    real = pipeline.spec_to_plan
    monkeypatch.setattr(pipeline, "spec_to_plan", lambda spec: calls.append(spec) or real(spec))
    compiled = compile_path(GOLDEN.parent.parent / "examples" / "trainjob-2x8-gpu.yaml")
    assert [o.document.kind for o in compiled.outputs] == ["TrainJob"] and calls == []
    assert compiled.known_plan is None
    assert compiled.plan == real(compiled.spec) and calls == [compiled.spec]
    assert compiled.plan is compiled.plan and len(calls) == 1
