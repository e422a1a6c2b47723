"""Property: every spec the compiler accepts, elastic-launch accepts in the pod.

Hypothesis writes specs (valid and not: run ids, hosts, rendezvous keys and values, ports,
durations in every form the schema reads), compiles each to a PyTorchJob, gives every pod
the command and environment the training operator would (``localrun.kubeflow.pods``: its PET_*
variables after the container's own env, ``$(VAR)`` expanded as the kubelet does), and
resolves that command exactly as ``elastic-launch --dry-run`` does. A spec the schema
refuses is fine; a compiled pod the launcher refuses is the bug this test exists for
(``rdzv.id: experiments/42`` compiled and every pod exited 2).

The tally (specs generated, compiled, pods resolved, refusals) is printed at the end of
the module; ``ELASTIC_LAUNCH_PROPERTY_EXAMPLES`` raises the example count for a long run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_compile import contract as c
from elastic_compile import contract_values as cv
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.entrypoint import UsageError, resolve_settings
from elastic_compile.localrun import trainer
from elastic_compile.localrun.kubeflow import pods

EXAMPLES = int(os.environ.get("ELASTIC_LAUNCH_PROPERTY_EXAMPLES", "300"))
TALLY: Counter[str] = Counter()

# Function targets that import here (the launcher locates the module, as in the pod).
FUNCTIONS = ["json:dumps", "os.path:join", "textwrap:dedent"]
# Script commands whose first word the launcher finds on this machine's PATH.
PROGRAMS = ["python", "python3", "sh", sys.executable]

printable = st.characters(min_codepoint=32, max_codepoint=126)
junk = st.text(printable, max_size=12) | st.text(max_size=6)  # anything, unicode included


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten: most specs compile, and each field still meets junk."""
    # Hypothesis favours the simplest draw (0), so 0 must mean valid.
    return st.integers(0, 9).flatmap(lambda i: invalid if i == 9 else valid)


label = st.from_regex(r"\A[a-z0-9_]([a-z0-9_-]{0,8}[a-z0-9_])?\Z")
hosts = mostly(
    st.lists(label, min_size=1, max_size=3).map(".".join)
    | st.ip_addresses(v=4).map(str)
    | st.ip_addresses(v=6).map(str)
    | st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    junk,
)
run_ids = mostly(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,30}\Z"), st.just("none") | st.just("a/b") | junk)

# "1h2m3s", "45m", "90s" (a part left out when zero; all zero is "1s"), within the 7-day bound.
unit_timeouts = st.tuples(st.integers(0, 99), st.integers(0, 999), st.integers(0, 9999)).map(
    lambda hms: "".join(f"{n}{u}" for n, u in zip(hms, "hms", strict=True) if n) or "1s"
)
timeouts = mostly(
    st.integers(1, cv.MAX_TIMEOUT_SECONDS) | st.integers(1, 10**5).map(float) | unit_timeouts,
    st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.sampled_from(["0755", "1:30", "\u09ea\u09ecs"]) | junk,
)
intervals = mostly(
    st.floats(cv.MIN_INTERVAL_SECONDS, cv.MAX_INTERVAL_SECONDS)
    | st.integers(1, 3600)
    | st.from_regex(r"\A[1-9][0-9]{0,2}(\.[0-9]{1,3})?s\Z"),
    st.floats(allow_nan=True) | junk,
)
ports = mostly(st.integers(cv.MIN_PORT, cv.MAX_PORT), st.integers(-1, 70000))
conf_values = mostly(
    st.from_regex(r"\A[A-Za-z0-9_./=:-]([A-Za-z0-9_./=: -]{0,8}[A-Za-z0-9_./=:-])?\Z")
    | st.sampled_from(["1", "yes", "no", "tcp", "https", "5"]),
    junk,
)
conf_keys = st.sampled_from(
    [
        "is_host",
        "store_type",
        "keep_alive_interval",
        "keep_alive_max_attempt",
        "protocol",
        "ssl_cert",
        "ca_cert",
        "cert",
        "etcd_prefix",
        "timeout",
        "is_hots",
    ]
)
args = st.lists(
    st.text(printable, max_size=8) | st.sampled_from(["$(ELASTIC_LAUNCH_POD_NAME)", "--", "-x"]), max_size=3
)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": draw(st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z")), "image": "x:1"}
    lo = draw(st.integers(1, 4))
    hi = draw(st.integers(lo, 5))
    spec["nnodes"] = draw(st.sampled_from([lo, f"{lo}:{hi}", hi]))
    if draw(st.booleans()):
        spec["nproc_per_node"] = draw(st.integers(1, 8) | st.sampled_from(["auto", "cpu"]))
    if draw(st.booleans()):
        spec["function"] = {"target": draw(st.sampled_from(FUNCTIONS)), "args": draw(args)}
    else:
        spec["command"] = [draw(st.sampled_from(PROGRAMS)), *draw(args)]
    rdzv: dict[str, Any] = {}
    backend = draw(st.sampled_from(["c10d", "c10d", "etcd", "etcd-v2"]))
    if backend != "c10d":
        rdzv["backend"] = backend
    for key, strategy in (("host", hosts), ("id", run_ids), ("port", ports)):
        if draw(st.booleans()) or (key == "host" and backend != "c10d"):
            rdzv[key] = draw(strategy)
    for key in cv.TIMEOUT_KEYS:
        if draw(st.integers(0, 3)) == 0:
            rdzv[key] = draw(timeouts)
    if draw(st.booleans()):
        # Keys the chosen backend reads, mostly (a foreign or misspelt key is refused).
        known = sorted(cv.BACKEND_KEYS[backend])
        rdzv["conf"] = draw(st.dictionaries(mostly(st.sampled_from(known), conf_keys), conf_values, max_size=2))
    if rdzv:
        spec["rdzv"] = rdzv
    for key, strategy in (
        ("max_restarts", st.integers(0, 1000)),
        ("monitor_interval", intervals),
        ("shutdown_timeout", timeouts),
        ("start_method", st.sampled_from(["spawn", "fork", "forkserver"])),
    ):
        if draw(st.integers(0, 2)) == 0:
            spec[key] = draw(strategy)
    return spec


def launcher_view(spec: dict[str, Any]) -> list[tuple[str, tuple[str, ...], dict[str, str]]] | None:
    """Each pod's (name, argv, env) as the operator creates it; None if the schema refuses the spec."""
    try:
        compiled = compile_text(json.dumps(spec), "spec.yaml")
    except SpecError:
        return None
    job = compiled.outputs[0].doc
    return [(p.name, p.argv, p.env) for p in pods(job, local=False)]


def for_trainjob(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without what -t trainjob always refuses (a backend, host or port); an elastic range stays."""
    out = {**spec, "target": "trainjob"}
    rdzv = {k: v for k, v in spec.get("rdzv", {}).items() if k not in ("backend", "host", "port")}
    if "conf" in rdzv:  # keys of the c10d rendezvous that elastic-launch runs at node 0
        rdzv["conf"] = {k: v for k, v in rdzv["conf"].items() if k in cv.BACKEND_KEYS["c10d"] or k == "is_hots"}
    out["rdzv"] = rdzv
    return out


def trainjob_view(spec: dict[str, Any]) -> list[tuple[str, tuple[str, ...], dict[str, str]]] | None:
    """The same for ``-t trainjob``: each pod as Trainer and JobSet create it (``localrun.trainer.pods``)."""
    try:
        compiled = compile_text(json.dumps(spec), "spec.yaml")
    except SpecError:
        return None
    docs = {o.doc["kind"]: o.doc for o in compiled.outputs}
    return [(p.name, p.argv, p.env) for p in trainer.pods(docs["TrainJob"], docs.get("TrainingRuntime"), local=False)]


@pytest.fixture(scope="module", autouse=True)
def tally() -> Iterator[None]:
    yield
    if TALLY["generated"]:
        print(
            f"\nlaunch property: {TALLY['generated']} specs generated, {TALLY['compiled']} compiled, "
            f"{TALLY['pods']} pods resolved by elastic-launch --dry-run, {TALLY['refused']} refused"
        )


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs())
def test_every_compiled_pod_passes_the_launcher(spec: dict[str, Any]) -> None:
    TALLY["generated"] += 1
    view = launcher_view(spec)
    if view is None:
        return
    TALLY["compiled"] += 1
    for name, argv, env in view:
        assert argv[0] == c.LAUNCHER
        try:
            settings_ = resolve_settings([c.OPT_DRY_RUN, *argv[1:]], env)
        except UsageError as e:
            TALLY["refused"] += 1
            pytest.fail(f"the compiler accepted {spec!r} but elastic-launch refuses pod {name}: {e}")
        TALLY["pods"] += 1
        assert settings_.dry_run


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs().map(for_trainjob))
def test_every_compiled_trainjob_pod_passes_the_launcher(spec: dict[str, Any]) -> None:
    """The same property for a TrainJob: the five PET_* variables, ``--rdzv-at-master``, node 0 hosting."""
    view = trainjob_view(spec)
    if view is None:
        return
    for name, argv, env in view:
        assert argv[0] == c.LAUNCHER
        try:
            settings_ = resolve_settings([c.OPT_DRY_RUN, *argv[1:]], env)
        except UsageError as e:
            pytest.fail(f"the compiler accepted {spec!r} for -t trainjob but elastic-launch refuses pod {name}: {e}")
        assert settings_.dry_run


def test_the_generator_compiles_most_specs() -> None:
    """Guard against a vacuous property: most generated specs must compile (counted by hypothesis' own run)."""
    seen = Counter[str]()

    @settings(max_examples=200, deadline=None, database=None)
    @given(spec=specs())
    def count(spec: dict[str, Any]) -> None:
        seen["generated"] += 1
        view = launcher_view(spec)
        seen["compiled"] += view is not None
        seen["rdzv"] += view is not None and "rdzv" in spec

    count()
    assert seen["compiled"] >= seen["generated"] // 2, seen
    assert seen["rdzv"] >= seen["generated"] // 4, seen


# rdzv.conf.is_host reaches every pod alike: it compiles only where one value is right for all of them.
IS_HOST_CASES = [
    ({"nnodes": 1, "rdzv": {"conf": {"is_host": "true"}}}, [True]),
    ({"nnodes": 2, "rdzv": {"host": "store.example.com", "conf": {"is_host": "false"}}}, [False, False]),
    ({"nnodes": 2}, [True, None]),  # elastic-launch: worker-0 is the pod the endpoint names
    ({"nnodes": "1:2", "rdzv": {"conf": {"is_host": "true"}}}, None),  # every pod would start a store
    ({"nnodes": 2, "rdzv": {"conf": {"is_host": "false"}}}, None),  # none would host it
    ({"nnodes": 2, "target": "flyte", "rdzv": {"conf": {"is_host": "no"}}}, None),
]


@pytest.mark.parametrize(("extra", "hosts"), IS_HOST_CASES, ids=range(len(IS_HOST_CASES)))
def test_is_host_compiles_only_where_the_pods_agree(extra: dict[str, Any], hosts: list[bool | None] | None) -> None:
    spec = {"name": "train", "image": "x:1", "command": ["python", "train.py"], **extra}
    if hosts is None:
        with pytest.raises(SpecError, match=r"rdzv\.conf\.is_host: every pod of a multi-node job"):
            compile_text(json.dumps(spec), "spec.yaml")
        return
    view = launcher_view(spec)
    assert view is not None
    seen = [resolve_settings([c.OPT_DRY_RUN, *argv[1:]], env).rdzv_configs.get("is_host") for _, argv, env in view]
    assert seen == hosts


ROOT = Path(__file__).resolve().parents[2]
CONSOLE = Path(sys.executable).with_name(c.LAUNCHER)

# Values that used to compile and then fail in every pod, and their neighbours.
EDGE_SPECS = [
    {"rdzv": {"id": "team.exp-42:run_1", "host": "rdzv.example.com", "port": 29400}},
    {"rdzv": {"host": "[fd00::1]", "conf": {"is_host": "no", "keep_alive_interval": "10"}}},
    {"rdzv": {"host": "fd00::1", "join_timeout": "1h30m", "read_timeout": 604800}},
    {"rdzv": {"backend": "etcd-v2", "host": "etcd", "conf": {"protocol": "https", "ca_cert": "/ssl/ca=1.pem"}}},
    {"monitor_interval": 0.30000000000000004, "shutdown_timeout": "90s", "nnodes": "1:3"},
]


@pytest.mark.parametrize("extra", EDGE_SPECS, ids=range(len(EDGE_SPECS)))
def test_edge_specs_pass_the_real_console_script(extra: dict[str, Any]) -> None:
    spec = {"name": "edge", "image": "x:1", "command": ["python", "train.py"], "nnodes": 2, **extra}
    view = launcher_view(spec)
    assert view is not None, "the schema refused an edge spec meant to compile"
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    for name, argv, env in view:
        done = subprocess.run(
            [str(CONSOLE), c.OPT_DRY_RUN, *argv[1:]],
            env={**keep, **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"
        resolved = json.loads(done.stdout)
        assert resolved["run_id"] == extra.get("rdzv", {}).get("id", "default.edge")
