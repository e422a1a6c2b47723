"""``elastic-compile schema`` and the committed ``elastic.schema.json`` that editors read.

The file at the repository root is what the ``# yaml-language-server: $schema=...``
modeline in the examples points at. After a change to the spec models, regenerate it:

    ELASTIC_COMPILE_REGEN=1 .venv/bin/pytest tests/test_schema_cmd.py

Specs are loaded with the compiler's own YAML 1.2 loader, which reads plain scalars as
editors (yaml-language-server) and check-jsonschema do: ``1e-4`` and ``20`` are numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import plain
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import load_file, load_text

jsonschema = pytest.importorskip("jsonschema", reason="install the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "elastic.schema.json"
REGEN_ENV = "ELASTIC_COMPILE_REGEN"
REGEN_COMMAND = f"{REGEN_ENV}=1 .venv/bin/pytest tests/test_schema_cmd.py"

EXAMPLES = sorted(ROOT.glob("examples/*.yaml"))
GOLDEN_SPECS = sorted(ROOT.glob("tests/golden/*/elastic.yaml"))

# Specs the compiler accepts but the published schema rejects, path -> reason (strict xfail).
# Empty since string fields accept numbers in the schema too (the loader keeps their text).
KNOWN_GAPS: dict[str, str] = {}

MINIMAL = "name: train\nimage: ghcr.io/example/trainer:1.0\ncommand: [python, train.py]\n"


def _schema_text() -> str:
    """What ``elastic-compile schema`` prints, through the CLI's own code path."""
    proc = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "schema"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return proc.stdout.decode("utf-8")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Any:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _errors(validator: Any, data: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(plain(data)), key=lambda e: list(map(str, e.absolute_path)))
    ]


# ------------------------------------------------------------------------------ the committed file


def test_committed_schema_is_current() -> None:
    text = _schema_text()
    if os.environ.get(REGEN_ENV) == "1":
        if not SCHEMA_FILE.is_file() or SCHEMA_FILE.read_text(encoding="utf-8") != text:
            SCHEMA_FILE.write_bytes(text.encode("utf-8"))
        return
    assert SCHEMA_FILE.is_file(), f"elastic.schema.json is missing; generate it with `{REGEN_COMMAND}`"
    assert SCHEMA_FILE.read_bytes() == text.encode("utf-8"), (
        f"elastic.schema.json is stale; if the model change is intended, run `{REGEN_COMMAND}` and review the diff"
    )


def test_schema_command_matches_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    from elastic_compile.schema import json_schema

    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


def test_schema_prints_in_an_ascii_locale() -> None:
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "schema"],
        capture_output=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout == SCHEMA_FILE.read_bytes()


def test_schema_is_2020_12_with_a_title(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "elastic.yaml"
    assert {"name", "image"} <= set(schema["then"]["required"])


# ------------------------------------------------------------------------------ valid specs


def _params(paths: list[Path]) -> list[Any]:
    out = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[rel])] if rel in KNOWN_GAPS else []
        out.append(pytest.param(path, id=rel, marks=marks))
    return out


@pytest.mark.parametrize("path", _params(EXAMPLES + GOLDEN_SPECS))
def test_shipped_specs_validate(path: Path, validator: Any) -> None:
    assert _errors(validator, load_file(path).data) == []


def test_there_are_specs_to_validate() -> None:
    assert EXAMPLES, "examples/*.yaml"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_modelines_point_at_the_committed_schema(path: Path) -> None:
    """Editors resolve ``$schema=`` from the YAML file's own directory."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    if match is None:
        pytest.skip(f"{path.name} has no modeline")
    assert (path.parent / match[1]).resolve() == SCHEMA_FILE


def test_dollar_schema_key_is_accepted(validator: Any) -> None:
    """A top-level ``$schema:`` key (yaml-language-server reads it) passes both the schema and the compiler."""
    text = "$schema: ../elastic.schema.json\n" + MINIMAL
    assert _errors(validator, load_text(text, "<test>").data) == []
    compile_text(text)


# ------------------------------------------------------------------------------ rejected specs


def _objects(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _objects(value, f"{path}/{index}")


# Objects that are open on purpose: a Kubernetes PodSpec fragment, passed through to the
# pod template and checked against Kubernetes' own schema when the job is compiled.
OPEN_OBJECTS = {"#/$defs/PodTemplate/properties/spec"}


def test_every_model_forbids_unknown_fields(schema: dict[str, Any]) -> None:
    """Every object with declared properties has ``additionalProperties: false`` (pydantic ``extra="forbid"``)."""
    objects = dict(_objects(schema))
    assert len(objects) >= 10
    open_ = {path for path, node in objects.items() if node.get("additionalProperties") is not False}
    assert open_ == set(), f"models without extra='forbid': {sorted(open_)}"
    for path in OPEN_OBJECTS:
        node = schema
        for part in path.split("/")[1:]:
            node = node[part]
        assert node.get("additionalProperties") is True and "properties" not in node


BAD = {
    "nnodes-suffix": ("nnodes: 2x\n", "nnodes"),
    "nnodes-zero": ("nnodes: 0\n", "nnodes"),
    "nnodes-range-words": ('nnodes: "one:four"\n', "nnodes"),
    "restart-policy": ("restart_policy: Sometimes\n", "restart_policy"),
    "restart-policy-case": ("restart_policy: exitcode\n", "restart_policy"),
    "clean-pod-policy": ("run_policy: {clean_pod_policy: Nope}\n", "run_policy.clean_pod_policy"),
    "start-method": ("start_method: thread\n", "start_method"),
    "gpu-quantity": ("resources: {requests: {memory: 64Gx}}\n", "resources.requests.memory"),
    "nproc-per-node": ("nproc_per_node: many\n", "nproc_per_node"),
    "shared-memory": ("shared_memory: lots\n", "shared_memory"),
    "unknown-top-level": ("nnode: 2\n", "<root>"),
    "unknown-nested": ("rdzv: {backend: c10d, join_timout: 900}\n", "rdzv"),
    "unknown-run-policy": ("run_policy: {ttl_seconds: 10}\n", "run_policy"),
    "unknown-pod-metadata": ("pod_template: {metadata: {label: {a: b}}}\n", "pod_template.metadata"),
    "unknown-typo": ("comand: [python, x.py]\n", "<root>"),
}


@pytest.mark.parametrize(("extra", "where"), BAD.values(), ids=BAD.keys())
def test_typical_mistakes_are_rejected(extra: str, where: str, validator: Any) -> None:
    """Each mistake fails the published schema at the right field, and the compiler agrees."""
    text = MINIMAL + extra
    errors = _errors(validator, load_text(text, "<test>").data)
    assert errors, f"the schema accepts {extra!r}"
    assert any(e.startswith(f"{where}:") for e in errors), errors
    with pytest.raises(SpecError):
        compile_text(text)
