"""Class 4 (compiler side) and class 9 of issue 10: the container's own environment, and a local run
that is never more forgiving than the cluster.

* ``readOnlyRootFilesystem``: the compiled pod mounts an emptyDir at /tmp (the launcher's
  contract.SCRATCH_MOUNT), and ``run`` gives such a pod a read-only root, so a job that writes
  outside its volumes fails here as it would there;
* ``run`` runs the manifest's command itself (the ``elastic-launch`` console script, not
  ``python -m``), in the container's workingDir when this machine has it.

The ``run`` tests start real processes; those marked slow start elastic-launch (torch).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import yaml
from cluster_helpers import BASE, compile_cli, run_cli

from elastic_compile.localrun import rootfs

READ_ONLY = (
    "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
    "        securityContext: {readOnlyRootFilesystem: true}\n"
)


def test_a_read_only_root_gets_a_writable_tmp(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + READ_ONLY)
    assert (run.status, run.err) == (0, "")
    assert {"name": "elastic-tmp", "mountPath": "/tmp"} in run.training["volumeMounts"]
    assert {"name": "elastic-tmp", "emptyDir": {}} in run.pod["volumes"]
    explain = compile_cli(tmp_path, BASE + READ_ONLY, "--explain").out
    assert "# /tmp: an emptyDir (elastic-tmp): readOnlyRootFilesystem leaves the image's /tmp read-only" in explain


def test_a_tmp_of_your_own_is_kept(tmp_path: Path) -> None:
    text = (
        BASE
        + READ_ONLY
        + "        volumeMounts: [{name: t, mountPath: /tmp}]\n    volumes: [{name: t, emptyDir: {medium: Memory}}]\n"
    )
    run = compile_cli(tmp_path, text)
    assert (run.status, run.err) == (0, "")
    assert [v["name"] for v in run.pod["volumes"]] == ["t", "dshm"]


def test_no_tmp_volume_without_a_read_only_root(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE)
    assert "elastic-tmp" not in json.dumps(run.job)


def test_the_tmp_volume_name_is_the_compilers(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "pod_template:\n  spec:\n    volumes: [{name: elastic-tmp, emptyDir: {}}]\n")
    assert run.status == 2
    assert "pod_template.spec.volumes[0].name: elastic-tmp is the compiler's /tmp volume" in run.err


# ----------------------------------------------------------------------------- run


def _job(tmp_path: Path, spec: str, code: str, working_dir: str | None = None) -> Path:
    """A compiled job whose training container runs ``python -c code`` (real processes, no torch)."""
    job = compile_cli(tmp_path, spec).job
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["command"], container["args"] = ["python", "-c", code], []
    if working_dir is not None:
        container["workingDir"] = working_dir
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


needs_namespaces = pytest.mark.skipif(rootfs.probe() is not None, reason=f"no mount namespaces: {rootfs.probe()}")


@needs_namespaces
def test_run_gives_a_read_only_root_to_a_pod_that_asks(tmp_path: Path) -> None:
    code = "open('checkpoint.pt', 'w').write('x')"  # into the working directory, part of the image
    result = run_cli(_job(tmp_path, BASE + READ_ONLY, code), "--workdir", str(tmp_path))
    assert result.status == 1, result.err
    assert "Read-only file system" in result.out
    assert (
        "read-only root filesystem (readOnlyRootFilesystem)" in result.err and "emptyDir volumes (/tmp)" in result.err
    )
    assert not (tmp_path / "checkpoint.pt").exists()
    assert "exit code 1 is permanent under restartPolicy ExitCode" in result.err


@needs_namespaces
def test_its_tmp_volume_is_writable_and_its_own(tmp_path: Path) -> None:
    code = (
        "import tempfile, os; f = tempfile.mkstemp(dir='/tmp')[1]; print('wrote', f); print(sorted(os.listdir('/tmp')))"
    )
    result = run_cli(_job(tmp_path, BASE + READ_ONLY, code), "--workdir", str(tmp_path))
    assert result.status == 0, result.err + result.out
    [listing] = [line for line in result.out.splitlines() if line.startswith("[t-worker-0] [")]
    # A fresh emptyDir: only our file, beside the mount points of this machine's own software when
    # it lives under /tmp (a clone or a venv there, which a cluster's image never has).
    kept = {Path(p).relative_to("/tmp").parts[0] for p in rootfs.keep_paths() if p.startswith("/tmp/")}
    entries = set(ast.literal_eval(listing.removeprefix("[t-worker-0] "))) - kept
    assert len(entries) == 1, entries


def test_without_the_setting_the_pod_writes_as_before(tmp_path: Path) -> None:
    result = run_cli(_job(tmp_path, BASE, "open('out.txt', 'w').write('x')"), "--workdir", str(tmp_path))
    assert result.status == 0, result.err
    assert (tmp_path / "out.txt").read_text() == "x"
    assert "read-only root" not in result.err


def test_run_uses_the_containers_working_dir(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    result = run_cli(_job(tmp_path, BASE, "import os; print(os.getcwd())", working_dir=str(app)))
    assert result.status == 0, result.err
    assert f"[t-worker-0] {app}" in result.out
    assert f"the pods run in the container's workingDir {app}" in result.err


def test_a_working_dir_this_machine_lacks_is_noted(tmp_path: Path) -> None:
    path = _job(tmp_path, BASE, "pass", working_dir="/nonexistent/app")
    result = run_cli(path, "--dry-run")
    assert json.loads(result.out)["workdir"] == str(tmp_path)
    assert (
        f"workingDir /nonexistent/app does not exist here: the pods run in {tmp_path}, which stands for it"
        in result.err
    )


def test_run_runs_the_console_script_the_manifest_names(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(BASE)
    [pod] = json.loads(run_cli(tmp_path / "s.yaml", "--dry-run").out)["pods"]
    assert pod["command"][0] == "elastic-launch"
    assert pod["local_command"][0] == str(Path(sys.executable).parent / "elastic-launch")
