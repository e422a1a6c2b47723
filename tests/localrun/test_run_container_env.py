"""``run`` in the container's own environment (issue 10, classes 4 and 9): real pods, real elastic-launch.

* function mode imports the user's module from the working directory: the console script
  (which ``run`` now starts, as the image would) has only its bin directory on sys.path, so
  this passes only because elastic-launch puts the working directory there itself;
* a read-only root: the pod may write only to its volumes, and the compiled emptyDir at /tmp
  is what elastic-launch's worker logs and the workers' temp files need.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import TRAIN, run, spec

from elastic_compile.localrun import rootfs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

MODULE = """\
import os
import sys
import tempfile


def train(tag: str) -> None:
    tempfile.TemporaryFile().close()  # the workers' temp files need a writable directory
    # One write per line: two workers share the pod's stdout, and print() writes the text and its
    # line break separately when unbuffered, so their lines could interleave.
    sys.stdout.write(f"function {tag} rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}\\n")
    sys.stdout.flush()
"""


def test_function_mode_imports_from_the_working_directory(tmp_path: Path, marker: str) -> None:
    (tmp_path / "tinyfn.py").write_text(MODULE)
    path = tmp_path / "fn.yaml"
    path.write_text(spec("fn", marker, "function: {target: 'tinyfn:train', args: [hello]}\nnproc_per_node: 2\n"))
    result = run([str(path)], timeout=270)
    assert result.code == 0, result.report
    lines = result.out.splitlines()
    assert "[fn-worker-0] function hello rank 0 of 2" in lines and "[fn-worker-0] function hello rank 1 of 2" in lines


@pytest.mark.skipif(rootfs.probe() is not None, reason=f"no mount namespaces here: {rootfs.probe()}")
def test_a_read_only_root_trains_with_the_compiled_tmp(tmp_path: Path, marker: str) -> None:
    body = (
        f"command: [python, {TRAIN}, --steps, '3']\nnproc_per_node: 2\n"
        "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
        "        securityContext: {readOnlyRootFilesystem: true}\n"
    )
    path = tmp_path / "ro.yaml"
    path.write_text(spec("ro", marker, body))
    result = run([str(path), "--workdir", str(tmp_path)], timeout=270)
    assert result.code == 0, result.report
    assert "read-only root filesystem (readOnlyRootFilesystem)" in result.err and "volumes (/tmp)" in result.err
    assert "[ro-worker-0] done world_size 2" in result.out.splitlines(), result.report
