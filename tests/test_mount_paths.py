"""A pod_template mount is compared by the path the container sees, not by its spelling.

The runtime resolves ``/dev//shm``, ``//dev/shm`` and ``/dev/./shm/`` to ``/dev/shm``: a user
mount spelled so is the user's /dev/shm (the compiler adds none beside it), and likewise for
the /tmp scratch mount under a read-only root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.specs import MINIMAL as BASE

from elastic_compile import contract
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.schema.models import mount_path

# A relative mountPath passes the API server; the kubelet makes it absolute (makeMounts in
# pkg/kubelet/kubelet_pods.go: MakeAbsolutePath, filepath.Clean("/" + path)).
SPELLINGS = ["/dev//shm", "//dev/shm", "/dev/./shm/", "/dev/x/../shm", "dev/shm", "./dev/shm/"]


def _training(text: str) -> dict[str, Any]:
    (job,) = [o.doc for o in compile_text(BASE + text, "elastic.yaml", ("pytorchjob",)).outputs]
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return dict(next(c for c in pod["containers"] if c["name"] == contract.TRAINING_CONTAINER))


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        ("/dev//shm", "/dev/shm"),
        ("//dev/shm", "/dev/shm"),
        ("///dev/shm/", "/dev/shm"),
        ("/a/./b/../c", "/a/c"),
        ("dev/shm", "/dev/shm"),
        ("../dev/shm/x", "/dev/shm/x"),
    ],
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


@pytest.mark.parametrize("path", ["/tmp/", "//tmp", "/./tmp", "tmp"])
def test_a_user_tmp_mount_however_spelled_gets_no_scratch_beside_it(path: str) -> None:
    training = _training(
        "pod_template:\n  spec:\n    volumes: [{name: mine, emptyDir: {}}]\n"
        "    containers:\n      - name: pytorch\n        securityContext: {readOnlyRootFilesystem: true}\n"
        f"        volumeMounts: [{{name: mine, mountPath: {path}}}]\n"
    )
    assert [m["mountPath"] for m in training["volumeMounts"] if m["name"] != "dshm"] == [path]


SHM_INSIDE = (
    "pod_template:\n  spec:\n    volumes: [{{name: data, emptyDir: {{}}}}]\n"
    "    containers:\n      - name: {container}\n{image}        volumeMounts: [{{name: data, mountPath: {path}}}]\n"
)


@pytest.mark.parametrize("path", ["/dev/shm/data", "/dev//shm/data/", "//dev/shm/a/b", "/dev/./shm/x", "dev/shm/data"])
def test_a_mount_inside_our_shm_is_refused_where_it_is_written(path: str) -> None:
    text = BASE + SHM_INSIDE.format(container="pytorch", image="", path=path)
    with pytest.raises(SpecError) as caught:
        compile_text(text, "elastic.yaml", ("pytorchjob",))
    assert [str(p) for p in caught.value.problems] == [
        f"elastic.yaml:9:48: pod_template.spec.containers[0].volumeMounts[0].mountPath: inside /dev/shm, where the "
        "compiler mounts its memory-backed volume (shared_memory) after yours: a runtime that mounts in list order "
        "hides yours under it; mount it outside /dev/shm, or set shared_memory: false and mount /dev/shm yourself "
        f"(given: {path})"
    ]


@pytest.mark.parametrize(
    ("extra", "container", "path"),
    [
        ("shared_memory: false\n", "pytorch", "/dev/shm/data"),  # no /dev/shm of ours
        ("", "pytorch", "/dev/shmem"),  # beside it, not inside
        ("", "logs", "/dev/shm/data"),  # a sidecar: our /dev/shm is the training container's only
    ],
)
def test_a_mount_near_our_shm_is_fine(extra: str, container: str, path: str) -> None:
    image = "        image: fluent/fluent-bit:3.0\n        restartPolicy: Always\n" if container == "logs" else ""
    text = BASE + extra + SHM_INSIDE.format(container=container, image=image, path=path)
    if container == "logs":
        text = text.replace("    containers:\n", "    initContainers:\n")
    compile_text(text, "elastic.yaml", ("pytorchjob",))


def test_inside_the_users_own_shm_is_theirs() -> None:
    """Both mounts are the user's: the compiler adds no /dev/shm, so nothing of ours can hide theirs."""
    text = BASE + (
        "pod_template:\n  spec:\n    volumes: [{name: data, emptyDir: {}}, {name: mine, emptyDir: {medium: Memory}}]\n"
        "    containers:\n      - name: pytorch\n        volumeMounts:\n"
        "          - {name: mine, mountPath: /dev/shm}\n          - {name: data, mountPath: /dev/shm/data}\n"
    )
    training = _training(text[len(BASE) :])
    assert [m["mountPath"] for m in training["volumeMounts"]] == ["/dev/shm", "/dev/shm/data"]


@pytest.mark.parametrize("path", ["tmp", "./tmp/", "/tmp"])
def test_run_binds_a_relative_emptydir_where_the_kubelet_mounts_it(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a read-only root, ``run`` binds a writable emptyDir at /tmp for ``tmp`` too, not at ./tmp of its cwd."""
    from elastic_compile.localrun.engine import _writable_volumes

    monkeypatch.chdir(tmp_path)  # no ./tmp here: a relative path read from the cwd found nothing to bind
    pod = {"volumes": [{"name": "scratch", "emptyDir": {}}]}
    container = {"volumeMounts": [{"name": "scratch", "mountPath": path}]}
    assert _writable_volumes(pod, container, tmp_path / "pod") == [(str(tmp_path / "pod" / "volume-0"), "/tmp")]
