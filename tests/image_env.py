"""A training image in miniature: a fresh venv with torch, and elastic-compile installed with --no-deps.

This is what a user gets from ``pip install --no-deps elastic-compile`` in an image that
already has torch. The venv is new (not ``--system-site-packages``); torch and the
distributions it requires are symlinked into its site-packages from this interpreter's, so
nothing is downloaded or copied; elastic-compile is installed from a wheel built from this
checkout, without its dependencies. pydantic, jinja2 and PyYAML are left out on purpose
(jinja2 although torch requires it): the launcher must run with only torch and the standard
library, and a test that finds them importable could not tell.

Used by ``tests/test_packaging.py`` and ``bench/launcher_install.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What the compiler needs and the launcher must not: never linked into the image.
EXCLUDED = frozenset({"pydantic", "pydantic-core", "jinja2", "markupsafe", "pyyaml"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(root: str, excluded: frozenset[str] = EXCLUDED) -> list[metadata.Distribution]:
    """``root`` and every installed distribution it requires, transitively, minus ``excluded``.

    Requirements behind an ``extra`` marker are skipped; other markers are not evaluated:
    a requirement whose marker is false here is simply not installed, and one that is
    installed is harmless to include.
    """
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = _normalize(todo.pop())
        if name in seen or name in excluded:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for requirement in dist.requires or []:
            requirement_name, _, marker = requirement.partition(";")
            match = _NAME.match(requirement_name.strip())
            if match and "extra" not in marker:
                todo.append(match.group(0))
    return [seen[name] for name in sorted(seen)]


def top_level_paths(dist: metadata.Distribution) -> list[Path]:
    """The top-level entries a distribution put into site-packages (packages, modules, dist-info)."""
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first not in ("..", "__pycache__") and not first.endswith(".pth"):
            names.add(first)
    return sorted(Path(str(dist.locate_file(name))) for name in names)


def build_wheel(dest: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Build elastic-compile's wheel from a copy of this checkout; returns it and pip's output.

    No build isolation: the build uses this venv's setuptools, so it needs no index and
    shows exactly the warnings a build prints.
    """
    source = dest / "source"
    shutil.copytree(REPO / "elastic_compile", source / "elastic_compile", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dest), str(source)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    if result.returncode != 0:
        raise AssertionError(f"wheel build failed:\n{result.stdout}\n{result.stderr}")
    (wheel,) = dest.glob("elastic_compile-*.whl")
    return wheel, result


def make_torch_venv(dest: Path) -> Path:
    """A new venv at ``dest`` with torch and its requirements linked in; returns its bin dir."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(dest), "platbase": str(dest)}))
    for dist in requirement_closure("torch"):
        for path in top_level_paths(dist):
            link = site / path.name
            if not link.exists():
                link.symlink_to(path)
    return dest / "bin"


def install_wheel(bin_dir: Path, wheel: Path) -> None:
    """``pip install --no-deps WHEEL`` into the venv of ``bin_dir`` (pip runs from this venv)."""
    pip = [sys.executable, "-m", "pip", "--python", str(bin_dir / "python")]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )


def make_image(dest: Path, wheel: Path) -> Path:
    """A torch venv at ``dest`` with ``wheel`` installed without dependencies; returns its bin dir."""
    bin_dir = make_torch_venv(dest)
    install_wheel(bin_dir, wheel)
    return bin_dir


def image_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with nothing that would add to the image's sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra or {})
    return env
