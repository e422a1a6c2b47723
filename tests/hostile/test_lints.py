"""Lints: each rule fires where it should, is located, can be silenced two ways, and --strict fails.

Warnings are product surface like errors: ``file:line:col: field.path: warning EC1xx: message``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli
from support.specs import PINNED as BASE

from elastic_compile.compiler import lint
from elastic_compile.compiler.pipeline import compile_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SIDECAR = "pod_template:\n  spec:\n    containers:\n      - name: side\n        image: busybox:1.36\n"

# code, spec text, expected "line:col: path" of the warning, a fragment of its message.
FIRES = [
    ("EC101", BASE + "resources: {requests: {gpu: 8}}\nnproc_per_node: 4\n", "5:17: nproc_per_node", "4 processes"),
    ("EC101", BASE + "resources: {requests: {gpu: 2}}\nnproc_per_node: cpu\n", "5:17: nproc_per_node", "cpu proc"),
    ("EC102", BASE + "shared_memory: 8Gi\n", "4:16: shared_memory", "no resources.limits.memory"),
    ("EC102", BASE + "shared_memory: true\n", "4:16: shared_memory", "no resources.limits.memory"),
    (
        "EC102",
        BASE + "resources:\n  requests: {memory: 8Gi}\n",
        "5:22: resources.requests.memory",
        "no resources.limits.memory",
    ),
    ("EC103", BASE + "nnodes: 2\nrdzv: {join_timeout: 120}\n", "5:22: rdzv.join_timeout", "120 s is under 300"),
    ("EC103", BASE + "nnodes: 1:3\nrdzv: {join_timeout: 4m}\n", "5:22: rdzv.join_timeout", "240 s"),
    ("EC104", BASE + "nnodes: 1:4\nmax_restarts: 0\n", "5:15: max_restarts", "elastic range 1:4"),
    ("EC105", BASE.replace("y:1.0", "y"), "2:8: image", "has no tag or digest"),
    ("EC105", BASE.replace("y:1.0", "y:latest"), "2:8: image", "tagged latest"),
    ("EC105", BASE.replace("ghcr.io/x/y:1.0", "registry:5000/team/img"), "2:8: image", "no tag or digest"),
    (
        "EC105",
        BASE + SIDECAR.replace("busybox:1.36", "busybox"),
        "8:16: pod_template.spec.containers[0].image",
        "has no tag or digest",
    ),
    ("EC106", BASE + "nproc_per_node: 4\nresources: {requests: {cpu: 2}}\n", "5:29: resources.requests.cpu", "below"),
    ("EC106", BASE + "nproc_per_node: 2\nresources: {limits: {cpu: 1500m}}\n", "5:27: resources.limits.cpu", "1500m"),
    ("EC106", BASE + "resources: {requests: {gpu: 8, cpu: 4}}\n", "4:37: resources.requests.cpu", "nproc_per_node 8"),
    ("EC107", BASE + "env: {API_TOKEN: abc}\n", "4:18: env.API_TOKEN", "API_TOKEN looks like a secret"),
    (
        "EC107",
        BASE + "env:\n  - {name: DB_PASSWORD, value: hunter2}\n",
        "5:32: env[0].value",
        "DB_PASSWORD looks like a secret",
    ),
    (
        "EC107",
        BASE + SIDECAR + "        env: [{name: AWS_SECRET_ACCESS_KEY, value: x}]\n",
        "9:52: pod_template.spec.containers[0].env[0].value",
        "AWS_SECRET_ACCESS_KEY",
    ),
    ("EC108", BASE + "pod_template:\n  spec:\n    hostNetwork: true\n", "6:18: pod_template.spec.hostNetwork", "true"),
    ("EC108", BASE + "pod_template:\n  spec:\n    hostIPC: true\n", "6:14: pod_template.spec.hostIPC", "hostIPC"),
    (
        "EC109",
        BASE + SIDECAR + "        securityContext: {privileged: true}\n",
        "9:39: pod_template.spec.containers[0].securityContext.privileged",
        "container side is privileged",
    ),
    (
        "EC109",
        BASE + "pod_template:\n  spec:\n    initContainers:\n      - {name: init, image: a:1, "
        "securityContext: {privileged: true}}\n",
        "7:64: pod_template.spec.initContainers[0].securityContext.privileged",
        "container init is privileged",
    ),
    (
        "EC109",
        BASE + "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
        "        securityContext: {privileged: true}\n",
        "8:39: pod_template.spec.containers[0].securityContext.privileged",
        "the training container is privileged",
    ),
]

FIRES.append(("EC110", BASE + "run_policy: {backoff_limit: 3}\n", "4:29: run_policy.backoff_limit", "bounds nothing"))
FIRES.append(
    (
        "EC114",
        BASE + "nnodes: 2\npod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
        "        readinessProbe: {tcpSocket: {port: 8080}}\n",
        "9:25: pod_template.spec.containers[0].readinessProbe",
        "t-worker-0's name does not resolve",
    )
)
FIRES.append(("EC115", BASE + "rdzv: {host: store.example}\n", "4:14: rdzv.host", "ignored with nnodes 1"))
FIRES.append(("EC111", BASE + 'env: {A: "$(B)", B: b}\n', "4:10: env.A", "$(B) in A stays literal"))
FIRES.append(("EC116", BASE + "launcher: torchrun\n", "4:11: launcher", "every failure is permanent"))
FIRES.append(
    ("EC116", BASE + "restart_policy: ExitCode\nlauncher: torchrun\n", "4:17: restart_policy", "use OnFailure")
)
TORCHRUN_AUTO = BASE + "launcher: torchrun\nrestart_policy: Never\nnproc_per_node: auto\n"
FIRES.append(("EC117", TORCHRUN_AUTO, "6:17: nproc_per_node", "counts the node's CPUs"))

FIRES_IDS = [f"{case[0]}-{i}" for i, case in enumerate(FIRES)]

QUIET = [
    BASE,
    BASE + "resources: {requests: {gpu: 8}}\nnproc_per_node: 8\n",
    BASE + "resources: {requests: {gpu: 8}}\nnproc_per_node: gpu\n",
    BASE + "resources: {requests: {gpu: 8}}\nnproc_per_node: auto\n",
    BASE + "nproc_per_node: 4\n",  # no GPUs: CPU processes, nothing to compare
    BASE + "shared_memory: false\nresources: {requests: {memory: 8Gi}}\n",
    BASE + "shared_memory: 8Gi\nresources: {limits: {memory: 16Gi}}\n",
    BASE + "resources: {requests: {cpu: 4}}\n",  # default /dev/shm, silent on memory: the LimitRange decides
    BASE + "rdzv: {join_timeout: 120}\n",  # one node: nobody to wait for
    BASE + "nnodes: 2\nrdzv: {join_timeout: 300}\n",
    BASE + "nnodes: 4\nmax_restarts: 0\n",  # fixed size: no membership changes
    BASE.replace("y:1.0", "y@sha256:" + "a" * 64),
    BASE.replace("ghcr.io/x/y:1.0", "registry:5000/team/img:2.1"),
    BASE + "nproc_per_node: cpu\nresources: {requests: {cpu: 1}}\n",  # cpu: one per node CPU, not per request
    BASE + "nproc_per_node: 4\nresources: {requests: {cpu: 4}, limits: {cpu: 8}}\n",
    BASE + "env: {KEYBOARD: us, MONKEY_COUNT: '3', TOKENIZERS_PARALLELISM: 'false', NCCL_DEBUG: WARN}\n",
    BASE + "env: {API_TOKEN: ''}\n",  # empty: nothing leaked
    BASE + "env:\n  - {name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}\n",
    BASE + "pod_template:\n  spec:\n    hostNetwork: false\n",
    BASE + SIDECAR + "        securityContext: {privileged: false, runAsUser: 1000}\n",
    BASE + "launcher: torchrun\nrestart_policy: OnFailure\nnproc_per_node: 2\n",
    BASE + "launcher: torchrun\nrestart_policy: Never\nnproc_per_node: auto\nresources: {requests: {gpu: 2}}\n",
    BASE + "launcher: bundled\nnproc_per_node: cpu\n",  # elastic-launch: ExitCode codes, the pod's CPUs
]


def _lints(text: str) -> list[lint.Lint]:
    compiled = compile_text(text, "s.yaml")
    return lint.lint(compiled.spec, compiled.plan)


class Cli:
    """``main()`` in-process: exit status, stdout and stderr of one run."""

    def __init__(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        self.capsys, self.spec = capsys, tmp_path / "s.yaml"

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        return run_cli(self.capsys, *argv)

    def spec_text(self, text: str, *argv: str) -> tuple[int, str, str]:
        """Write ``text`` to s.yaml and compile it."""
        self.spec.write_text(text)
        return self(str(self.spec), *argv)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Cli:
    return Cli(capsys, tmp_path)


def test_codes_are_stable() -> None:
    # Codes are product surface: users write them into specs and CI scripts. Append, never renumber.
    assert {code: rule.name for code, rule in lint.RULES.items()} == {
        "EC101": "nproc-gpu-mismatch",
        "EC102": "shm-without-memory-limit",
        "EC103": "short-join-timeout",
        "EC104": "elastic-without-restarts",
        "EC105": "unpinned-image",
        "EC106": "cpu-below-nproc",
        "EC107": "literal-secret-env",
        "EC108": "host-namespace",
        "EC109": "privileged-container",
        "EC110": "backoff-limit-uncounted",
        "EC111": "unexpanded-env-reference",
        "EC112": "invisible-text",
        "EC113": "hard-to-review-value",
        "EC114": "readiness-probe-on-training",
        "EC115": "ignored-on-one-node",
        "EC116": "torchrun-exit-codes",
        "EC117": "torchrun-counts-node-cpus",
    }
    for rule in lint.RULES.values():
        assert rule.why and "\n" not in rule.why and len(rule.why) < 130


@pytest.mark.parametrize(("code", "text", "where", "fragment"), FIRES, ids=FIRES_IDS)
def test_lint_fires_located_on_stderr(cli: Cli, code: str, text: str, where: str, fragment: str) -> None:
    assert [found.code for found in _lints(text)] == [code]
    status, out, err = cli.spec_text(text)
    assert status == 0 and out.startswith("apiVersion:")  # a warning never blocks the output
    assert err.count("\n") == 1, err
    assert err.startswith(f"{cli.spec}:{where}: warning {code}: "), err
    assert fragment in err
    assert lint.RULES[code].why in err


@pytest.mark.parametrize(("code", "text", "where", "fragment"), FIRES, ids=FIRES_IDS)
def test_lint_silenced_by_spec_and_by_flag(cli: Cli, code: str, text: str, where: str, fragment: str) -> None:
    status, out, err = cli.spec_text(text + f"lint: {{{code}: ignore}}\n")
    assert (status, err) == (0, "") and out
    status, out, err = cli.spec_text(text, "--ignore", code)
    assert (status, err) == (0, "") and out
    status, out, err = cli.spec_text(text, "--ignore", "EC999")
    assert status == 2 and out == "" and "unknown lint code EC999" in err


@pytest.mark.parametrize(("code", "text", "where", "fragment"), FIRES, ids=FIRES_IDS)
def test_strict_turns_lints_into_errors(cli: Cli, code: str, text: str, where: str, fragment: str) -> None:
    status, out, err = cli.spec_text(text, "--strict")
    assert status == 2 and out == ""
    assert err.startswith(f"{cli.spec}:{where}: error {code}: ") and err.count("\n") == 1
    out_dir = cli.spec.parent / "out"
    status, _, _ = cli.spec_text(text, "--strict", "-o", str(out_dir))
    assert status == 2 and not out_dir.exists()  # nothing written
    status, out, err = cli.spec_text(text, "--strict", "--ignore", code)
    assert (status, err) == (0, "") and out


@pytest.mark.parametrize("text", QUIET)
def test_lints_stay_quiet(text: str) -> None:
    assert _lints(text) == []


def test_several_lints_and_flags_repeat(cli: Cli) -> None:
    text = BASE.replace("y:1.0", "y:latest") + "nnodes: 1:4\nmax_restarts: 0\nenv: {GH_TOKEN: x}\n"
    status, _, err = cli.spec_text(text)
    # In file order, like errors: the image (line 2) before max_restarts (line 5).
    assert status == 0 and [line.split(": ")[2].split()[1] for line in err.splitlines()] == [
        "EC105",
        "EC104",
        "EC107",
    ]
    status, _, err = cli.spec_text(text, "--ignore", "EC105", "--ignore", "EC107", "--strict")
    assert status == 2 and "error EC104" in err and err.count("\n") == 1
    status, _, err = cli.spec_text(text, "--ignore", "EC105", "--ignore", "EC107", "--ignore", "EC104", "--strict")
    assert (status, err) == (0, "")


def test_unknown_code_in_the_spec_is_a_located_error(cli: Cli) -> None:
    status, out, err = cli.spec_text(BASE + "lint: {EC104: ignore, EC1O4: ignore}\n")
    assert status == 2 and out == ""
    assert err == (
        f"{cli.spec}:4:23: lint.EC1O4: unknown lint code EC1O4; known codes: "
        "EC101, EC102, EC103, EC104, EC105, EC106, EC107, EC108, EC109, EC110, EC111, EC112, EC113, EC114, EC115, "
        "EC116, EC117 (given: EC1O4)\n"
    )


def test_lint_map_values_other_than_ignore_are_rejected(cli: Cli) -> None:
    status, _, err = cli.spec_text(BASE + "lint: {EC104: off}\n")
    assert status == 2 and err.startswith(f"{cli.spec}:4:15: lint.EC104: must be one of 'ignore'")


def test_unknown_ignore_is_a_usage_error(cli: Cli) -> None:
    status, out, err = cli.spec_text(BASE, "--ignore", "ec104")
    assert (status, out) == (2, "")
    assert err == (
        "elastic-compile: error: --ignore: unknown lint code ec104; known codes: "
        "EC101, EC102, EC103, EC104, EC105, EC106, EC107, EC108, EC109, EC110, EC111, EC112, EC113, EC114, EC115, "
        "EC116, EC117\n"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_do_not_lint(cli: Cli, example: Path) -> None:
    status, out, err = cli(str(example), "--strict")
    assert (status, err) == (0, "") and out


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("API_TOKEN", True),
        ("HF_TOKEN", True),
        ("DB_PASSWORD", True),
        ("db.passwd", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("OPENAI_APIKEY", True),
        ("SSH_KEY", True),
        ("KEY", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("client-secret", True),
        ("MONKEY_COUNT", False),
        ("KEYBOARD", False),
        ("TOKENIZERS_PARALLELISM", False),  # Hugging Face's switch, set in most training images
        ("GH_TOKENS", True),
        ("NCCL_DEBUG", False),
        ("PATH", False),
    ],
)
def test_secret_like_names(name: str, secret: bool) -> None:
    assert lint.secret_like(name) is secret


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("busybox", "has no tag or digest"),
        ("busybox:latest", "tagged latest"),
        ("localhost:5000/img", "has no tag or digest"),
        ("localhost:5000/img:latest", "tagged latest"),
        ("img@sha256:" + "0" * 64, None),
        ("img:latest@sha256:" + "0" * 64, None),  # the digest pins it
        ("ghcr.io/a/b:2.13.0-cuda13", None),
    ],
)
def test_image_pinning(image: str, problem: str | None) -> None:
    found = lint.image_problem(image)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_user_text_in_messages_stays_on_one_line(cli: Cli) -> None:
    # Found by bench/fuzz_spec.py: a sidecar image "g\n" made a two-line warning. The schema now rejects
    # such an image, and a container name with a line separator (a container name is a DNS-1123 label): on one line.
    sidecar = '{name: "s\\u2028", image: "g:1", securityContext: {privileged: true}}'
    text = BASE + f"pod_template:\n  spec:\n    containers: [{sidecar}]\n"
    status, _, err = cli.spec_text(text)
    assert status == 2 and len(err.splitlines()) == 1 and "is a DNS-1123 label" in err, err
    assert all(line.startswith(f"{cli.spec}:6:") for line in err.splitlines())
