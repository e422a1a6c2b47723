"""What elastic-launch leaves behind: no process, no secret, nothing written through a link.

Real processes for the detached children (issue 18 item 7): a worker that double-forks a
``setsid`` daemon, a script that starts ``setsid sleep &``; after the agent exits, no
process carrying the test's marker may be alive. The termination-log and result checks run
on real files, links and FIFOs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from launch_helpers import FAST, Launcher, marked_pids

from elastic_compile import contract as c
from elastic_compile.entrypoint.launch import current_umask, write_result
from elastic_compile.entrypoint.report import hide_env_values, write_termination_log
from elastic_compile.entrypoint.settings import LaunchSettings, UsageError, resolve_settings


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ---------------------------------------------------------------------------- detached children


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("then", "code"), [("return", 0), ("raise", c.EXIT_USER_FAILURE)])
def test_a_workers_daemon_does_not_outlive_the_agent(launcher: Launcher, tmp_path: Path, then: str, code: int) -> None:
    agent = launcher.run(
        [*FAST, "--nproc-per-node", "2", "--function", "elastic_workers:detach", "--", str(tmp_path), then],
        timeout=100,
    )
    assert agent.proc.returncode == code, agent.stderr
    daemon = int((tmp_path / "daemon.0").read_text())
    assert not _pid_alive(daemon), "the detached daemon outlived elastic-launch"
    assert marked_pids(agent.marker) == []
    assert f"stopped 1 process(es) the workers left running: {daemon} (" in agent.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_scripts_background_job_does_not_outlive_the_agent(launcher: Launcher, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}"
    agent = launcher.run(["--monitor-interval", "0.2", "--", "sh", "-c", script], timeout=100)
    assert agent.proc.returncode == 0, agent.stderr
    sleeper = int(pidfile.read_text())
    assert not _pid_alive(sleeper) and marked_pids(agent.marker) == []
    assert f"{sleeper} (sleep)" in agent.stderr


# ---------------------------------------------------------------------------- no env value in the termination log

SECRET = "sk-live-4f9a1c2e7b"


def test_env_values_are_hidden_but_the_launchers_own_are_not() -> None:
    env = {
        "API_TOKEN": SECRET,
        "DB_URL": f"postgres://u:{SECRET}@db",
        c.PET_RDZV_ENDPOINT: "train-worker-0:23456",
        c.ENV_JOB_NAME: "research",
        "SHORT": "abc",
        "HOME": "/home/trainer",
    }
    text = f"boom {SECRET} at postgres://u:{SECRET}@db via train-worker-0:23456 for research abc in /home/trainer"
    assert hide_env_values(text, env) == (
        "boom <$API_TOKEN> at <$DB_URL> via train-worker-0:23456 for research abc in /home/trainer"
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_termination_log_never_copies_an_env_value(launcher: Launcher, tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    args = [*FAST, "--nproc-per-node", "2", "--termination-log", str(term)]
    agent = launcher.run(
        [*args, "--function", "elastic_workers:raise_error", "--", f"token {SECRET} rejected"],
        env={"API_TOKEN": SECRET},
        timeout=100,
    )
    assert agent.proc.returncode == c.EXIT_USER_FAILURE, agent.stderr
    summary = term.read_text()
    assert "ValueError: token <$API_TOKEN> rejected" in summary
    assert SECRET not in summary


# ---------------------------------------------------------------------------- never through a link


def test_termination_log_is_not_written_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, link = tmp_path / "precious", tmp_path / "termination-log"
    target.write_text("keep me")
    link.symlink_to(target)
    for create in (True, False):
        assert not write_termination_log(str(link), "failure", create=create, environ={})
    assert target.read_text() == "keep me" and link.is_symlink()
    assert "is a symbolic link: not written through" in capsys.readouterr().err


def test_termination_log_is_not_written_into_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "termination-log"
    os.mkfifo(fifo)
    assert not write_termination_log(str(fifo), "failure", create=False, environ={})  # and does not block


def test_termination_log_created_with_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert write_termination_log(str(path), "x", create=True, environ={})
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~current_umask()


def _settings(result: Path) -> LaunchSettings:
    return resolve_settings(["--function", "json:dumps", "--result", str(result), "--", "x"], {})


def test_result_path_that_is_a_link_is_refused_at_start(tmp_path: Path) -> None:
    target, link = tmp_path / "precious", tmp_path / "result.json"
    target.write_text("keep me")
    link.symlink_to(target)
    with pytest.raises(UsageError, match="a symbolic link; give the path of the file itself"):
        _settings(link)
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError, match="exists and is not a regular file"):
        _settings(tmp_path / "dir")


def test_result_link_planted_during_the_run_is_refused(tmp_path: Path) -> None:
    target, result = tmp_path / "precious", tmp_path / "result.json"
    settings = _settings(result)
    target.write_text("keep me")
    result.symlink_to(target)  # a worker put it there while training ran
    outcome = write_result(settings, {0: {"loss": 0.1}})
    assert outcome.exit_code == c.EXIT_USAGE and "a symbolic link" in outcome.headline
    assert target.read_text() == "keep me" and result.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious", "result.json"]  # no temp file left


def test_result_file_gets_the_umask_mode(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    assert write_result(_settings(result), {0: [1, 2]}).exit_code == 0
    assert result.read_text() == "[1, 2]\n"
    assert stat.S_IMODE(result.stat().st_mode) == 0o666 & ~current_umask()


# ---------------------------------------------------------------------------- scratch


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 3", 3)])
def test_the_log_directory_it_made_is_removed(launcher: Launcher, tmp_path: Path, script: str, code: int) -> None:
    """Success or failure (error files written and read into the report), $TMPDIR is as it was; a --log-dir stays."""
    fresh, kept = tmp_path / "tmp", tmp_path / "logs"
    fresh.mkdir()
    agent = launcher.run([*FAST, "--nproc-per-node", "2", "--", "sh", "-c", script], env={"TMPDIR": str(fresh)})
    assert agent.proc.returncode == code, agent.stderr
    assert sorted(fresh.iterdir()) == []
    agent = launcher.run([*FAST, "--log-dir", str(kept), "--", "sh", "-c", script], env={"TMPDIR": str(fresh)})
    assert agent.proc.returncode == code, agent.stderr
    assert sorted(fresh.iterdir()) == [] and any(kept.iterdir())  # the user's own directory keeps torch's logs
