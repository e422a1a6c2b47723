"""What users install: the built wheel, its torch requirement, and the launcher in a torch-only image."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from image_env import REPO, build_wheel, image_env, make_image

WORKERS_SCRIPT = REPO / "tests" / "entrypoint" / "elastic_workers.py"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from this checkout, and everything the build printed."""
    wheel, result = build_wheel(tmp_path_factory.mktemp("wheel"))
    return wheel, result.stdout + result.stderr


def wheel_metadata(wheel: Path) -> tuple[dict[str, str], list[str]]:
    with zipfile.ZipFile(wheel) as z:
        (name,) = (n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(z.read(name).decode())
    return dict(message.items()), message.get_all("Requires-Dist") or []


def test_wheel_builds_without_warnings(built: tuple[Path, str]) -> None:
    _wheel, output = built
    # setuptools warns, among others, about a `project.license` table (use an SPDX string).
    assert "warning" not in output.lower(), output


def test_license_is_an_spdx_expression(built: tuple[Path, str]) -> None:
    fields, _ = wheel_metadata(built[0])
    assert fields.get("License-Expression") == "Apache-2.0"


def test_torch_is_a_range_in_every_extra_never_a_pin(built: tuple[Path, str]) -> None:
    _, requires = wheel_metadata(built[0])
    torch = [r for r in requires if re.match(r"torch\b", r)]
    # The compiler needs no torch; the launch extra and the test extra ask for it.
    assert torch and all("extra ==" in r for r in torch), torch
    extras = sorted(re.search(r'extra == "([^"]+)"', r).group(1) for r in torch)  # type: ignore[union-attr]
    assert {"launch", "test"} <= set(extras), extras
    for requirement in torch:
        specifier = requirement.partition(";")[0].removeprefix("torch").strip()
        # A pin (or a cap) would make pip replace the torch build a training image already has.
        assert specifier == ">=2.12", requirement


def test_development_installs_go_through_the_constraints_file() -> None:
    constraints = (REPO / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in constraints  # the CPU wheel on the development machines' disk
    makefile = (REPO / "Makefile").read_text()
    assert "PIP_INSTALL := $(BIN)/pip install --quiet -c $(CONSTRAINTS)" in makefile
    project_installs = [line for line in makefile.splitlines() if "-e ." in line or "-e '." in line]
    assert project_installs and all(line.strip().startswith("$(PIP_INSTALL)") for line in project_installs)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_launcher_runs_in_an_image_with_only_torch(built: tuple[Path, str], tmp_path: Path) -> None:
    bin_dir = make_image(tmp_path / "image", built[0])
    env = image_env()
    probe = (
        "import importlib.util, json, elastic_compile; print(json.dumps("
        "[elastic_compile.__file__, {m: importlib.util.find_spec(m) is not None "
        "for m in ('torch', 'pydantic', 'jinja2', 'yaml')}]))"
    )
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    location, importable = json.loads(out.stdout)
    # The installed wheel, not this checkout; torch, and none of the compiler's dependencies.
    assert location.startswith(str(tmp_path / "image"))
    assert importable == {"torch": True, "pydantic": False, "jinja2": False, "yaml": False}

    results = tmp_path / "out"
    results.mkdir()
    job = ["--", "python", str(WORKERS_SCRIPT), "allreduce", str(results)]
    run = subprocess.run(
        [str(bin_dir / "elastic-launch"), "--nproc-per-node", "2", "--monitor-interval", "0.2", *job],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = sorted((json.loads(p.read_text()) for p in results.glob("allreduce.rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["world_size"], r["sum"]) for r in ranks] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert {r["shared_store"] for r in ranks} == {"False"}  # TORCH_DISABLE_SHARE_RDZV_TCP_STORE reached torch
