"""The job loop: start the pods, apply the engine's restart policy, decide success and failure, clean up.

The loop is the kubelet's part (processes, in-place restarts, deletion with a grace
period); each engine module supplies its controller's rules (:class:`EngineRules`):
:mod:`.kubeflow` the training operator's, :mod:`.trainer` Trainer v2's and JobSet's.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final, Protocol

from elastic_compile import contract
from elastic_compile.localrun.process import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    EXIT_TIMEOUT,
    LocalPod,
    Options,
    OrphanSweep,
    Printer,
    RunError,
    _read_lines,
    container_exit_code,
    kill_pod_processes,
    port_busy,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from elastic_compile.localrun.netns import LoopbackNetwork


class EngineRules(Protocol):
    """What an engine's controller decides about its pods; the loop does the rest."""

    @property
    def name(self) -> str:
        """The job's name (pod names start with it)."""

    @property
    def active_deadline(self) -> float | None:
        """Seconds after which the controller fails the job, or None."""

    @property
    def backoff_limit(self) -> int | None:
        """For messages: the limit :meth:`past_backoff_limit` applies (None: no limit)."""

    def describe(self) -> str:
        """The rules in one phrase, printed before the start."""

    def past_backoff_limit(self, restarts: int) -> bool:
        """Whether the job fails now that its pods have restarted in place ``restarts`` times."""

    def replaces(self, policy: str, code: int) -> str | None:
        """Why the controller replaces a pod that failed with ``code`` under ``policy`` (None: it does not)."""

    def past_failed_limit(self, replaced: int) -> bool:
        """Whether the job fails now that ``replaced`` pods were replaced."""

    def success(self, pods: Sequence[LocalPod], pod: LocalPod) -> str | None:
        """Why the job succeeded now that ``pod`` did (None: not yet)."""

    def lost(self, pods: Sequence[LocalPod]) -> str | None:
        """Why the job fails with the pods marked Lost (None: it carries on)."""

    def cleanup_why(self) -> str:
        """Why the pods still running when the job ended are deleted."""


_OPERATOR_ENV_SHOWN: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
# After the job succeeded, the pods still running get this long to exit on their own
# before cleanPodPolicy applies. An elastic pod exits 0 only after its exit barrier,
# which every agent passes together (torch/distributed/elastic/agent/server/api.py), so the others are normally
# a few milliseconds behind; on a cluster the kubelet and the operator take seconds to
# notice the success anyway.
EXIT_BARRIER_GRACE: Final = 10.0
# The kubelet's CrashLoopBackOff for in-place restarts: 10 s doubling to 300 s. Locally
# a tenth of it, so that a crashing pod neither spins nor stalls a test.
CRASH_LOOP_FIRST: Final = 1.0
CRASH_LOOP_MAX: Final = 30.0
POLL_SECONDS: Final = 0.05
# The other pods start once the store host listens, or after this long regardless.
STORE_WAIT_MAX: Final = 60.0
READER_JOIN_SECONDS: Final = 5.0


@dataclass(frozen=True)
class Outcome:
    """How the job ended."""

    phase: str  # Succeeded, Failed, Interrupted, Stuck (a pod that could never finish on the cluster)
    exit_code: int
    reason: str


class Job:
    """Runs the local pods and plays the operator: restarts, success, failure, cleanup."""

    def __init__(
        self,
        pods: list[LocalPod],
        rules: EngineRules,
        opts: Options,
        workdir: Path,
        printer: Printer,
        *,
        store: tuple[LocalPod, int] | None = None,
        network: LoopbackNetwork | None = None,
    ) -> None:
        self.pods = pods
        self.rules = rules
        self.opts = opts
        self.workdir = workdir
        self.printer = printer
        self.t0 = time.monotonic()
        printer.clock = self.elapsed
        # (when, pod, replaced): --kill loses the pod for good, --replace has its controller create it again.
        timed = [(at, name, False) for name, at in opts.kills] + [(at, name, True) for name, at in opts.replaces]
        self.kills = sorted(((at, self._find(name), again) for at, name, again in timed), key=lambda k: k[0])
        # --kill POD@/TEXT/: armed until a pod prints TEXT; then due, and killed by the loop.
        self.line_kills = [(text, self._find(name), False) for name, text in opts.line_kills]
        self.line_kills += [(text, self._find(name), True) for name, text in opts.line_replaces]
        self._due: list[tuple[LocalPod, bool]] = []
        self._kill_lock = threading.Lock()
        # The job's world size as elastic-launch reports it at each rendezvous round (None: not yet).
        self.world_size: int | None = None
        self.world_sizes: list[int] = []
        self._round: set[str] = set()  # the pods that reported the current round
        printer.on_line = self._on_line
        self.signal: int | None = None  # the first SIGINT/SIGTERM received
        self.hurry = False  # a second one, or one while pods are being deleted: SIGKILL now
        self.cleaning = False
        # On a cluster only the pod the endpoint names (worker-0) can host the c10d store:
        # the others reach it by its DNS name, which resolves once that pod runs. Here every
        # pod is 127.0.0.1 and the first to bind would host, so the others wait until the
        # store host listens; losing another pod then never takes the store with it.
        self.store = store
        self.network = network  # the pods' private loopback-only network (None: the host's)
        self._orphans: OrphanSweep | None = None
        if store is not None:
            for pod in pods:
                if pod is not store[0]:
                    pod.start_at = None

    def _find(self, name: str) -> LocalPod:
        for pod in self.pods:
            if name in (pod.name, pod.name.removeprefix(self.rules.name + "-")):
                return pod
        known = ", ".join(p.name for p in self.pods)
        raise RunError(f"--kill {name}: no such pod (pods: {known})")

    def _on_line(self, pod: str, text: str) -> None:
        """A pod printed ``text`` (reader thread): the kills it triggers become due; a new world size is said."""
        with self._kill_lock:
            for armed in [k for k in self.line_kills if k[0] in text]:
                self.line_kills.remove(armed)
                self._due.append((armed[1], armed[2]))
            size = _world_size(text)
            if size is None:
                return
            if size == self.world_size and pod not in self._round:
                self._round.add(pod)  # another pod of the same round
                return
            # A new size, or a pod that reported in this round already: the nodes met again.
            was, self.world_size, self._round = self.world_size, size, {pod}
            self.world_sizes.append(size)
        change = "" if was is None else (f" (was {was})" if was != size else " again")
        self.printer.event(f"world size {size}{change}: {pod}'s workers started in a new rendezvous round")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGINT/SIGTERM handler: the first deletes the job, a second stops waiting for grace periods."""
        if self.signal is None and not self.cleaning:
            self.signal = signum
        else:
            self.hurry = True

    # ------------------------------------------------------------------ pods

    def _start(self, pod: LocalPod) -> None:
        first = pod.starts == 0
        pod.proc = subprocess.Popen(
            self.network.wrap(pod.argv) if self.network is not None else pod.argv,
            cwd=self.workdir,
            env=pod.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a pod of its own: Ctrl-C in the terminal reaches only `run`
        )
        if self._orphans is not None:
            self._orphans.keep.add(pod.proc.pid)  # the pod itself: reaped by Popen, not swept
        pod.state, pod.start_at, pod.started_at, pod.exit_code = "Running", None, self.elapsed(), None
        pod.starts += 1
        assert pod.proc.stdout is not None  # Popen with stdout=PIPE always has it
        pod.reader = threading.Thread(
            target=_read_lines, args=(pod.proc.stdout, pod.name, self.printer), name=f"log-{pod.name}", daemon=True
        )
        pod.reader.start()
        how = "started" if first else "started again"
        self.printer.event(f"{pod.name} {how} (pid {pod.proc.pid}): {shlex.join(pod.pod.argv)}")
        if first:
            shown = [
                f"{k}={v}"
                for k, v in pod.pod.env.items()
                if k.startswith(contract.OPERATOR_ENV_PREFIX) or k in _OPERATOR_ENV_SHOWN
            ]
            self.printer.event(f"{pod.name} operator env: {' '.join(shown)}")

    def _finish_process(self, pod: LocalPod) -> int:
        """Reap the pod's process, kill what is left of it, drain its output; its container exit code."""
        assert pod.proc is not None  # only called for started pods
        code = container_exit_code(pod.proc.wait())
        # When a container's main process ends, the rest of the container goes with it.
        kill_pod_processes(pod)
        if pod.reader is not None:
            pod.reader.join(READER_JOIN_SECONDS)
        pod.exit_code = code
        return code

    def _kill(self, pod: LocalPod, replaced: bool = False) -> Outcome | None:
        """Lose ``pod``'s node (--kill), or lose it and have its controller create the pod again (--replace)."""
        flag = "--replace" if replaced else "--kill"
        if replaced and pod.state == "Running":
            kill_pod_processes(pod)
            code = self._finish_process(pod)
            over = self._recreated(pod, code, f"{pod.name} lost (--replace, exit {code})")
            if over is not None:
                return over
            self.printer.event(
                f"{pod.name} lost (--replace): SIGKILL to every process of the pod (exit {code}); its controller "
                "creates a new pod for it on a free node"
            )
            pod.state, pod.start_at = "Pending", self.elapsed() + CRASH_LOOP_FIRST
            return None
        if pod.state == "Running":
            kill_pod_processes(pod)
            code = self._finish_process(pod)
            self.printer.event(
                f"{pod.name} lost (--kill): SIGKILL to every process of the pod (exit {code}); "
                "not restarted, as if its node had vanished"
            )
        elif pod.state == "Pending" and not replaced:
            self.printer.event(f"{pod.name} lost (--kill) while not running; it will not start")
        else:
            self.printer.event(f"{flag} {pod.name}: the pod is {pod.state.lower()}; nothing to kill")
            return None
        pod.state, pod.start_at = "Lost", None
        return self._lost_check()

    def _on_exit(self, pod: LocalPod) -> Outcome | None:
        """Apply the restart policy to a pod whose process ended; an Outcome when that ends the job."""
        code = self._finish_process(pod)
        ran = self.elapsed() - pod.started_at
        policy = pod.pod.restart_policy
        self.printer.event(f"{pod.name} exited with code {code} after {ran:.1f}s")
        in_place = policy == "Always" or (policy == "OnFailure" and code != 0)
        if pod.sidecars and not in_place:
            # The kubelet does not restart the container, and the sidecars run on: the pod's
            # phase stays Running, so the operator sees neither success nor failure.
            pod.state = "Stuck"
            names = ", ".join(pod.sidecars)
            return Outcome(
                "Stuck",
                EXIT_FAILED,
                f"{pod.name}'s training container exited {code}, but the regular sidecar(s) {names} keep the pod "
                "Running: on the cluster the pod never reaches Succeeded or Failed and the job never completes "
                "(holding its nodes); make them native sidecars (initContainers with restartPolicy: Always, "
                "Kubernetes >= 1.29)",
            )
        if code == 0 and policy != "Always":
            pod.state = "Succeeded"
            reason = self.rules.success(self.pods, pod)
            return None if reason is None else Outcome("Succeeded", EXIT_OK, reason)
        if policy in ("OnFailure", "Always"):
            # The kubelet restarts the container in place; the operator counts it (training-operator v1.9.4
            # pkg/core/job.go).
            pod.restarts += 1
            total = sum(p.restarts for p in self.pods)
            if self.rules.past_backoff_limit(total):
                pod.state = "Failed"
                return Outcome(
                    "Failed",
                    code or EXIT_FAILED,
                    f"{pod.name} exited {code}; backoffLimit {self.rules.backoff_limit} reached: the kubelet's "
                    f"restart count is now {total}, and the operator fails the job once restarts >= backoffLimit "
                    "(it deletes the restarted container at once; run does not start it)",
                )
            delay = min(CRASH_LOOP_MAX, CRASH_LOOP_FIRST * 2 ** (pod.restarts - 1))
            why = "Always restarts even a success" if code == 0 else f"restartPolicy {policy}"
            self.printer.event(f"{pod.name} restarts in place in {delay:g}s ({why}; restart {pod.restarts})")
            pod.state, pod.start_at = "Pending", self.elapsed() + delay
            return None
        replaced = self.rules.replaces(policy, code)
        if replaced is not None:
            over = self._recreated(pod, code, f"{pod.name} exited {code}")
            if over is not None:
                return over
            self.printer.event(f"{pod.name} {replaced}")
            pod.state, pod.start_at = "Pending", self.elapsed()
            return None
        pod.state = "Failed"
        if policy == "ExitCode":
            why = f"exit code {code} is permanent under restartPolicy ExitCode (1-127)"
        else:
            why = f"restartPolicy {policy}: a failed pod fails the job"
        return Outcome("Failed", code, f"{pod.name} failed: {why}")

    def _recreated(self, pod: LocalPod, code: int, what: str) -> Outcome | None:
        """Count a failed pod its controller replaces; the job's failure once that passes backoffLimit."""
        pod.recreated += 1
        total = sum(p.recreated for p in self.pods)
        if not self.rules.past_failed_limit(total):
            return None
        pod.state = "Failed"
        return Outcome(
            "Failed",
            code,
            f"{what}; backoffLimit {self.rules.backoff_limit} reached: {total} failed pod(s) is more than it allows",
        )

    def _lost_check(self) -> Outcome | None:
        """A lost pod that the job cannot do without; the cluster would recreate it elsewhere."""
        reason = self.rules.lost(self.pods)
        if reason is None:
            return None
        lost = [p for p in self.pods if p.state == "Lost"]
        return Outcome("Failed", lost[-1].exit_code or EXIT_SIGNAL_BASE + signal.SIGKILL, reason)

    # ------------------------------------------------------------------ the loop

    def run(self) -> Outcome:
        """Run the job to its end; every pod, and everything a pod detached, is stopped when this returns."""
        with OrphanSweep(keep=set()) as orphans:
            self._orphans = orphans
            try:
                outcome = self._loop()
            except BaseException:
                self.hurry = True  # a bug in run itself: leave nothing behind, and fast
                self._delete([p for p in self.pods if p.state in ("Running", "Pending")], "run failed")
                raise
            self.cleaning = True
            self._cleanup(outcome)
        return outcome

    def _loop(self) -> Outcome:
        while True:
            now = self.elapsed()
            if self.signal is not None:
                name = signal.Signals(self.signal).name
                return Outcome("Interrupted", EXIT_SIGNAL_BASE + self.signal, f"{name}: every pod deleted")
            if self.opts.timeout is not None and now >= self.opts.timeout:
                # Not a verdict on the job: as if the user deleted it.
                return Outcome(
                    "Interrupted", EXIT_TIMEOUT, f"--timeout {self.opts.timeout:g}s reached: every pod deleted"
                )
            if self.rules.active_deadline is not None and now >= self.rules.active_deadline:
                return Outcome("Failed", EXIT_TIMEOUT, f"activeDeadlineSeconds {self.rules.active_deadline:g} reached")
            with self._kill_lock:
                due, self._due = self._due, []
            while self.kills and self.kills[0][0] <= now:
                _at, pod, again = self.kills.pop(0)
                due.append((pod, again))
            for pod, again in due:
                lost = self._kill(pod, again)
                if lost is not None:
                    return lost
            if self.store is not None:
                self._open_store_gate(now)
            for pod in self.pods:
                if pod.start_at is not None and pod.start_at <= now and pod.state == "Pending":
                    self._start(pod)
            for pod in self.pods:
                if pod.state == "Running" and pod.proc is not None and pod.proc.poll() is not None:
                    outcome = self._on_exit(pod)
                    if outcome is not None:
                        return outcome
            if not any(p.state in ("Running", "Pending") for p in self.pods):
                return Outcome("Failed", EXIT_FAILED, "no pod left running and the success rule was not met")
            time.sleep(POLL_SECONDS)

    def _open_store_gate(self, now: float) -> None:
        assert self.store is not None
        host, port = self.store
        listening = self.network.listening(port) if self.network is not None else port_busy(port)
        if host.state == "Pending" or (host.state == "Running" and not listening and now < STORE_WAIT_MAX):
            return
        if host.state == "Running" and now < STORE_WAIT_MAX:
            why = f"{host.name} hosts the rendezvous store on port {port}"
        elif host.state == "Running":
            why = f"{host.name} does not listen on port {port} after {STORE_WAIT_MAX:g}s"
        else:
            why = f"{host.name} is {host.state.lower()}"
        waiting = [p for p in self.pods if p.state == "Pending" and p.start_at is None and p is not host]
        if waiting:
            self.printer.event(f"{why}: starting {', '.join(p.name for p in waiting)}")
        for pod in waiting:
            pod.start_at = now
        self.store = None

    def _cleanup(self, outcome: Outcome) -> None:
        verb = {
            "Succeeded": "succeeded",
            "Failed": "failed",
            "Interrupted": "interrupted",
            "Stuck": "could never finish",
        }[outcome.phase]
        self.printer.event(f"job {verb}: {outcome.reason}")
        active = [p for p in self.pods if p.state in ("Running", "Pending")]
        if outcome.phase == "Succeeded" and active:
            self._settle(active, EXIT_BARRIER_GRACE)
            active = [p for p in self.pods if p.state in ("Running", "Pending")]
        if not active:
            return
        if outcome.phase == "Interrupted":
            why = "the job is deleted"
        elif outcome.phase == "Stuck":
            why = "run deletes a job that could never finish"
        else:
            why = self.rules.cleanup_why()
        self._delete(active, why)

    def _settle(self, pods: list[LocalPod], seconds: float) -> None:
        """Let ``pods`` end on their own for up to ``seconds`` (a pending restart is not started)."""
        for pod in pods:
            if pod.state == "Pending":
                pod.state, pod.start_at = "Deleted", None
        deadline = self.elapsed() + seconds
        while self.elapsed() < deadline and not self.hurry:
            running = [p for p in pods if p.state == "Running"]
            if not running:
                return
            for pod in running:
                if pod.proc is not None and pod.proc.poll() is not None:
                    code = self._finish_process(pod)
                    pod.state = "Succeeded" if code == 0 else "Failed"
                    self.printer.event(f"{pod.name} exited with code {code} after the job ended")
            time.sleep(POLL_SECONDS)

    def _delete(self, pods: list[LocalPod], why: str) -> None:
        """Delete pods as Kubernetes does: SIGTERM, then SIGKILL after the pod's grace period."""
        running = []
        for pod in pods:
            if pod.state != "Running" or pod.proc is None:
                pod.state, pod.start_at = "Deleted", None
                continue
            self.printer.event(f"deleting {pod.name} ({why}): SIGTERM, SIGKILL after {pod.grace:g}s")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pod.proc.pid, signal.SIGTERM)
            running.append((pod, self.elapsed() + pod.grace))
        while running:
            still = []
            for pod, deadline in running:
                assert pod.proc is not None  # only running pods are listed
                if pod.proc.poll() is not None:
                    code = self._finish_process(pod)
                    self.printer.event(f"{pod.name} exited with code {code}")
                elif self.hurry or self.elapsed() >= deadline:
                    self.printer.event(f"{pod.name}: SIGKILL to every process of the pod")
                    kill_pod_processes(pod)
                    self._finish_process(pod)
                else:
                    still.append((pod, deadline))
                    continue
                pod.state = "Deleted"
            running = still
            time.sleep(POLL_SECONDS)
        for pod in pods:  # nothing of any pod may outlive run, whatever state it ended in
            kill_pod_processes(pod)


_WORLD_LINE: Final = f"{contract.LAUNCHER}: {contract.WORLD_SIZE_WORDS}"


def _world_size(text: str) -> int | None:
    """The world size in elastic-launch's line for a rendezvous round, else None."""
    if not text.startswith(_WORLD_LINE):
        return None
    number = text[len(_WORLD_LINE) :].partition(":")[0]
    return int(number) if number.isdigit() else None


def summary(job: Job, outcome: Outcome) -> str:
    """The one-line job summary printed last."""
    states = ", ".join(f"{p.name} {p.state}" for p in job.pods)
    restarts = sum(p.restarts + p.recreated for p in job.pods)
    return (
        f"job {job.rules.name} {outcome.phase} after {job.elapsed():.1f}s: {len(job.pods)} pod(s) ({states}), "
        f"{restarts} restart(s); exit {outcome.exit_code}"
    )
