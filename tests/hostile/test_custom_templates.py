"""Custom templates (``--templates DIR``): a platform team's template works; bad or hostile ones fail safely.

A platform team copies the built-in ``pytorchjob.yaml.j2`` and extends it (labels, a
sidecar): the output must still pass the strict CRD, webhook and core-schema checks. A
template that emits invalid YAML or an invalid resource gets one error line naming the
template. A malicious template (sandbox escapes through ``__class__``, ``__globals__``,
``cycler.__init__.__globals__``, format strings; resource exhaustion) must end with exit 2
and one line, and never run anything: its payload would create a marker file.

Malicious templates run in child processes with an address-space and CPU limit (on top of the
sandbox's own child and bounds, compiler/sandbox.py), so an
escape or an exhaustion cannot hurt the test run (or the machine).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.render import BUILTIN_TEMPLATES
from elastic_compile.core.loader import load_file
from elastic_compile.schema.validate import validate

ROOT = Path(__file__).resolve().parents[2]
# The examples whose -t all holds a PyTorchJob (a spec with target: trainjob gets a TrainJob).
EXAMPLES = [p for p in sorted((ROOT / "examples").glob("*.yaml")) if validate(load_file(p)).target != "trainjob"]
MINIMAL = str(ROOT / "examples" / "minimal.yaml")
BUILTIN = (BUILTIN_TEMPLATES / "pytorchjob.yaml.j2").read_text()

METADATA_LINE = "metadata: {{ plan.metadata | to_yaml }}\n"
TEMPLATE_LINE = "      template: {{ plan.pod_template | to_yaml }}\n"

# What a platform team adds: a cost label on the job and pods, and a log-shipping sidecar.
PLATFORM_SETS = """\
{% set team = {"team": "ml-platform", "cost-center": "cc-42"} %}
{% set sidecar = {
    "name": "log-shipper",
    "image": "fluent/fluent-bit:3.0.7",
    "args": ["--config", "/fluent-bit/etc/fluent-bit.conf"],
    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
} %}
{% set pod_meta = plan.pod_template.get("metadata", {}) %}
{% set pod = dict(
    plan.pod_template,
    metadata=dict(pod_meta, labels=dict(pod_meta.get("labels", {}), **team)),
    spec=dict(plan.pod_template.spec, containers=plan.pod_template.spec.containers + [sidecar]),
) %}
"""


def platform_template() -> str:
    """The built-in template, extended the way a platform team would."""
    assert METADATA_LINE in BUILTIN and TEMPLATE_LINE in BUILTIN, "the built-in template changed shape"
    text = BUILTIN.replace(
        METADATA_LINE,
        'metadata: {{ dict(plan.metadata, labels=dict(plan.metadata.get("labels", {}), **team)) | to_yaml }}\n',
    ).replace(TEMPLATE_LINE, "      template: {{ pod | to_yaml }}\n")
    return PLATFORM_SETS + text


def _dir(tmp_path: Path, text: str, name: str = "pytorchjob.yaml.j2") -> Path:
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_platform_team_template_compiles_and_validates(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    check_manifest: Callable[[Mapping[str, Any]], list[str]],
    example: Path,
) -> None:
    folder = _dir(tmp_path, platform_template())
    assert main([str(example), "-t", "all", "--templates", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    job, podtemplate = list(yaml.safe_load_all(out))[:2]
    assert job["metadata"]["labels"]["team"] == "ml-platform"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert [c["name"] for c in pod["spec"]["containers"]][:: len(pod["spec"]["containers"]) - 1] == [
        "pytorch",
        "log-shipper",
    ]
    assert pod["metadata"]["labels"]["cost-center"] == "cc-42"
    assert "log-shipper" not in json.dumps(podtemplate)  # only pytorchjob.yaml.j2 was replaced
    for doc in (job, podtemplate):
        assert check_manifest(doc) == []


def test_template_emitting_invalid_yaml_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _dir(tmp_path, 'apiVersion: "kubeflow.org/v1"\nkind: "PyTorchJob"\nmetadata: {name: [x}\n')
    assert main([MINIMAL, "--templates", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"elastic-compile: error: template {folder / 'pytorchjob.yaml.j2'}: ")
    assert "not valid YAML at line 3, column" in err


def test_template_syntax_error_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _dir(tmp_path, "apiVersion: v1\n\n{% if plan.name %}\nkind: x\n")
    assert main([MINIMAL, "--templates", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder / 'pytorchjob.yaml.j2'}:" in err, err


INVALID_RESOURCES = {
    "drops-pytorch-container": (
        BUILTIN.replace(
            TEMPLATE_LINE,
            "      template: {{ dict(plan.pod_template, spec=dict(plan.pod_template.spec, containers=["
            'dict(plan.pod_template.spec.containers[0], name="trainer")])) | to_yaml }}\n',
        ),
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers: must have a container named 'pytorch'",
    ),
    "wrong-kind": (BUILTIN.replace('kind: "PyTorchJob"', 'kind: "TFJob"'), "kind PyTorchJob"),
    "master-with-elastic": (
        BUILTIN.replace(
            "    Worker:\n",
            "    Master:\n      replicas: 1\n      template: {{ plan.pod_template | to_yaml }}\n    Worker:\n",
        ),
        "Master",
    ),
    "name-changed": (
        BUILTIN.replace(METADATA_LINE, 'metadata: {{ dict(plan.metadata, name="other") | to_yaml }}\n'),
        "metadata.name must be minimal",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID_RESOURCES))
def test_template_emitting_an_invalid_resource_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, fragment = INVALID_RESOURCES[case]
    assert text != BUILTIN
    folder = _dir(tmp_path, text)
    spec = MINIMAL
    if case == "master-with-elastic":
        spec = str(tmp_path / "multi.yaml")
        Path(spec).write_text(Path(MINIMAL).read_text() + "nnodes: 1:2\n")
    assert main([spec, "--templates", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("elastic-compile: error: template ") and "pytorchjob.yaml.j2" in err
    assert fragment in err, err


def test_invalid_resource_error_names_the_custom_template_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _dir(tmp_path, INVALID_RESOURCES["wrong-kind"][0])
    assert main([MINIMAL, "--templates", str(folder)]) == 2
    assert str(folder / "pytorchjob.yaml.j2") in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        BUILTIN.replace("restartPolicy:", "restartPolcy:"),
        BUILTIN + "  bogusField: 1\n",
        BUILTIN.replace(TEMPLATE_LINE, "      template: {{ dict(plan.pod_template, spek={}) | to_yaml }}\n"),
    ],
    ids=["replica-field-typo", "unknown-spec-field", "template-field-typo"],
)
def test_template_field_typos_are_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    folder = _dir(tmp_path, text)
    assert main([MINIMAL, "--templates", str(folder)]) == 2
    assert "pytorchjob.yaml.j2" in capsys.readouterr().err


# --------------------------------------------------------------------------- malicious templates

MARKER = "{marker}"  # replaced with a path the payload would create

BLOCKED = {
    "str-mro-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() | tojson }}",
    "tuple-bases-subclasses": "{{ ().__class__.__bases__[0].__subclasses__() | tojson }}",
    "plan-class-globals": "{{ plan.__class__.__init__.__globals__['os'].system('touch {marker}') | tojson }}",
    "plan-name-class-base": "{{ plan.name.__class__.__base__.__subclasses__() | tojson }}",
    "cycler-globals-os": "{{ cycler.__init__.__globals__.os.system('touch {marker}') | tojson }}",
    "joiner-globals-os": "{{ joiner.__init__.__globals__.os.system('touch {marker}') | tojson }}",
    "namespace-globals": "{{ namespace.__init__.__globals__.os.system('touch {marker}') | tojson }}",
    "lipsum-globals": "{{ lipsum.__globals__['os'].system('touch {marker}') | tojson }}",
    "self-init-builtins": "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch {marker}') "
    "| tojson }}",
    "self-context": "{{ self._TemplateReference__context | tojson }}",
    "builtins-name": "{{ __builtins__.__import__('os').system('touch {marker}') | tojson }}",
    "os-name": "{{ os.system('touch {marker}') | tojson }}",
    "format-string-class": '{{ "{0.__class__.__init__.__globals__}".format(plan) | tojson }}',
    "format-string-lipsum": '{{ "{0.__globals__[os]}".format(lipsum) | tojson }}',
    "format-map": '{{ "{x.__class__}".format_map({"x": plan}) | tojson }}',
    "percent-format": "{{ ('%s' % plan.__class__) | tojson }}",
    "attr-filter": "{{ (plan | attr('__class__')) | tojson }}",
    "mutate-plan-list": "{{ plan.pod_template.spec.containers.append(1) | tojson }}",
    "mutate-plan-dict": "{{ plan.labels.update({'a': 'b'}) | tojson }}",
    "reduce-ex": "{% set x = plan.__reduce_ex__(2) %}{{ x | tojson }}",
    "include-etc-passwd": "{% include '../../../../../../etc/passwd' %}",
    "import-absolute": "{% import '/etc/passwd' as p %}",
    "recursive-macro": "{% macro m() %}{{ m() }}{% endmacro %}{{ m() | tojson }}",
}

# Resource exhaustion: each must be stopped with a CompileError (exit 2, one line) quickly.
# Templates that try to exhaust time or memory, and the guard in compiler/sandbox.py that stops each.
EXHAUSTION = {
    "huge-range": ("{{ range(10**10) | list | tojson }}", "the sandbox's range() cap; OverflowError -> CompileError"),
    "string-times-huge": ("{{ ('x' * 10**10) | tojson }}", "the intercepted '*' refuses values over the size bound"),
    "list-times-huge": ("{{ ([0] * 10**9) | tojson }}", "the same for lists"),
    "nested-loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "the output bound while it streams",
    ),
    "cpu-loop-no-output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "RLIMIT_CPU in the child that renders",
    ),
    "zero-division": ("{{ (1 / 0) | tojson }}", "ArithmeticError -> CompileError"),
}

# Each bomb of issue 18 and the bound that must stop it before it runs (the fragment of
# its one error line): minutes or gigabytes each before the sandbox bounded them.
BOMBS = {
    "constant-folded-power": ("{{ 9 ** (9 ** 8) }}", "more than 65536 bits"),
    "power-in-a-filter": ("{{ (9 ** (9 ** 8)) | tojson }}", "more than 65536 bits"),
    "big-int-product": ("{{ ((10 ** 19000) * (10 ** 19000)) | tojson }}", "more than 65536 bits"),
    "list-comparison": (
        "{% set a = [0] * 1000000 %}{% set b = [0] * 1000000 %}"
        "{{ ([a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a] =="
        " [b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b]) | tojson }}",
        "larger than 16777216",
    ),
    "percent-width": ('{{ ("%999999999d" % 1) | tojson }}', "the % format would be larger"),
    "percent-star-width": ('{{ ("%*d" % (999999999, 1)) | tojson }}', "'*' widths are not allowed"),
    "format-filter-width": ('{{ ("%0999999999d" | format(1)) | tojson }}', "the % format would be larger"),
    "str-format-width": ('{{ "{:>999999999}".format(1) | tojson }}', "the formatted string would be larger"),
    "format-map-width": ('{{ "{x:>999999999}".format_map({"x": 1}) | tojson }}', "the formatted string"),
    "join-of-repeats": (
        '{% set s = "x" * 1000000 %}{{ ([s] * 20) | join | tojson }}',
        "larger than 16777216",
    ),
    "join-of-a-literal": (
        '{% set s = "x" * 1000000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s] | join | tojson }}',
        "larger than 16777216",
    ),
    "concat-doubling": (
        '{% set ns = namespace(s="xx") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}'
        "{{ ns.s | tojson }}",
        "the concatenated string would be larger",
    ),
    "plus-doubling": (
        '{% set ns = namespace(s="xx") %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}'
        "{{ ns.s | tojson }}",
        "the sum would be larger",
    ),
    "str-center": ('{{ "x".center(999999999) | tojson }}', "str.center would be larger"),
    "str-replace": ('{{ ("x" * 1000000).replace("x", "x" * 1000) | tojson }}', "str.replace would be larger"),
    "str-translate": ('{{ "x".translate({120: "yy"}) | tojson }}', "str.translate is not allowed"),
    "str-join-method": ('{% set s = "x" * 1000000 %}{{ "".join([s] * 17) | tojson }}', "larger than 16777216"),
    "batch-fill": ('{{ [1] | batch(999999999, "x") | list | tojson }}', "more than 16777216 groups"),
    "nested-repeat": ("{{ [[0] * 1000000] * 1000000 }}", "the repeated value would be larger"),
    "macro-doubling": (
        "{% macro d(n) %}{% if n %}{{ d(n - 1) }}{{ d(n - 1) }}{% else %}{{ 'x' * 1000000 }}{% endif %}{% endmacro %}"
        "{{ d(40) }}",
        "larger than 16777216",
    ),
    "lipsum": ("{{ lipsum(1000000) }}", "'lipsum' is undefined"),
    "deep-parentheses": ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "too deep"),
}

ADDRESS_SPACE = 1536 * 1024 * 1024
CPU_SECONDS = 3


def _limits() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


BATCH_DRIVER = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from elastic_compile.compiler.cli import main
    results = {}
    for folder in sys.argv[3:]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([sys.argv[2], "--templates", folder])
        results[folder] = {"code": code, "stderr": err.getvalue()}
    with open(sys.argv[1], "w") as f:
        json.dump(results, f)
    """
)


def _malicious_dir(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "pytorchjob.yaml.j2").write_text(text.replace(MARKER, str(tmp_path / "PWNED")))
    return folder


def _run_batch(tmp_path: Path, folders: dict[str, Path], *, timeout: float) -> dict[str, Any]:
    """The CLI on every folder in one child under :func:`_limits`: ``{folder: {"code", "stderr"}}``."""
    results_path = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-c", BATCH_DRIVER, str(results_path), MINIMAL, *map(str, folders.values())],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limits,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results: dict[str, Any] = json.loads(results_path.read_text())
    return results


def test_sandbox_escapes_are_blocked(tmp_path: Path) -> None:
    """Every escape attempt, in one limited child: exit 2, one line naming the template, no marker."""
    folders = {name: _malicious_dir(tmp_path, name, text) for name, text in BLOCKED.items()}
    results = _run_batch(tmp_path, folders, timeout=120)
    assert not (tmp_path / "PWNED").exists(), "a template ran a command"
    failures = []
    for name, folder in folders.items():
        result = results[str(folder)]
        lines = result["stderr"].splitlines()
        ok = (
            result["code"] == 2
            and len(lines) == 1
            and lines[0].startswith("elastic-compile: error: template ")
            and "pytorchjob.yaml.j2" in lines[0]
            and "internal error" not in lines[0]
        )
        if not ok:
            failures.append(f"{name}: exit {result['code']}: {result['stderr'][:300]!r}")
    assert failures == []


@pytest.mark.parametrize(
    "name",
    list(EXHAUSTION),
)
def test_resource_exhaustion_fails_fast_with_a_compile_error(tmp_path: Path, name: str) -> None:
    folder = _malicious_dir(tmp_path, name, EXHAUSTION[name][0])
    try:
        run = subprocess.run(
            [sys.executable, "-m", "elastic_compile.compiler.cli", MINIMAL, "--templates", str(folder)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limits,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("still running after 60 s")
    assert not (tmp_path / "PWNED").exists()
    assert run.returncode == 2, f"exit {run.returncode}: {run.stderr[:300]}"
    assert run.stderr.count("\n") == 1 and "pytorchjob.yaml.j2" in run.stderr
    assert "internal error" not in run.stderr


def test_each_bomb_is_stopped_by_its_bound(tmp_path: Path) -> None:
    """Every bomb in one child under the same limits: exit 2, one line, the bound that stopped it."""
    folders = {name: _malicious_dir(tmp_path, name, text) for name, (text, _) in BOMBS.items()}
    results = _run_batch(tmp_path, folders, timeout=300)
    failures = []
    for name, folder in folders.items():
        result, fragment = results[str(folder)], BOMBS[name][1]
        lines = result["stderr"].splitlines()
        if not (result["code"] == 2 and len(lines) == 1 and "pytorchjob.yaml.j2" in lines[0] and fragment in lines[0]):
            failures.append(f"{name}: exit {result['code']}: {result['stderr'][:300]!r}")
    assert failures == []


PRIVILEGED_SETS = """\
{% set sidecar = {"name": "helper", "image": "busybox:1.36", "securityContext": {"privileged": true}} %}
{% set pod = dict(plan.pod_template, spec=dict(plan.pod_template.spec, hostNetwork=true,
    containers=plan.pod_template.spec.containers + [sidecar])) %}
"""


def test_lints_run_on_what_a_custom_template_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A template cannot add what --strict refuses in a spec: a privileged container, hostNetwork."""
    folder = _dir(tmp_path, PRIVILEGED_SETS + BUILTIN.replace(TEMPLATE_LINE, "      template: {{ pod | to_yaml }}\n"))
    template = str(folder / "pytorchjob.yaml.j2")
    assert main([MINIMAL, "--templates", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "privileged: true" in out
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(
        f"{template}:1:1: spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork: warning EC108"
    )
    assert lines[1].startswith(
        f"{template}:1:1: spec.pytorchReplicaSpecs.Worker.template.spec.containers[1].securityContext.privileged: "
        "warning EC109: container helper is privileged (rendered by this template)"
    )
    assert main([MINIMAL, "--templates", str(folder), "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("error EC10") == 2
    assert main([MINIMAL, "--templates", str(folder), "--strict", "--ignore", "EC108", "--ignore", "EC109"]) == 0


def test_a_spec_lint_is_not_repeated_for_the_custom_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "privileged.yaml"
    spec.write_text(Path(MINIMAL).read_text() + "pod_template:\n  spec:\n    hostNetwork: true\n")
    folder = _dir(tmp_path, BUILTIN + "\n")
    assert main([str(spec), "--templates", str(folder)]) == 0
    err = capsys.readouterr().err
    assert err.count("EC108") == 1 and err.startswith(f"{spec}:"), err
