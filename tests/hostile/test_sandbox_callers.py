"""The custom-template sandbox where a bare fork is wrong or /proc is missing (compiler/sandbox.py).

Its hard limits ran in a forked child that read ``/proc/self/status``: without ``/proc``
(macOS, the BSDs) every ``--templates`` compile failed with "the renderer died before it
answered", and a bare ``fork`` from a threaded caller (a notebook, a service calling the
API) may leave the child waiting forever on a lock another thread held. Now a threaded
process starts a new interpreter that limits itself, and without ``/proc`` the
address-space limit is not set, and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Cli
from support.specs import TWO_NODES as SPEC

from elastic_compile import api
from elastic_compile.compiler import sandbox
from elastic_compile.compiler.render import BUILTIN_TEMPLATES

# The built-in template with one more label: its output tells a custom render from ours.
CUSTOM = (
    (BUILTIN_TEMPLATES / "pytorchjob.yaml.j2")
    .read_text()
    .replace(
        "metadata: {{ plan.metadata | to_yaml }}",
        'metadata: {{ dict(plan.metadata, labels={"custom": "yes"}) | to_yaml }}',
    )
)
CPU_LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def _templates(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    (folder / "pytorchjob.yaml.j2").write_text(text)
    return folder


def _labels(folder: Path) -> dict[str, str]:
    labels: dict[str, str] = api.compile_text(SPEC, "pytorchjob", templates=folder).documents[0]["metadata"]["labels"]
    return labels


@pytest.fixture
def another_thread() -> Iterator[None]:
    """A second thread, alive while the test runs (a notebook's, a web server's)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.fixture
def no_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any fork of this process fails the test: a threaded caller must not be forked."""

    def refuse() -> int:
        raise AssertionError("forked a threaded process")

    monkeypatch.setattr(os, "fork", refuse)


# A fresh interpreter is single-threaded (this test process may not be: earlier tests leave
# library threads behind), so the baseline runs there, counting its forks.
SINGLE = """
import os, sys
from pathlib import Path
from elastic_compile import api
forks = []
real = os.fork
def counted():
    pid = real()
    if pid:
        forks.append(pid)
    return pid
os.fork = counted
doc = api.compile_text(sys.argv[1], "pytorchjob", templates=Path(sys.argv[2])).documents[0]
print(doc["metadata"]["labels"], len(forks))
"""


def test_a_single_threaded_caller_forks(tmp_path: Path) -> None:
    """The baseline the other tests change: one thread, the forked child renders."""
    folder = _templates(tmp_path, CUSTOM)
    run = subprocess.run([sys.executable, "-c", SINGLE, SPEC, str(folder)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "{'custom': 'yes'} 1\n"


def test_a_threaded_caller_gets_a_new_interpreter(tmp_path: Path, another_thread: None, no_fork: None) -> None:
    assert _labels(_templates(tmp_path, CUSTOM)) == {"custom": "yes"}


def test_a_threaded_caller_keeps_the_hard_limit(tmp_path: Path, another_thread: None, no_fork: None) -> None:
    """The spawned renderer sets the CPU limit on itself, after its start-up."""
    with pytest.raises(api.CompileError, match=r"pytorchjob\.yaml\.j2: used more than 2 s of CPU"):
        _labels(_templates(tmp_path, CPU_LOOP))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{ nothing.here | tojson }}", "undefined value: 'nothing' is undefined"),
        ("{{ ().__class__ }}", "blocked by the sandbox: access to attribute '__class__' of 'tuple' object is unsafe."),
        ("apiVersion: [", "output is not valid YAML at line 1, column"),
    ],
)
def test_a_threaded_caller_gets_the_same_messages(
    tmp_path: Path, another_thread: None, no_fork: None, text: str, message: str
) -> None:
    with pytest.raises(api.CompileError) as raised:
        _labels(_templates(tmp_path, text))
    assert message in str(raised.value)


def test_without_proc_the_forked_renderer_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS and the BSDs: no /proc/self/status, no /proc/self/task; the CPU limit still holds."""
    assert "1024 MiB of address space" in sandbox.hard_limits()
    monkeypatch.setattr(sandbox, "PROC_STATUS", str(tmp_path / "no-proc" / "status"))
    monkeypatch.setattr(sandbox, "PROC_TASKS", str(tmp_path / "no-proc" / "task"))
    assert sandbox.hard_limits() == ("2 s of CPU", "30 s of wall clock")
    assert _labels(_templates(tmp_path, CUSTOM)) == {"custom": "yes"}
    with pytest.raises(api.CompileError, match="used more than 2 s of CPU"):
        _labels(_templates(tmp_path, CPU_LOOP))


def test_the_command_renders_alike_either_way(tmp_path: Path, cli: Cli, another_thread: None, no_fork: None) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    folder = _templates(tmp_path, CUSTOM)
    code, out, err = cli(spec, "--templates", folder)
    assert (code, err) == (0, "")
    assert out == api.compile_text(SPEC, templates=folder).text()
