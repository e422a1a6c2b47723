"""A quantity that matches the grammar but is absurdly large is one located error, exit 2 (red-team item 5).

``1e1000000`` once overflowed ``decimal`` (``internal error: Overflow``, exit 3) in compiling,
``doctor`` and ``run``; and ``int()`` of such a value would hold a million digits.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.core.quantity import MAX_EXPONENT, OUT_OF_RANGE, is_quantity, out_of_range, quantity_value

SPEC = "name: t\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nresources:\n  requests: {{{field}: {value}}}\n"
MANIFEST = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: x}}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/x/y:1.0
            resources: {{limits: {{cpu: "{value}"}}}}
"""
HUGE = ["1e1000000", "1e999999999", "1E+999999999999", "9" * 40, "1e29Ki", f"1e{MAX_EXPONENT}"]


@pytest.mark.parametrize("text", HUGE)
def test_a_huge_quantity_is_out_of_range_not_an_overflow(text: str) -> None:
    assert quantity_value(text) is None and not is_quantity(text)
    assert out_of_range(text) is (text != "1e29Ki")  # 1e29Ki is not the grammar (an exponent and a suffix)


@pytest.mark.parametrize(
    ("text", "value"),
    [("8Ei", Decimal(1024) ** 6 * 8), ("999999999999Ki", Decimal(999999999999 * 1024)), ("1e29", Decimal("1e29")),
     ("500m", Decimal("0.5")), ("1e-1000000", Decimal("1e-1000000")), ("1e-999999999", Decimal(0))],
)  # fmt: skip
def test_ordinary_and_tiny_quantities_keep_their_value(text: str, value: Decimal) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize("field", ["cpu", "memory"])
@pytest.mark.parametrize("value", ["1e1000000", "'1e999999999'"])
@pytest.mark.parametrize("command", [[], ["run", "--dry-run"]], ids=["compile", "run"])
def test_a_spec_with_a_huge_quantity_is_one_located_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, command: list[str]
) -> None:
    spec = tmp_path / "q.yaml"
    spec.write_text(SPEC.format(field=field, value=value))
    argv = ["run", str(spec), "--dry-run"] if command else [str(spec)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"{spec}:5:{16 + len(field)}: resources.requests.{field}: {OUT_OF_RANGE} (given: {value})"
    ]


def test_doctor_on_a_manifest_with_a_huge_limit_is_a_located_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor reports a manifest's schema problems as findings (exit 1), this one like any other."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.format(value="1e999999999"))
    assert main(["doctor", str(manifest)]) == 1
    captured = capsys.readouterr()
    err = captured.out + captured.err
    assert "internal error" not in err
    line = f"{manifest}:13:39: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu"
    assert f"{line}: DR002 schema: {OUT_OF_RANGE}\n" in err, err
