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

from elastic_compile.compiler import lint
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


# Red-team report item 4: EC112, EC113 and type errors printed the secret EC107 hid.
_TOKEN = SHAPES["github-token"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (BASE + f'env:\n  GH_TOKEN: "{_TOKEN}\\u200b"\n', "EC112"),  # hidden character after a token
        (BASE + f'env:\n  NOTE: "{_TOKEN}\\u200b"\n', "EC112"),  # a harmless name: the shape decides
        (BASE + f'env:\n  HF_TOKEN: "{_TOKEN}\\n- fake: entry"\n', "EC113"),  # a fake YAML entry
        (BASE + f'env:\n  NOTE: "{_TOKEN} {"x" * 1100}"\n', "EC113"),  # too long to review
        (BASE + 'env:\n  API_TOKEN: "plain\\u200bword"\n', "EC112"),  # a secret by its name only
    ],
    ids=["named-shape", "shape", "fake-entry", "long", "named-only"],
)
@pytest.mark.parametrize("ignore", [[], ["--ignore", "EC107"]], ids=["", "EC107-ignored"])
def test_no_lint_prints_a_value_ec107_judges_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str, ignore: list[str]
) -> None:
    _status, err = _lint(tmp_path, capsys, text, *ignore)
    assert f"warning {code}" in err, err
    assert _TOKEN[4:14] not in err and "plain" not in err, err


def test_an_error_never_quotes_a_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A type error's ``(given: ...)`` once showed the first 30 characters of a token in a command string."""
    status, err = _lint(tmp_path, capsys, BASE.replace("command: [python, t.py]", f'command: "t.py --token {_TOKEN}"'))
    assert status == 2
    assert "command:" in err and "credential, not shown>)" in err, err  # "token ghp_...": a credential first
    assert _TOKEN[4:14] not in err, err


def test_every_secret_shape_starts_where_a_search_tries_each_position_once() -> None:
    """Item 3: the URL shape searched 40,000 letters in 2.75 s of CPU (quadratic): bound its work by its shape.

    A pattern that opens with a repeated class (``[A-Za-z][A-Za-z0-9+.-]*://``) is tried from
    every position of a run of those characters, each attempt running to the run's end: n**2
    steps. One that opens with a literal, or with a lookbehind that only the start of a run
    passes, starts at most one attempt per run.
    """
    try:
        from re import _constants as c  # type: ignore[attr-defined]
        from re import _parser as parser  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_constants as c
        import sre_parse as parser

    def fixed_start(items: list[tuple[object, object]]) -> bool:
        op, av = items[0]
        if op is c.AT:  # \b: look at what follows it
            return fixed_start(items[1:])
        if op is c.SUBPATTERN:
            return fixed_start(list(av[-1]))  # type: ignore[index]
        if op is c.BRANCH:
            return all(fixed_start(list(alternative)) for alternative in av[1])  # type: ignore[index]
        if op is c.ASSERT_NOT:
            return av[0] == -1  # type: ignore[index]  # a negative lookbehind: the start of a run only
        return op is c.LITERAL

    for kind, pattern in lint._SECRET_SHAPES:
        assert fixed_start(list(parser.parse(pattern.pattern))), kind


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_a_key_shaped_like_a_secret_is_not_shown_in_the_field_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """Red team 2, item 6: ``(given: ...)`` hid a pasted token, the field path printed it."""
    text = BASE + f"resources:\n  requests: {{cpu: 1, {_TOKEN}: 1}}\n{_TOKEN}: 1\nenv:\n  {_TOKEN}\\u200b: x\n"
    status, err = _lint(tmp_path, capsys, text.replace("\\u200b", "\u200b"), "--message-format", fmt)
    assert status == 2
    assert err.count("<a GitHub token, not shown>") >= 6, err  # each path and each given
    assert _TOKEN[4:14] not in err, err
