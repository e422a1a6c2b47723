"""The compile server: a run it takes prints, writes and ends exactly as the same run here.

Every run goes through a small launcher script (``ec.py``) that calls the CLI's ``main`` and
then records whether *this* process loaded the compiler (pydantic): a run the server took
never does, so each test knows which of the two ran it, and a test cannot pass because the
client quietly compiled by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler import server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"

pytestmark = pytest.mark.skipif(not server.available(), reason="the compile server runs on Linux only")

LAUNCHER = """\
import atexit, json, os, sys
from elastic_compile.compiler.cli import run

def report():
    where = os.environ.get("EC_TEST_REPORT")
    if where:
        with open(where, "a") as f:
            f.write(json.dumps({"argv": sys.argv[1:], "compiled_here": "pydantic" in sys.modules}) + "\\n")

atexit.register(report)
run()  # the console script's entry point
"""


class Harness:
    """One cache directory, one launcher, and the environment that runs it with the server on or off."""

    def __init__(self, tmp: Path, extra_path: list[str] | None = None) -> None:
        self.tmp = tmp
        self.cache = tmp / "cache" / "elastic-compile"
        self.report = tmp / "report.jsonl"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        self.launcher = bin_dir / "ec.py"
        self.launcher.write_text(LAUNCHER)
        path = [*(extra_path or []), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self.env = {
            **os.environ,
            "ELASTIC_COMPILE_CACHE_DIR": str(self.cache),
            server.MODE_ENV: "on",
            "EC_TEST_REPORT": str(self.report),
            "PYTHONPATH": os.pathsep.join(path),
        }
        self.env.pop("CI", None)

    def run(
        self, *argv: str, mode: str = "on", cwd: Path | None = None, **kw: Any
    ) -> subprocess.CompletedProcess[bytes]:
        env = {**self.env, server.MODE_ENV: mode, **kw.pop("env", {})}
        check = kw.pop("check", False)
        return subprocess.run(
            [sys.executable, str(self.launcher), *argv],
            env=env,
            cwd=cwd or self.tmp,
            capture_output=kw.pop("capture_output", True),
            check=check,
            **kw,
        )

    def compiled_here(self) -> list[bool]:
        """For each run since the last call: whether it compiled in its own process."""
        if not self.report.exists():
            return []
        lines = self.report.read_text().splitlines()
        self.report.unlink()
        return [json.loads(line)["compiled_here"] for line in lines]

    def start(self) -> int:
        done = self.run("server", "start")
        assert done.returncode == 0, done.stderr
        self.compiled_here()
        return int(done.stdout.split()[2])

    def servers(self) -> dict[str, int]:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import json; from elastic_compile.compiler import server; print(json.dumps(server.running()))",
            ],
            env=self.env,
            capture_output=True,
            check=True,
        )
        return dict(json.loads(done.stdout))

    def stop(self) -> None:
        self.run("server", "stop", check=True)
        assert self.servers() == {}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    try:
        yield h
    finally:
        h.stop()


def _tree(base: Path) -> Path:
    """A small repository: two jobs, one base, one bad spec, and a file of the user's."""
    (base / ".git").mkdir(parents=True)
    jobs = base / "jobs"
    jobs.mkdir()
    shutil.copy(EXAMPLE, jobs / "big.elastic.yaml")
    (jobs / "_team.elastic.yaml").write_text("namespace: ml-team\nlabels: {team: nlp}\n")
    (jobs / "small.elastic.yaml").write_text(
        "extends: _team.elastic.yaml\nname: small\nimage: ghcr.io/example/trainer:1.0\ncommand: [python, train.py]\n"
    )
    (base / "bad.yaml").write_text("name: Bad_Name\nimage: x\ncommand: [python]\nnodes: 0\n")
    (base / "notes.txt").write_text("mine\n")
    return base


def _files(base: Path) -> dict[str, bytes]:
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


COMMANDS = [
    ("jobs/big.elastic.yaml",),
    ("jobs/big.elastic.yaml", "--no-cache"),
    ("jobs/big.elastic.yaml", "--target", "trainjob"),
    ("-o", "deploy", "jobs"),
    ("-o", "deploy", "--check", "jobs"),
    ("jobs/big.elastic.yaml", "--explain"),
    ("bad.yaml", "jobs/small.elastic.yaml"),
    ("--no-such-option",),
    ("missing.yaml",),
    ("schema",),
    ("-o", "notes.txt", "jobs"),
]


def test_a_served_run_is_the_run_here(harness: Harness, tmp_path: Path) -> None:
    """Exit code, stdout, stderr and the files written: the same with the server as without it."""
    harness.start()
    served, here = _tree(tmp_path / "served"), _tree(tmp_path / "here")
    for argv in COMMANDS:
        a = harness.run(*argv, cwd=served)
        b = harness.run(*argv, mode="off", cwd=here)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), argv
        assert _files(served) == _files(here), argv
        assert harness.compiled_here() == [False, True], argv  # the server ran the first, this process the second
    assert len(harness.servers()) == 1


def test_standard_input_and_the_umask_are_the_clients(harness: Harness, tmp_path: Path) -> None:
    harness.start()
    spec = EXAMPLE.read_bytes()
    a = harness.run("-", input=spec)
    b = harness.run("-", input=spec, mode="off")
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)
    assert a.returncode == 0 and b"PyTorchJob" in a.stdout
    # Files written in the run get the client's umask, not the server's (0077).
    tree = _tree(tmp_path / "t")
    done = harness.run("-o", "deploy", "jobs", cwd=tree, preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 0, done.stderr
    assert harness.compiled_here() == [False, True, False]
    modes = {p.stat().st_mode & 0o777 for p in (tree / "deploy").rglob("*.yaml")}
    assert modes == {0o644}


def _holders(pipe_inode: int) -> dict[int, list[int]]:
    """The processes holding the pipe ``pipe_inode`` open: pid -> its descriptors."""
    found: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{pipe_inode}]":
                    found.setdefault(int(pid), []).append(int(fd))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_client_ends_the_run(harness: Harness, how: int) -> None:
    """The run reads a spec from standard input that never ends: only the signal can end it."""
    harness.start()
    with _client_on_a_pipe(harness) as (client, inode, _):
        _worker(client, inode)
        client.send_signal(how)
        _, stderr = client.communicate()
        assert client.returncode == -how
        if how == signal.SIGINT:
            assert b"KeyboardInterrupt" in stderr  # the worker's traceback, as the run here would print it
        for _ in range(2000):
            if not _holders(inode):
                break
            time.sleep(0.01)
        assert not _holders(inode), "the run outlived its client"
    assert len(harness.servers()) == 1  # the server itself goes on


@pytest.mark.parametrize("edited", ["elastic_compile/compiler/lint.py", "yaml/error.py"])
def test_a_changed_compiler_is_never_the_one_that_runs(tmp_path: Path, edited: str) -> None:
    """Edit a file of the package, or of a library it loaded: the server steps aside, the run compiles here."""
    import yaml

    copy = tmp_path / "lib"
    shutil.copytree(ROOT / "elastic_compile", copy / "elastic_compile", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(yaml.__file__).parent, copy / "yaml", ignore=shutil.ignore_patterns("__pycache__"))
    h = Harness(tmp_path, extra_path=[str(copy)])
    try:
        h.start()
        assert h.run(str(EXAMPLE)).returncode == 0
        assert h.compiled_here() == [False]
        notes = copy / edited
        notes.write_text(notes.read_text() + "\n# edited\n")
        done = h.run(str(EXAMPLE), "--no-cache", mode="off")
        again = h.run(str(EXAMPLE), "--no-cache")  # compiled here, not replayed from the result cache
        assert (again.returncode, again.stdout, again.stderr) == (done.returncode, done.stdout, done.stderr)
        assert h.compiled_here() == [True, True]
        # The stale server stopped; the run that compiled here started a new one, which serves.
        h.start()
        assert h.run(str(EXAMPLE)).returncode == 0
        assert h.compiled_here() == [False]
    finally:
        h.stop()


def _raw(h: Harness, payload: bytes, fds: list[int]) -> bytes:
    dir_fd = os.open(h.cache, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (name,) = [n for n in os.listdir(dir_fd) if n.endswith(".sock")]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(f"/proc/self/fd/{dir_fd}/{name}")
            if fds:
                socket.send_fds(sock, [payload], fds)
            else:
                sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            try:
                while chunk := sock.recv(4096):
                    reply += chunk
            except ConnectionResetError:  # dropped with part of the request unread
                pass
            return reply
    finally:
        os.close(dir_fd)


def test_malformed_requests_are_dropped_and_the_server_goes_on(harness: Harness, tmp_path: Path) -> None:
    harness.start()
    header = struct.Struct("!4sI")
    good = {
        "argv": ["--version"],
        "argv0": "ec",
        "env": {},
        "umask": 0o22,
        "stdio": [["utf-8", "strict", False, False, True]] * 3,
        "ignored": [],
    }
    body = json.dumps(good).encode()
    null = os.open(os.devnull, os.O_RDWR)
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        cases = [
            (b"garbage", [here, null, null, null]),  # no header
            (header.pack(b"ECS1", 2**31) + b"{}", [here, null, null, null]),  # claims more than MAX_REQUEST_BYTES
            (header.pack(b"ECS1", len(body)) + body, []),  # no descriptors
            (header.pack(b"ECS1", len(body)) + body, [here, null]),  # two descriptors
            (header.pack(b"ECS1", len(body)) + body, [null, null, null, null]),  # a file as the directory
            (header.pack(b"XXXX", len(body)) + body, [here, null, null, null]),  # not our protocol
            (header.pack(b"ECS1", 2) + b"[]", [here, null, null, null]),  # not a request
            (header.pack(b"ECS1", 40) + json.dumps({**good, "umask": -1}).encode()[:40], [here, null, null, null]),
        ]
        bad = dict(good, env={"A=B": "x"})
        cases.append((header.pack(b"ECS1", len(json.dumps(bad))) + json.dumps(bad).encode(), [here, null, null, null]))
        for payload, fds in cases:
            assert _raw(harness, payload, fds) == b"", payload[:40]
        # A well-formed request is answered "ready" (and goes no further without "go").
        assert _raw(harness, header.pack(b"ECS1", len(body)) + body, [here, null, null, null]) == b"R"
    finally:
        os.close(null)
        os.close(here)
    assert harness.run(str(EXAMPLE)).returncode == 0
    assert harness.compiled_here() == [False]


def _lower_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), min(hard, 512)))


RESTRICTIONS: dict[str, Any] = {
    "rlimit": _lower_limit,
    "nice": lambda: os.nice(5),
    "affinity": lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
}


@pytest.mark.parametrize("restriction", sorted(RESTRICTIONS))
def test_a_more_restricted_process_gets_its_own_server(harness: Harness, restriction: str) -> None:
    """Limits, priority and CPUs are part of the key: a run never gets a server's looser ones."""
    if restriction == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no narrower affinity to set")
    harness.start()
    assert harness.run(str(EXAMPLE), preexec_fn=RESTRICTIONS[restriction]).returncode == 0
    assert harness.run(str(EXAMPLE)).returncode == 0
    assert harness.compiled_here() == [True, False]


def test_the_mode_is_checked(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    done = h.run(str(EXAMPLE), mode="yes")
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr == b'elastic-compile: error: ELASTIC_COMPILE_SERVER: expected auto, on or off (given: "yes")\n'
    for mode, env in (("off", {}), ("on", {"ELASTIC_COMPILE_CACHE_DIR": ""})):
        done = h.run("server", "start", mode=mode, env=env)
        assert done.returncode == 2 and b"no compile server" in done.stderr
    assert h.servers() == {}


def test_auto_starts_one_after_a_run_but_not_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv(server.MODE_ENV, "auto")
    assert server.wanted_after(["spec.yaml"])
    assert not server.wanted_after(["run", "job.yaml"])  # `run` supervises processes: never served
    monkeypatch.setenv("CI", "true")
    assert not server.wanted_after(["spec.yaml"])
    monkeypatch.setenv(server.MODE_ENV, "on")
    assert server.wanted_after(["spec.yaml"])
    monkeypatch.setenv(server.MODE_ENV, "off")
    assert not server.wanted_after(["spec.yaml"])


def test_auto_mode_starts_a_server_for_the_next_run(harness: Harness) -> None:
    assert harness.run(str(EXAMPLE), mode="auto").returncode == 0
    for _ in range(3000):  # it starts in the background: wait for it, at most a minute
        if harness.servers():
            break
        time.sleep(0.02)
    assert harness.run(str(EXAMPLE), mode="auto").returncode == 0
    assert harness.compiled_here() == [True, False]


def test_a_cache_directory_others_may_enter_is_not_used(harness: Harness) -> None:
    harness.start()
    harness.cache.chmod(0o755)
    try:
        done = harness.run(str(EXAMPLE), "--no-cache")
        assert done.returncode == 0
        assert b"is not used" in done.stderr
        assert harness.compiled_here() == [True]
    finally:
        harness.cache.chmod(0o700)


@contextlib.contextmanager
def _client_on_a_pipe(h: Harness, ignore: tuple[int, ...] = ()) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """A client reading its spec from a pipe this test holds: (the client, the pipe's inode, its write end).

    Its signals start as a shell's foreground command has them (whatever runs the suite: a
    background job ignores some), but for ``ignore``. On the way out it is killed, and the
    pipe closed, so that no run outlives a failed test.
    """

    def dispositions() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP):
            signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)

    read, write = os.pipe()
    inode = os.fstat(read).st_ino
    client = subprocess.Popen(
        [sys.executable, str(h.launcher), "-"],
        stdin=read,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=h.env,
        cwd=h.tmp,
        preexec_fn=dispositions,  # noqa: PLW1509 -- it only sets signal dispositions
        # A group of its own, whose parent (this process) is in the session: the kernel stops a
        # process on SIGTSTP only outside an orphaned group, and the suite's own group may be one.
        process_group=0,
    )
    os.close(read)
    try:
        yield client, inode, write
    finally:
        if client.poll() is None:
            client.kill()
        client.communicate()
        with contextlib.suppress(OSError):
            os.close(write)


def _worker(client: subprocess.Popen[bytes], inode: int) -> int:
    """The pid of the worker reading the client's pipe as its standard input, once it runs."""
    for _ in range(2000):
        for pid, fds in _holders(inode).items():
            if pid != client.pid and 0 in fds:
                return pid
        time.sleep(0.01)
    pytest.fail("the run never reached the server")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split()[1] for line in f if line.startswith("State:"))


def test_an_ignored_signal_stays_ignored(harness: Harness) -> None:
    """Under nohup, SIGHUP is ignored by the command, and so by its run in the server."""
    harness.start()
    with _client_on_a_pipe(harness, ignore=(signal.SIGHUP,)) as (client, inode, write):
        worker = _worker(client, inode)
        client.send_signal(signal.SIGHUP)
        os.kill(worker, signal.SIGHUP)  # as a hangup of the terminal would reach it too
        os.write(write, EXAMPLE.read_bytes())
        os.close(write)
        out, err = client.communicate()
        assert client.returncode == 0, err
        assert b"PyTorchJob" in out


def test_a_run_killed_outright_ends_its_client_alike(harness: Harness) -> None:
    harness.start()
    with _client_on_a_pipe(harness) as (client, inode, _):
        os.kill(_worker(client, inode), signal.SIGKILL)  # the OOM killer's way
        _, err = client.communicate()
        assert client.returncode == -signal.SIGKILL
        assert err == b""


def test_ctrl_z_stops_the_run_and_fg_continues_it(harness: Harness) -> None:
    harness.start()
    with _client_on_a_pipe(harness) as (client, inode, write):
        worker = _worker(client, inode)
        client.send_signal(signal.SIGTSTP)
        for _ in range(2000):
            if _state(client.pid) == "T" and _state(worker) == "T":
                break
            time.sleep(0.01)
        assert (_state(client.pid), _state(worker)) == ("T", "T")
        client.send_signal(signal.SIGCONT)
        for _ in range(2000):
            if _state(worker) != "T":
                break
            time.sleep(0.01)
        os.write(write, EXAMPLE.read_bytes())
        os.close(write)
        out, err = client.communicate()
        assert client.returncode == 0, err
        assert b"PyTorchJob" in out


def test_a_large_request_is_served(harness: Harness) -> None:
    """Arguments and environment far above a socket's buffer (the descriptors go with the first bytes)."""
    harness.start()
    big = {f"EC_TEST_FILLER_{i}": "x" * 100_000 for i in range(6)}  # each below the kernel's 128 KiB
    a = harness.run(str(EXAMPLE), env=big)
    b = harness.run(str(EXAMPLE), env=big, mode="off")
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)
    assert harness.compiled_here() == [False, True]


@pytest.mark.parametrize("argv", [[str(EXAMPLE)], [str(EXAMPLE), "--explain"], ["schema"]])
def test_a_reader_gone_ends_the_run_alike(harness: Harness, argv: list[str]) -> None:
    """``elastic-compile ... | head``: the reader closes before the run writes."""
    harness.start()
    ended = []
    for mode in ("on", "off"):
        read, write = os.pipe()
        os.close(read)
        done = harness.run(*argv, mode=mode, stdout=write, capture_output=False, stderr=subprocess.PIPE)
        os.close(write)
        ended.append((done.returncode, done.stderr))
    assert ended[0] == ended[1] == (-signal.SIGPIPE, b"")  # as a shell's `| head` expects: 141


def test_a_removed_cache_directory_ends_its_server(harness: Harness) -> None:
    pid = harness.start()
    shutil.rmtree(harness.cache)
    for _ in range(2000):  # it looks every second
        try:
            if _state(pid) == "Z":
                break
        except OSError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the server outlived its directory")


def test_a_starting_server_is_not_started_twice(harness: Harness) -> None:
    """While a server of the key holds its lock (it runs, or still starts), no other is started."""
    import fcntl

    script = harness.launcher.parent / "start.py"
    script.write_text(
        "import sys\nfrom elastic_compile.compiler import server\n"
        "print(server.key() if sys.argv[1:] else server.start())\n"
    )
    name = subprocess.run([sys.executable, str(script), "key"], env=harness.env, capture_output=True, check=True)
    harness.cache.mkdir(parents=True, mode=0o700)
    lock = os.open(harness.cache / f"server-{name.stdout.decode().strip()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a server that is still loading holds it
        done = subprocess.run([sys.executable, str(script)], env=harness.env, capture_output=True, check=True)
        assert done.stdout == b"None\n"
    finally:
        os.close(lock)
    done = subprocess.run([sys.executable, str(script)], env=harness.env, capture_output=True, check=True)
    assert done.stdout.strip().isdigit()  # the lock free: a server is started (the fixture stops it)


def test_main_in_process_never_hands_a_command_over(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """A caller of ``main`` (a test, a notebook) keeps its own ``sys.stdout``: only the console script is served."""
    from elastic_compile.compiler import cli

    def refuse(argv: Any) -> None:
        raise AssertionError("main() asked a server")

    monkeypatch.setattr(server, "call", refuse)
    monkeypatch.setenv(server.MODE_ENV, "on")
    assert cli.main([str(EXAMPLE)]) == 0
    assert "PyTorchJob" in capsys.readouterr().out


def test_a_removed_current_directory_is_one_line(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        [sys.executable, str(h.launcher), str(EXAMPLE)],
        env=h.env,
        cwd=gone,
        capture_output=True,
        preexec_fn=lambda: os.rmdir(gone),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == b"elastic-compile: error: the current directory no longer exists; run from one that does\n"


@pytest.mark.parametrize("spelling", ["/dev/fd/{fd}", "/dev//fd/{fd}", "/dev/./fd/{fd}", "link", "dirlink/{fd}"])
def test_a_descriptor_named_in_the_arguments_runs_here(harness: Harness, spelling: str) -> None:
    """``elastic-compile <(cat spec)`` names /dev/fd/63, which only this process holds: however spelled."""
    harness.start()
    ended = []
    for mode in ("on", "off"):
        fd = os.open(EXAMPLE, os.O_RDONLY)
        for name, target in (("link", f"/dev/fd/{fd}"), ("dirlink", "/dev/fd")):
            with contextlib.suppress(FileNotFoundError):
                (harness.tmp / name).unlink()
            (harness.tmp / name).symlink_to(target)
        try:
            done = harness.run(spelling.format(fd=fd), "--root", "/", mode=mode, pass_fds=(fd,))
        finally:
            os.close(fd)
        ended.append((done.returncode, done.stdout, done.stderr))
    assert ended[0] == ended[1]
    assert ended[0][0] == 0
    assert harness.compiled_here() == [True, True]


@pytest.mark.parametrize("closed", [0, 2])
def test_a_closed_standard_stream_runs_here(harness: Harness, tmp_path: Path, closed: int) -> None:
    harness.start()
    outputs = []
    for mode in ("on", "off"):
        out = tmp_path / f"{mode}.yaml"
        with out.open("wb") as f:
            done = harness.run(
                str(EXAMPLE), mode=mode, stdout=f, capture_output=False, preexec_fn=lambda: os.close(closed)
            )
        outputs.append((done.returncode, out.read_bytes()))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 0 and outputs[0][1].startswith(b"apiVersion")  # nothing but the manifest in stdout
    assert harness.compiled_here() == [True, True]


@pytest.mark.parametrize("variable", ["PYTHONWARNINGS", "LD_LIBRARY_PATH", "TZ"])
def test_startup_settings_key_the_server(harness: Harness, variable: str) -> None:
    harness.start()
    assert (
        harness.run(str(EXAMPLE), env={variable: "default" if variable == "PYTHONWARNINGS" else "/nowhere"}).returncode
        == 0
    )
    assert harness.run(str(EXAMPLE)).returncode == 0
    assert harness.compiled_here() == [True, False]


def test_an_abbreviated_debug_runs_here(harness: Harness) -> None:
    harness.start()
    assert harness.run(str(EXAMPLE), "--debu").returncode == 0
    assert harness.compiled_here() == [True]


def test_a_run_whose_handler_is_killed_ends_with_its_client(harness: Harness) -> None:
    harness.start()
    with _client_on_a_pipe(harness) as (client, inode, _):
        worker = _worker(client, inode)
        with open(f"/proc/{worker}/stat", "rb") as f:
            handler = int(f.read().rsplit(b")", 1)[1].split()[1])
        os.kill(handler, signal.SIGKILL)
        _, err = client.communicate()
        assert client.returncode == 3
        assert b"ended without an exit status" in err
        for _ in range(2000):
            if not _holders(inode):
                break
            time.sleep(0.01)
        assert not _holders(inode), "the run outlived its client"


def test_a_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    outside = os.fsdecode(b"/tmp/elastic-compile-test-\xff")
    done = h.run(str(EXAMPLE), "-o", outside, mode="off")
    assert done.returncode == 2
    assert done.stderr.count(b"\n") == 1 and b"\\udcff" in done.stderr
    assert not os.path.exists(outside)


def test_a_closed_standard_output_is_one_line(harness: Harness) -> None:
    for mode in ("on", "off"):
        done = harness.run(
            str(EXAMPLE),
            mode=mode,
            capture_output=False,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1),
        )
        assert done.returncode == 2
        assert done.stderr == b"elastic-compile: error: standard output is closed; give -o DIR, or a file to print to\n"


def test_a_prefix_of_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = Harness(tmp_path).run("missing.elastic.yaml", "--deb", mode="off")
    assert done.returncode == 1 and b"Traceback" in done.stderr  # as with --debug: the error raised, not a line


def test_starting_a_server_warns_of_nothing(harness: Harness) -> None:
    """Under ``-W default`` a process that leaves a child running is warned of; the server is meant to outlive it."""
    done = harness.run(str(EXAMPLE), env={"PYTHONWARNINGS": "default"})
    assert done.returncode == 0
    assert done.stderr == b""
    for _ in range(3000):  # let it come up, so that the fixture's stop finds it answering
        if harness.servers():
            break
        time.sleep(0.02)
