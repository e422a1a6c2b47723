"""A seeded sample of bench/fuzz_spec.py in every test run, and checks that its oracle sees each defect class.

The sample (SAMPLE_CASES cases, fixed seed) must contain no defect at all. A failure
prints each defect group with its first case number: replay it with
``python bench/fuzz_spec.py --seed make-test --show-case N``. The long run (100,000+
cases) is ``nice -n 10 python bench/fuzz_spec.py --cases 100000 --report fuzz.json``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.compiler.render import BUILTIN_TEMPLATES
from elastic_compile.core import loader
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.schema.models import ElasticSpec, PodTemplate

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CASES = 2000  # about 20-30 s on 2 busy cores
SAMPLE_SEED = "make-test"


def _load_fuzzer() -> ModuleType:
    path = ROOT / "bench" / "fuzz_spec.py"
    spec = importlib.util.spec_from_file_location("fuzz_spec", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_spec"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzzer()


@pytest.fixture(scope="module")
def sample() -> Any:
    # No per-case alarm here: pytest-timeout owns SIGALRM; the whole test has its timeout.
    return fuzz.run(SAMPLE_CASES, SAMPLE_SEED, timeout=None)


def test_sample_has_no_defects(sample: Any) -> None:
    # Every group the long runs found (loader crashes on huge numbers and self-merges, float
    # overflow in durations, empty sidecar images, int32 overflow in run_policy, float
    # quantities in pod_template) is fixed and pinned in test_fuzz_regressions.py.
    defects = [
        f"[{g['class']}] x{g['count']} first case {g['first_case']} ops {g['ops']}: {g['signature']}\n"
        f"{g['detail'][:400]}"
        for g in sample.groups.values()
        if g["class"] in fuzz.DEFECTS
    ]
    assert defects == [], "\n".join(defects) + "\n\n" + sample.text()


def test_sample_reaches_both_outcomes(sample: Any) -> None:
    # A fuzzer whose cases are all rejected never exercises the output checks.
    assert sample.cases == SAMPLE_CASES and not sample.generator_errors
    assert sample.counts[fuzz.ACCEPTED] > SAMPLE_CASES // 10
    assert sample.counts[fuzz.REJECTED] > SAMPLE_CASES // 2
    assert len(sample.rejection_kinds) > 60  # distinct rejection messages: many code paths reached


def test_unmutated_seeds_are_accepted() -> None:
    seeds = fuzz.load_seeds()
    assert {s.name for s in seeds} >= {"examples/minimal.yaml", "examples/ddp-2x8-gpu.yaml"}
    for index, seed in enumerate(seeds):
        case = fuzz.make_case("any", index, seeds)
        assert case.ops == ("seed",)
        outcome = fuzz.classify(case.data)
        assert outcome.kind == fuzz.ACCEPTED, (seed.name, outcome)


def test_cases_are_reproducible() -> None:
    seeds = fuzz.load_seeds()
    assert [fuzz.make_case(7, i, seeds).data for i in range(50, 60)] == [
        fuzz.make_case(7, i, seeds).data for i in range(50, 60)
    ]


# --------------------------------------------------------------------------- the oracle sees each class


def test_oracle_uncaught(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise KeyError("x")

    monkeypatch.setattr(fuzz, "compile_text", boom)
    assert fuzz.classify(b"name: t\n").kind == fuzz.UNCAUGHT


@pytest.mark.parametrize(
    "problem", [Problem("f", 0, 1, "p", "m"), Problem("f", 1, 1, "", "m"), Problem("f", 1, 1, "p", " ")]
)
def test_oracle_unlocated(monkeypatch: pytest.MonkeyPatch, problem: Problem) -> None:
    def reject(*args: object) -> None:
        raise SpecError([problem])

    monkeypatch.setattr(fuzz, "compile_text", reject)
    assert fuzz.classify(b"name: t\n").kind == fuzz.UNLOCATED


def _with_templates(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    def compile_with(text: bytes, file: str, targets: Any) -> Any:
        return compile_text(text, file, targets, folder)

    monkeypatch.setattr(fuzz, "compile_text", compile_with)


def test_oracle_invalid_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A template defect our own checks let through: the PyTorchJob CRD (v1.9.4) embeds a
    # Kubernetes 1.36 PodSpec, so hostnameOverride passes the compile-time CRD check; the
    # oracle also holds each pod template to Kubernetes 1.33, whose API server prunes it.
    builtin = (BUILTIN_TEMPLATES / "pytorchjob.yaml.j2").read_text()
    line = "      template: {{ plan.pod_template | to_yaml }}"
    assert line in builtin
    newer = 'dict(plan.pod_template, spec=dict(plan.pod_template.spec, hostnameOverride="x"))'
    (tmp_path / "pytorchjob.yaml.j2").write_text(builtin.replace(line, f"      template: {{{{ {newer} | to_yaml }}}}"))
    _with_templates(monkeypatch, tmp_path)
    outcome = fuzz.classify((ROOT / "examples" / "minimal.yaml").read_bytes())
    assert outcome.kind == fuzz.INVALID_OUTPUT and "hostnameOverride: unknown field" in outcome.detail


def test_oracle_compile_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    builtin = (BUILTIN_TEMPLATES / "pytorchjob.yaml.j2").read_text()
    (tmp_path / "pytorchjob.yaml.j2").write_text(builtin.replace('kind: "PyTorchJob"', 'kind: "TFJob"'))
    _with_templates(monkeypatch, tmp_path)
    assert fuzz.classify((ROOT / "examples" / "minimal.yaml").read_bytes()).kind == fuzz.COMPILE_ERROR


def test_oracle_emitter_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz, "reference_yaml", lambda docs: "what PyYAML would write\n")
    outcome = fuzz.classify((ROOT / "examples" / "minimal.yaml").read_bytes())
    assert outcome.kind == fuzz.BACKEND_MISMATCH and "emitter" in outcome.signature


@pytest.mark.skipif(not loader.LIBYAML, reason="PyYAML was built without libyaml")
def test_oracle_parser_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    # A libyaml composer that read a text otherwise than PyYAML's.
    class Misreading(loader._CComposer):  # type: ignore[misc,name-defined]
        def get_single_node(self) -> Any:
            root = super().get_single_node()
            root.value[0][1].value += "!"
            return root

    monkeypatch.setattr(loader, "_CComposer", Misreading)
    outcome = fuzz.classify((ROOT / "examples" / "minimal.yaml").read_bytes())
    assert outcome.kind == fuzz.BACKEND_MISMATCH and "parsers" in outcome.signature


def test_oracle_passthrough_judges_the_users_fragment() -> None:
    # The schema now validates pod_template.spec, so build the spec without validation.
    typo = ElasticSpec.model_construct(pod_template=PodTemplate.model_construct(spec={"hostNetwrk": True}))
    fine = ElasticSpec.model_construct(pod_template=PodTemplate.model_construct(spec={"hostNetwork": True}))
    assert fuzz._passthrough(typo) is True
    assert fuzz._passthrough(fine) is False


def test_minimizer_keeps_the_signature() -> None:
    data = b"name: t\nimage: x:1\ncommand: [python, t.py]\nenv: {A: b}\nnnodes: 0\n"
    target = fuzz.classify(data)
    assert target.kind == fuzz.REJECTED
    small = fuzz.minimize(data, lambda d: fuzz.classify(d).signature == target.signature)
    assert len(small) < len(data) and b"nnodes" in small
