"""A pod_template mount is compared by the path the container sees, not by its spelling.

The runtime resolves ``/dev//shm``, ``//dev/shm`` and ``/dev/./shm/`` to ``/dev/shm``: a user
mount spelled so is the user's /dev/shm (the compiler adds none beside it), and likewise for
the /tmp scratch mount under a read-only root.
"""

from __future__ import annotations

from typing import Any

import pytest

from elastic_compile import contract
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.schema.models import mount_path

BASE = "name: t\nimage: x:1\ncommand: [python, t.py]\n"
SPELLINGS = ["/dev//shm", "//dev/shm", "/dev/./shm/", "/dev/x/../shm"]


def _training(text: str) -> dict[str, Any]:
    (job,) = [o.doc for o in compile_text(BASE + text, "elastic.yaml", ("pytorchjob",)).outputs]
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return dict(next(c for c in pod["containers"] if c["name"] == contract.TRAINING_CONTAINER))


@pytest.mark.parametrize(
    ("given", "seen"),
    [("/dev//shm", "/dev/shm"), ("//dev/shm", "/dev/shm"), ("///dev/shm/", "/dev/shm"), ("/a/./b/../c", "/a/c")],
)
def test_mount_path_is_what_the_container_sees(given: str, seen: str) -> None:
    assert mount_path({"mountPath": given}) == seen


@pytest.mark.parametrize("path", SPELLINGS)
def test_a_user_shm_mount_however_spelled_gets_no_second_one(path: str) -> None:
    training = _training(
        "pod_template:\n  spec:\n    volumes: [{name: mine, emptyDir: {medium: Memory}}]\n"
        f"    containers:\n      - name: pytorch\n        volumeMounts: [{{name: mine, mountPath: {path}}}]\n"
    )
    assert [m["mountPath"] for m in training["volumeMounts"]] == [path]


@pytest.mark.parametrize("path", ["/tmp/", "//tmp", "/./tmp"])
def test_a_user_tmp_mount_however_spelled_gets_no_scratch_beside_it(path: str) -> None:
    training = _training(
        "pod_template:\n  spec:\n    volumes: [{name: mine, emptyDir: {}}]\n"
        "    containers:\n      - name: pytorch\n        securityContext: {readOnlyRootFilesystem: true}\n"
        f"        volumeMounts: [{{name: mine, mountPath: {path}}}]\n"
    )
    assert [m["mountPath"] for m in training["volumeMounts"] if m["name"] != "dshm"] == [path]
