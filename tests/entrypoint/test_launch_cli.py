"""The ``elastic-launch`` command line: import weight, one-line errors, help, dry run."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from launch_helpers import LAUNCH, REPO, base_env

from elastic_compile import contract as c
from elastic_compile.entrypoint.cli import main


def launch(*argv: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCH, *argv], cwd=REPO, env=base_env(env), capture_output=True, text=True, timeout=timeout, check=False
    )


def python(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


IMPORT_CHECK = """
import json, sys
before = set(sys.modules)
import elastic_compile.entrypoint, elastic_compile.entrypoint.cli, elastic_compile.entrypoint.worker
from elastic_compile.entrypoint.cli import main
codes = [main(["--nnodes", "2x", "--", "true"]), main(["--dry-run", "--", "true"])]
new = set(sys.modules) - before
forbidden = ("torch", "jinja2", "pydantic", "yaml", "elastic_compile.compiler", "elastic_compile.schema")
print(json.dumps({
    "codes": codes,
    "third_party": sorted({m.split(".")[0] for m in new} - set(sys.stdlib_module_names)),
    "forbidden": sorted(m for m in sys.modules if m.split(".")[0] in forbidden or m.startswith(forbidden)),
}))
"""


def test_entrypoint_imports_only_stdlib_and_contract() -> None:
    # A usage error and a dry run both finish before torch is imported.
    done = python(IMPORT_CHECK)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": [c.EXIT_USAGE, 0], "third_party": ["elastic_compile"], "forbidden": []}


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["--nnodes", "2x", "--", "true"], {}, "--nnodes: expected N or MIN:MAX, e.g. 1:4 (given: 2x)"),
        (
            ["--nnodes", "2", "--", "true"],
            {c.PET_NNODES: "1:2"},
            "--nnodes 2 (manifest option) conflicts with PET_NNODES=1:2 (operator env): "
            "the manifest and the operator disagree; make them match",
        ),
        (["--bogus", "--", "true"], {}, "unrecognized arguments: --bogus"),
        (["--start-method"], {}, "argument --start-method: expected one argument"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], env: dict[str, str], line: str) -> None:
    done = launch(*argv, env=env)
    assert (done.returncode, done.stdout) == (c.EXIT_USAGE, "")
    assert done.stderr == f"elastic-launch: error: {line}\n"


def test_usage_error_reaches_the_termination_log(tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    done = launch("--termination-log", str(term), "--nnodes", "2", "--", "true")
    assert done.returncode == c.EXIT_USAGE
    assert term.read_text() == "elastic-launch: error: " + done.stderr.removeprefix("elastic-launch: error: ").rstrip(
        "\n"
    )


def test_missing_torch_gives_an_install_hint() -> None:
    done = python(
        "import sys; sys.modules['torch'] = None\n"  # what `import torch` sees when it is absent
        "from elastic_compile.entrypoint.cli import main\n"
        "sys.exit(main(['--', 'true']))"
    )
    assert done.returncode == c.EXIT_USAGE
    # The hint never names the [launch] extra: in an image without torch, pip would fetch a CUDA torch.
    assert done.stderr == (
        "elastic-launch: error: torch is not installed; elastic-launch needs torch 2.12 or newer in the image: "
        "start from an image with torch, or install the torch build for its hardware (CUDA, ROCm or CPU: "
        "https://pytorch.org/get-started/locally/), then pip install --no-deps elastic-compile (docs/install.md)\n"
    )


# torch 2.11's LaunchConfig: every field of this torch's but shutdown_timeout (pytorch#172596, 2.12).
OLD_TORCH = """
import dataclasses, sys
from torch.distributed.launcher import api
kept = [(f.name, f.type, f) for f in dataclasses.fields(api.LaunchConfig) if f.name != "shutdown_timeout"]
api.LaunchConfig = dataclasses.make_dataclass("LaunchConfig", kept)
from elastic_compile.entrypoint.cli import main
sys.exit(main(["--termination-log", sys.argv[1], "--", "true"]))
"""


def test_torch_older_than_2_12_is_a_permanent_error(tmp_path: Path) -> None:
    """An image with an older torch fails with exit 2 and one line, not 203 (retryable: recreated forever)."""
    term = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-c", OLD_TORCH, str(term)],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == c.EXIT_USAGE, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("elastic-launch: error: torch ") and "LaunchConfig has no shutdown_timeout" in line
    assert "torch 2.12 or newer" in line
    assert term.read_text() == line


def test_help_lists_every_contract_option() -> None:
    # The compiler writes these names; the parser must define every one of them.
    done = launch("--help")
    assert done.returncode == 0 and done.stderr == ""
    options = sorted(value for name, value in vars(c).items() if name.startswith("OPT_"))
    assert [o for o in options if o not in done.stdout.split()] == []


def test_help_names_what_compiled_jobs_pass_where_it_differs() -> None:
    """elastic-launch's defaults are torch's; a compiled job passes the schema's, and --help says which."""
    from elastic_compile.schema.models import ElasticSpec, Rendezvous

    done = launch("--help")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    read_timeout = Rendezvous.model_fields["read_timeout"].default
    restarts = ElasticSpec.model_fields["max_restarts"].default
    assert (read_timeout, restarts) == (c.COMPILED_READ_TIMEOUT, c.COMPILED_MAX_RESTARTS)
    assert (
        "--read-timeout SECONDS rendezvous read_timeout; default 60 (torch's); a compiled job passes elastic.yaml's "
        f"rdzv.read_timeout, whose default is {read_timeout}"
    ) in text
    assert (
        "--max-restarts N env PET_MAX_RESTARTS; default 0 (torchrun's); a compiled job passes elastic.yaml's "
        f"max_restarts, whose default is {restarts}"
    ) in text


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / c.LAUNCHER
    if not script.exists():
        pytest.skip("package not installed as a console script in this environment")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.startswith("usage: elastic-launch")


def test_dry_run_prints_the_resolved_settings() -> None:
    env = {c.PET_NNODES: "1:4", c.PET_RDZV_ENDPOINT: "train-worker-0:23456", c.ENV_JOB_NAME: "train"}
    done = launch("--dry-run", "--nproc-per-node", "cpu", "--", "python", "train.py", env=env)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert (view["min_nodes"], view["max_nodes"], view["run_id"]) == (1, 4, "train")
    assert isinstance(view["nproc_per_node"], int) and view["nproc_per_node"] >= 1
    assert view["sources"]["nnodes"] == "env PET_NNODES"


def test_main_refuses_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (c.PET_NNODES, c.PET_RDZV_ENDPOINT, c.PET_RDZV_ID):
        monkeypatch.delenv(name, raising=False)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(["--", "true"])))
    thread.start()
    thread.join(30)
    assert codes == [c.EXIT_USAGE]
