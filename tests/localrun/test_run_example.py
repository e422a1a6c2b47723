"""``elastic-compile run examples/cpu-ddp.yaml``: docs/run.md's example trains across two local pods."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from run_helpers import EXAMPLES, run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

POD_LINE = re.compile(r"^\[cpu-ddp-worker-[01]\] ")
SUMMARY = re.compile(
    r"job cpu-ddp Succeeded after [0-9.]+s: 2 pod\(s\) \(cpu-ddp-worker-0 Succeeded, cpu-ddp-worker-1 Succeeded\), "
    r"0 restart\(s\); exit 0$"
)


def test_example_trains_on_two_pods_and_succeeds(tmp_path: Path) -> None:
    result = run([str(EXAMPLES / "cpu-ddp.yaml")], timeout=240, tmpdir=tmp_path)
    assert result.code == 0, result.report
    # The launchers' logs, torch's caches, the pods' TMPDIRs: all in run's own directory, gone with it.
    assert sorted(tmp_path.iterdir()) == [], result.report
    lines = result.out.splitlines()
    assert lines, result.report
    assert all(POD_LINE.match(line) for line in lines), result.report
    # 2 pods x 2 workers: the operator's PET_NNODES=2:2 and PET_NPROC_PER_NODE=2 reached torch.
    # Rank 0, which prints, lives on whichever pod the rendezvous made node 0.
    assert any(re.fullmatch(r"\[cpu-ddp-worker-[01]\] done world_size 4", line) for line in lines), result.report
    assert any(
        re.match(r"\[cpu-ddp-worker-[01]\] step 19 loss [0-9.]+ world_size 4 restart 0$", line) for line in lines
    )
    # In the operator's order, as the real training-operator v1.9.4 writes it (tests/realcluster).
    order = r"PET_NPROC_PER_NODE=2 PET_RDZV_ENDPOINT=127\.0\.0\.1:[0-9]+ PET_RDZV_BACKEND=c10d PET_NNODES=2:2"
    assert re.search(order, result.err), result.report
    assert SUMMARY.search(result.summary), result.report
