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


def test_the_install_docs_name_the_wheel_the_build_makes(built: tuple[Path, str]) -> None:
    """README's and docs/install.md's pip and pipx commands name this wheel, at this version."""
    name = built[0].name
    for page in (REPO / "README.md", REPO / "docs" / "install.md"):
        text = page.read_text()
        named = set(re.findall(r"elastic_compile-[^ /`]+\.whl", text))
        assert named == {name}, (page.name, named)
        assert f"pipx install ./dist/{name}" in text and "pip wheel --no-deps -w dist ." in text


def test_the_wheel_size_in_the_docs_is_the_built_one(built: tuple[Path, str]) -> None:
    """docs/install.md quotes bench/launcher_install.py's wheel size: it must still be this wheel's."""
    (kb,) = re.findall(r"a (\d+) KB wheel", (REPO / "docs" / "install.md").read_text())
    actual = built[0].stat().st_size / 1024
    # the bench builds from the whole checkout (LICENSE included): a few KB more than this copy
    assert abs(int(kb) - actual) <= 0.1 * actual, f"docs say {kb} KB, the wheel is {actual:.0f} KB: rerun the bench"


def test_make_demo_says_how_to_reach_the_commands() -> None:
    """After make demo the venv is not on PATH: the demo says how, and types no duration (the bench measures)."""
    demo = subprocess.run(["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    echoed = [line for line in demo.splitlines() if line.startswith("echo ")]
    assert any("source .venv/bin/activate" in line for line in echoed), echoed
    assert not [line for line in echoed if re.search(r"\d+ ?s\b", line)], echoed
    assert "source .venv/bin/activate" in (REPO / "README.md").read_text()


def _extra(requires: list[str], extra: str) -> dict[str, str]:
    """The requirements of one extra: project name -> its version specifier."""
    out = {}
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if f'extra == "{extra}"' in marker:
            name = re.match(r"[A-Za-z0-9_.-]+", spec.strip()).group(0)  # type: ignore[union-attr]
            out[name.lower()] = spec.strip()[len(name) :].strip()
    return out


def _pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines if "==" in line)}


@pytest.mark.parametrize("extra", ["flyte", "flyte2"])
def test_flyte_extras_are_compatible_ranges_pinned_by_the_constraints(built: tuple[Path, str], extra: str) -> None:
    """A user's Flyte release is kept: the extra is a range; development and CI pin the tested release."""
    from packaging.specifiers import SpecifierSet

    _, requires = wheel_metadata(built[0])
    wanted, pins = _extra(requires, extra), _pins()
    assert wanted, requires
    for name, specifier in wanted.items():
        assert "==" not in specifier, f"{extra}: {name}{specifier} is a pin: it would replace the user's release"
        if name.startswith("flyte"):
            # the tested release is the lower bound and inside the range; the next major is outside
            assert name in pins and pins[name] in SpecifierSet(specifier), (name, specifier)
            bounds = {(s.operator, s.version) for s in SpecifierSet(specifier)}
            assert (">=", pins[name]) in bounds and any(op == "<" for op, _ in bounds), (name, specifier)
    # the test extra runs exactly the constrained releases
    for name, specifier in _extra(requires, "test").items():
        if name in pins and name != "torch":
            assert specifier == f"=={pins[name]}", (name, specifier)


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
