"""The launcher-only install: ``pip install --no-deps elastic-compile`` into an image that has torch.

    .venv/bin/python bench/launcher_install.py [--runs 5]

Builds the wheel from this checkout, then, ``--runs`` times: a fresh venv with torch linked
in (tests/image_env.py: no pydantic, jinja2 or PyYAML), and the timed step,
``pip install --no-deps --no-index WHEEL`` with pip run from this venv. Prints the medians
and the sizes: the wheel, what the install adds to site-packages, and what the compiler's
dependencies would have added (measured from this venv's copies of them), and the time
``elastic-launch --dry-run`` takes in that venv (everything up to the torch import).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from image_env import build_wheel, image_env, install_wheel, make_torch_venv, requirement_closure  # noqa: E402


def dist_bytes(dist: metadata.Distribution) -> int:
    """Bytes of the files a distribution installed (its RECORD), caches excluded."""
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if "__pycache__" not in file.parts and path.is_file():
            total += path.stat().st_size
    return total


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheel, _ = build_wheel(work / "wheel")
        install_s, added, dry_run_s = [], 0, []
        for i in range(args.runs):
            bin_dir = make_torch_venv(work / f"image{i}")
            site = next((work / f"image{i}" / "lib").glob("python*/site-packages"))
            before = tree_bytes(site)
            started = time.perf_counter()
            install_wheel(bin_dir, wheel)
            install_s.append(time.perf_counter() - started)
            added = tree_bytes(site) - before
            started = time.perf_counter()
            subprocess.run(
                [str(bin_dir / "elastic-launch"), "--dry-run", "--", "python", "train.py"],
                cwd=work,
                env=image_env(),
                capture_output=True,
                check=True,
            )
            dry_run_s.append(time.perf_counter() - started)
        wheel_bytes = wheel.stat().st_size

    # What a plain `pip install elastic-compile` adds beyond torch's own requirements.
    with_torch = {d.metadata["Name"] for d in requirement_closure("torch", frozenset())}
    skipped = {
        d.metadata["Name"]: dist_bytes(d)
        for d in requirement_closure("elastic-compile", frozenset())
        if d.metadata["Name"] not in with_torch | {"elastic-compile"}
    }
    result = {
        "runs": args.runs,
        "wheel_kb": round(wheel_bytes / 1024),
        "installed_kb": round(added / 1024),
        "pip_install_no_deps_s_median": round(statistics.median(install_s), 2),
        "pip_install_no_deps_s_all": [round(s, 2) for s in install_s],
        "elastic_launch_dry_run_s_median": round(statistics.median(dry_run_s), 3),
        "compiler_dependencies_not_installed_kb": {k: round(v / 1024) for k, v in skipped.items()},
        "compiler_dependencies_not_installed_kb_total": round(sum(skipped.values()) / 1024),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
