"""Secrets by value (issue 18 item 5): found by their shape wherever a container carries them.

The secret lint (EC107) once looked only at variable names and found 4 of 18 realistic
secrets, printing each one in its warning. Here each shape sits where it leaks: env values
under harmless names, command and args (also after ``--token``-style flags), annotations
of the job and its pods, and sidecar containers. Every one must be a warning naming the
field and never showing the value (an error under ``--strict``); look-alikes that are not
secrets must stay quiet.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from support.specs import PINNED as BASE

from elastic_compile.compiler.cli import main

# Not real credentials: shaped like them, assembled here so no scanner mistakes this file for a leak.
_B64 = base64.urlsafe_b64encode
JWT = (
    ".".join(
        _B64(json.dumps(part).encode()).decode().rstrip("=")
        for part in ({"alg": "HS256", "typ": "JWT"}, {"sub": "ci-bot", "iat": 1700000000})
    )
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy\n-----END RSA PRIVATE KEY-----"
SHAPES = {
    "url-password": "postgres://trainer:" + "hunter2Secret@db.internal:5432/runs",
    "url-password-redis": "redis://:" + "s3cr3tP4ss@cache:6379/0",
    "pem-private-key": PEM,
    "openssh-private-key": "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n",
    "bearer-token": "Authorization: Bearer " + "ya29.a0AfH6SMBx3kLmNoPqRsTuVwXyZ0123456789",
    "jwt": JWT,
    "slack-webhook": "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "discord-webhook": "https://discord.com/api/webhooks/" + "123456789012345678/abcdefghijklmnopqrstuvwxyz",
    "openai-key": "sk-" + "proj-a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV",
    "stripe-key": "sk_" + "live_51HxYzAbCdEfGhIjKlMnOpQr",
    "github-token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github-pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS",
    "gitlab-token": "glpat-" + "xXxXxXxXxXxXxXxXxXxX",
    "slack-bot-token": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKl",
    "aws-access-key": "AKIA" + "IOSFODNN7EXAMPLE",
    "hf-token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "google-api-key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "json-api-key": json.dumps({"endpoint": "https://api.example.com", "api_key": "Zq8x" + "Lp3vNw7Rt2Ys"}),
    "json-service-account": json.dumps({"type": "service_account", "client_secret": "k9" + "Qw2Er4Ty6Ui8Op"}),
    "npm-token": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
}
# Secrets only by what they sit next to (a secret-like flag or annotation key) and their entropy.
NEXT_TO_A_NAME = {
    "flag-then-value": ["--api-key", "q8ZLp3vNw7Rt2YsK"],
    "flag-equals-value": ["--wandb-token=f3e9a1c07b2d4e6f8a0b1c2d3e4f5a6b"],
    "password-flag": ["--password", "Tr0ub4dor&3xyz"],
}
HARMLESS = [
    "postgres://db.internal:5432/runs",  # no password
    "postgres://trainer:$(DB_PASSWORD)@db:5432/runs",  # the kubelet fills it from a secret
    "sk-learn",
    "skip-validation-for-the-first-epoch",
    "--token-budget",
    "hf_hub_download",
    "-----BEGIN CERTIFICATE-----",  # public
    '{"learning_rate": 0.001, "key_metric": "loss"}',
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "--max-tokens=4096",
]


def _yaml(value: str) -> str:
    return json.dumps(value)


def _carriers(value: str) -> dict[str, tuple[str, str]]:
    """Each place a container carries ``value``: the spec and the field the warning must name."""
    v = _yaml(value)
    sidecar = f'{{name: log, image: "b:1", env: [{{name: LOG_SINK, value: {v}}}], args: [{v}]}}'
    return {
        "env-map": (BASE + f"env: {{DATABASE: {v}}}\n", "env.DATABASE"),
        "env-list": (BASE + f"env: [{{name: NOTIFY, value: {v}}}]\n", "env[0].value"),
        "command": (BASE.replace("t.py]", f"t.py, {v}]"), "command[2]"),
        "job-annotation": (BASE + f"annotations: {{note: {v}}}\n", "annotations.note"),
        "pod-annotation": (
            BASE + f"pod_template: {{metadata: {{annotations: {{note: {v}}}}}}}\n",
            "pod_template.metadata.annotations.note",
        ),
        "sidecar-env": (
            BASE + f"pod_template:\n  spec:\n    containers: [{sidecar}]\n",
            "pod_template.spec.containers[0].env[0].value",
        ),
        "sidecar-args": (
            BASE + f"pod_template:\n  spec:\n    containers: [{sidecar}]\n",
            "pod_template.spec.containers[0].args[0]",
        ),
    }


def _lint(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *argv: str) -> tuple[int, str]:
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    status = main([str(spec), *argv])
    captured = capsys.readouterr()
    return status, captured.err


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_secret_shape_is_found_in_every_container_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    secret = SHAPES[shape]
    for carrier, (text, field) in _carriers(secret).items():
        status, err = _lint(tmp_path, capsys, text)
        warnings = [w for w in err.splitlines() if "EC107" in w]
        assert status == 0 and any(f": {field}: warning EC107: " in w for w in warnings), (carrier, err)
        for line in err.splitlines():
            for piece in (secret, *secret.split("\n")[1:2], secret[-12:]):
                assert piece not in line, f"{carrier}: the warning prints the secret: {line}"
        assert "(not shown)" in err or "looks like a secret" in err


def test_there_are_at_least_the_18_shapes_of_the_issue() -> None:
    assert len(SHAPES) >= 18


@pytest.mark.parametrize("case", sorted(NEXT_TO_A_NAME))
def test_high_entropy_values_next_to_secret_like_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    words = NEXT_TO_A_NAME[case]
    command = ", ".join(["python", "t.py", *map(_yaml, words)])
    status, err = _lint(tmp_path, capsys, BASE.replace("[python, t.py]", f"[{command}]"))
    assert status == 0 and "warning EC107" in err and f"command[{1 + len(words)}]" in err, err
    assert words[-1].rpartition("=")[2] not in err
    status, err = _lint(tmp_path, capsys, BASE.replace("[python, t.py]", f"[{command}]"), "--strict")
    assert status == 2 and "error EC107" in err


def test_secret_like_annotation_keys_with_random_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _lint(
        tmp_path, capsys, BASE + "annotations: {example.com/api-token: 9f86d081884c7d659a2feaa0c55ad015}\n"
    )
    assert status == 0 and 'annotations["example.com/api-token"]: warning EC107' in err, err
    assert "9f86d081884c7d65" not in err


@pytest.mark.parametrize("value", HARMLESS)
def test_look_alikes_are_not_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    for carrier, (text, _field) in _carriers(value).items():
        _, err = _lint(tmp_path, capsys, text)
        assert "EC107" not in err, (carrier, err)


def test_a_secret_named_variable_no_longer_prints_its_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _lint(tmp_path, capsys, BASE + "env: {HF_TOKEN: correct-horse-battery-staple}\n")
    assert status == 0 and "env.HF_TOKEN: warning EC107: HF_TOKEN looks like a secret" in err
    assert "correct-horse" not in err
