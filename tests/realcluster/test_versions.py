"""cluster/versions.yaml is the one place the control plane's versions are pinned: every go.mod
under cluster/ agrees with it, and each component builds with its release's own dependencies.

go.mod files are read with ``go mod edit -json`` (Go's own parser), the releases' go.mod from
the module cache (``go mod download -json``), so these tests need Go, like the cluster.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import CLUSTER_ROOT, unavailable

#: Module folder -> (versions.yaml key, the release module it builds from).
COMPONENTS = {
    "etcd": ("etcd", "go.etcd.io/etcd/server/v3"),
    "kube": ("kubernetes", "k8s.io/kubernetes"),
    "training-operator": ("training-operator", "github.com/kubeflow/training-operator"),
    "trainer": ("trainer", "github.com/kubeflow/trainer/v2"),
    "jobset": ("jobset", "sigs.k8s.io/jobset"),
}


@pytest.fixture(scope="module")
def go() -> str:
    found = shutil.which("go")
    if found is None:
        unavailable("Go is not on PATH: go.mod files are read with `go mod edit -json`")
    assert found is not None
    return found


def _gomod(go: str, path: Path) -> dict[str, Any]:
    out = subprocess.run([go, "mod", "edit", "-json", str(path)], capture_output=True, text=True, check=True).stdout
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def _requires(mod: dict[str, Any]) -> dict[str, str]:
    return {r["Path"]: r["Version"] for r in mod.get("Require") or []}


def _release_gomod(go: str, module_dir: Path, release: str) -> dict[str, Any]:
    """The go.mod of the release a module folder requires (downloaded into Go's module cache)."""
    out = subprocess.run(
        [go, "mod", "download", "-json", release], cwd=module_dir, capture_output=True, text=True, check=True
    ).stdout
    return _gomod(go, Path(json.loads(out)["GoMod"]))


@pytest.fixture(scope="module")
def versions() -> dict[str, str]:
    loaded: dict[str, str] = yaml.safe_load((CLUSTER_ROOT / "versions.yaml").read_text())
    return loaded


def test_every_module_folder_is_known() -> None:
    folders = {p.parent.name for p in CLUSTER_ROOT.glob("*/go.mod")}
    assert folders == {*COMPONENTS, "launcher"}


@pytest.mark.parametrize("folder", sorted(COMPONENTS))
def test_go_mod_requires_the_pinned_release(go: str, versions: dict[str, str], folder: str) -> None:
    key, release = COMPONENTS[folder]
    mod = _gomod(go, CLUSTER_ROOT / folder / "go.mod")
    assert _requires(mod)[release] == versions[key]
    assert mod.get("Tool"), "the binaries are tool directives, which keep `go mod tidy` from dropping the release"


@pytest.mark.parametrize("folder", sorted(set(COMPONENTS) - {"kube"}))
def test_component_builds_with_its_releases_dependencies(go: str, folder: str) -> None:
    """Our go.mod's version of every module the release requires is the release's own (its build list)."""
    _, release = COMPONENTS[folder]
    ours = _requires(_gomod(go, CLUSTER_ROOT / folder / "go.mod"))
    theirs = _requires(_release_gomod(go, CLUSTER_ROOT / folder, release))
    different = {m: (v, ours.get(m)) for m, v in theirs.items() if ours.get(m, v) != v}
    assert not different, f"module: (the release's, ours): {different}"


def test_kube_replaces_every_staging_module_with_its_release(go: str, versions: dict[str, str]) -> None:
    """The replace list is kubernetes' own at the tag, each staging module at its published release."""
    mod = _gomod(go, CLUSTER_ROOT / "kube" / "go.mod")
    release = _release_gomod(go, CLUSTER_ROOT / "kube", "k8s.io/kubernetes")
    staging = {r["Old"]["Path"] for r in release["Replace"]}
    assert len(staging) >= 30
    replaced = {r["Old"]["Path"]: (r["New"]["Path"], r["New"].get("Version")) for r in mod["Replace"]}
    assert replaced == {m: (m, versions["kubernetes-staging"]) for m in staging}
    assert versions["kubernetes-staging"] == "v0." + versions["kubernetes"].removeprefix("v1.")


def test_launcher_uses_the_client_of_the_pinned_release(go: str, versions: dict[str, str]) -> None:
    requires = _requires(_gomod(go, CLUSTER_ROOT / "launcher" / "go.mod"))
    for m in ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"):
        assert requires[m] == versions["kubernetes-staging"]
