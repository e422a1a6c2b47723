"""Option/env resolution: what ``elastic-launch ARGV`` runs in a given environment (no torch)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_compile import contract as c
from elastic_compile.entrypoint import LaunchSettings, UsageError, resolve_settings

SCRIPT = ["--", "python", "train.py", "--lr", "1e-4"]
DEFAULT_TIMEOUTS = {
    "join_timeout": 900,
    "last_call_timeout": 30,
    "close_timeout": 30,
    "heartbeat_timeout": 5,
    "read_timeout": 60,
}
# What the operator injects into an elastic Worker pod (training-operator v1.9.4 pkg/controller.v1/pytorch/envvar.go,
# elastic.go), plus the compiler's downward-API variables.
OPERATOR_ENV = {
    c.PET_NNODES: "1:3",
    c.PET_NPROC_PER_NODE: "4",
    c.PET_RDZV_ENDPOINT: "train-worker-0:23456",
    c.PET_RDZV_BACKEND: "c10d",
    c.PET_MAX_RESTARTS: "3",
    c.ENV_NAMESPACE: "research",
    c.ENV_JOB_NAME: "train",
    c.ENV_POD_NAME: "train-worker-1",
    c.ENV_POD_IP: "10.0.3.7",
}


def resolve(argv: list[str], env: dict[str, str] | None = None) -> LaunchSettings:
    return resolve_settings(argv, env or {})


def error(argv: list[str], env: dict[str, str] | None = None) -> str:
    with pytest.raises(UsageError) as e:
        resolve(argv, env)
    return str(e.value)


# ------------------------------------------------------------------------- defaults and env


def test_defaults_single_node_script() -> None:
    s = resolve(SCRIPT)
    assert (s.min_nodes, s.max_nodes, s.nproc_per_node) == (1, 1, 1)
    assert (s.rdzv_backend, s.rdzv_endpoint, s.max_restarts) == ("c10d", "localhost:0", 0)
    assert dict(s.rdzv_configs) == DEFAULT_TIMEOUTS
    assert (s.monitor_interval, s.start_method, s.shutdown_timeout) == (5.0, "spawn", 30)
    assert s.run_id.startswith("local-") and s.run_id != resolve(SCRIPT).run_id
    # python means this interpreter; the rest of the command is passed through untouched.
    assert s.command == (sys.executable, "train.py", "--lr", "1e-4")
    assert s.function is None and s.local_addr is None and s.log_dir is None
    assert (s.termination_log, s.termination_log_create) == (c.DEFAULT_TERMINATION_LOG, False)
    assert s.sources["nnodes"] == "default" and s.sources["rdzv_endpoint"] == "default (single node)"


def test_operator_env_alone_gives_the_topology() -> None:
    s = resolve(SCRIPT, OPERATOR_ENV)
    assert (s.min_nodes, s.max_nodes, s.nproc_per_node, s.max_restarts) == (1, 3, 4, 3)
    assert (s.rdzv_backend, s.rdzv_endpoint) == ("c10d", "train-worker-0:23456")
    assert s.run_id == "research.train"
    assert s.local_addr == "10.0.3.7"
    assert "is_host" not in s.rdzv_configs  # worker-1 is not the endpoint: torch decides
    assert s.sources["nnodes"] == "env PET_NNODES"
    assert s.sources["run_id"] == f"env {c.ENV_NAMESPACE}.{c.ENV_JOB_NAME}"
    assert s.sources["local_addr"] == f"env {c.ENV_POD_IP}"


def test_manifest_options_and_operator_env_may_agree() -> None:
    s = resolve(
        [
            "--nnodes",
            "1:3",
            "--nproc-per-node",
            "4",
            "--rdzv-endpoint",
            "TRAIN-worker-0:23456",
            "--rdzv-backend",
            "C10D",
            "--max-restarts",
            "3",
            *SCRIPT,
        ],
        OPERATOR_ENV,
    )
    assert (s.min_nodes, s.max_nodes, s.nproc_per_node, s.max_restarts) == (1, 3, 4, 3)
    assert s.sources["nnodes"] == "option --nnodes and env PET_NNODES"


@pytest.mark.parametrize(
    ("option", "env", "field", "value"),
    [
        (["--nnodes", "2"], {c.PET_NNODES: "2:2", c.PET_RDZV_ENDPOINT: "h:1"}, "max_nodes", 2),
        (["--rdzv-endpoint", "host"], {c.PET_RDZV_ENDPOINT: "host:29400"}, "rdzv_endpoint", "host"),
        (["--nproc-per-node", "AUTO"], {c.PET_NPROC_PER_NODE: "auto"}, "nproc_per_node", "auto"),
    ],
    ids=["nnodes", "default-port", "case"],
)
def test_equivalent_spellings_agree(option: list[str], env: dict[str, str], field: str, value: object) -> None:
    s = resolve([*option, *SCRIPT], {**env, c.PET_RDZV_ID: "r"})
    assert getattr(s, field) == value


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        (
            ["--nnodes", "2"],
            {c.PET_NNODES: "1:2"},
            "--nnodes 2 (manifest option) conflicts with PET_NNODES=1:2 (operator env): "
            "the manifest and the operator disagree; make them match",
        ),
        (
            ["--nproc-per-node", "4"],
            {c.PET_NPROC_PER_NODE: "auto"},
            "--nproc-per-node 4 (manifest option) conflicts with PET_NPROC_PER_NODE=auto (operator env): "
            "the manifest and the operator disagree; make them match",
        ),
        (["--rdzv-backend", "etcd-v2"], {c.PET_RDZV_BACKEND: "c10d"}, "--rdzv-backend etcd-v2 (manifest"),
        (["--rdzv-endpoint", "a:1"], {c.PET_RDZV_ENDPOINT: "b:1"}, "--rdzv-endpoint a:1 (manifest"),
        (["--max-restarts", "1"], {c.PET_MAX_RESTARTS: "3"}, "--max-restarts 1 (manifest"),
        (["--rdzv-id", "a"], {c.PET_RDZV_ID: "b"}, "--rdzv-id a (manifest option) conflicts with PET_RDZV_ID=b"),
    ],
)
def test_option_and_env_that_differ_are_an_error(option: list[str], env: dict[str, str], expected: str) -> None:
    message = error([*option, *SCRIPT], env)
    assert message.startswith(expected)
    assert "\n" not in message


def test_empty_operator_variables_count_as_absent() -> None:
    s = resolve(SCRIPT, {c.PET_NNODES: "", c.PET_RDZV_CONF: "", c.PET_RDZV_ID: " "})
    assert (s.min_nodes, s.max_nodes) == (1, 1) and s.run_id.startswith("local-")


@given(lo=st.integers(1, 64), extra=st.integers(0, 64))
def test_nnodes_option_equals_operator_range_form(lo: int, extra: int) -> None:
    hi = lo + extra
    text = str(lo) if extra == 0 else f"{lo}:{hi}"
    env = {c.PET_NNODES: f"{lo}:{hi}", c.PET_RDZV_ENDPOINT: "h:1", c.PET_RDZV_ID: "r"}
    s = resolve(["--nnodes", text, *SCRIPT], env)
    assert (s.min_nodes, s.max_nodes) == (lo, hi)


# ------------------------------------------------------------------------- bad values

BAD_VALUES = [
    (["--nnodes", "2x"], "--nnodes: expected N or MIN:MAX, e.g. 1:4 (given: 2x)"),
    (["--nnodes", "3:2"], "--nnodes: expected 1 <= MIN <= MAX (given: 3:2)"),
    (["--nnodes", "0"], "--nnodes: expected 1 <= MIN <= MAX (given: 0)"),
    (["--nproc-per-node", "0"], "--nproc-per-node: expected a positive integer, auto, cpu or gpu (given: 0)"),
    (["--nproc-per-node", "tpu"], "--nproc-per-node: expected a positive integer, auto, cpu or gpu (given: tpu)"),
    (["--rdzv-backend", "static"], "--rdzv-backend: expected one of c10d, etcd-v2, etcd (given: static)"),
    (["--max-restarts", "-1"], "--max-restarts: expected an integer >= 0 (given: -1)"),
    (["--max-restarts", "1.5"], "--max-restarts: expected an integer >= 0 (given: 1.5)"),
    (
        ["--join-timeout", "2.5"],
        "--join-timeout join_timeout: must be a whole number of seconds, at least 1 (given: 2.5)",
    ),
    (["--join-timeout", "0"], "--join-timeout join_timeout: must be a whole number of seconds, at least 1 (given: 0)"),
    (["--join-timeout", "8d"], "--join-timeout join_timeout: expected seconds (e.g. 900) or a duration such as 15m"),
    (["--read-timeout", "700000"], "--read-timeout read_timeout: must be at most 7 days (604800 s) (given: 700000)"),
    (["--read-timeout", "soon"], "--read-timeout read_timeout: expected seconds (e.g. 900) or a duration such as 15m"),
    (["--monitor-interval", "nan"], "--monitor-interval: expected seconds (e.g. 900) or a duration"),
    (["--monitor-interval", "0.001"], "--monitor-interval: must be between 0.01 and 3600 seconds (given: 0.001)"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout: expected seconds (e.g. 900) or a duration such as 15m"),
    (["--rdzv-endpoint", "host:99999"], "--rdzv-endpoint: must be a port number, 0-65535 (given: host:99999)"),
    (["--rdzv-endpoint", "a b:1"], "--rdzv-endpoint: expected a host name (letters, digits, '-', '_', dot-separated)"),
    (["--rdzv-endpoint", "h\u00e9:1"], "--rdzv-endpoint: expected a host name"),  # torch's \w would take it
    (["--rdzv-endpoint", "[10.0.0.1]:1"], "--rdzv-endpoint: only an IPv6 address goes in brackets"),
    (["--start-method", "thread"], "argument --start-method: invalid choice: 'thread'"),
    (["--rdzv-id", "none"], "run id (option --rdzv-id): 'none' is torchrun's placeholder"),
    (["--rdzv-id", "a/b"], "run id (option --rdzv-id): expected letters, digits, '.', '_', ':' and '-', starting"),
    (["--nproc", "2"], "unrecognized arguments: --nproc 2"),  # no prefix matching
]


@pytest.mark.parametrize(("argv", "expected"), BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_bad_values_give_one_line(argv: list[str], expected: str) -> None:
    message = error([*argv, *SCRIPT])
    assert message.startswith(expected)
    assert "\n" not in message


def test_bad_operator_value_names_the_variable() -> None:
    assert error(SCRIPT, {c.PET_NNODES: "two"}) == "PET_NNODES: expected N or MIN:MAX, e.g. 1:4 (given: two)"


def test_whole_seconds_may_be_written_as_floats() -> None:
    s = resolve(["--join-timeout", "30.0", "--shutdown-timeout", "0", "--monitor-interval", "0.25", *SCRIPT])
    assert s.rdzv_configs["join_timeout"] == 30 and isinstance(s.rdzv_configs["join_timeout"], int)
    assert (s.shutdown_timeout, s.monitor_interval) == (0, 0.25)


# ------------------------------------------------------------------------- rendezvous conf


def test_rdzv_conf_merges_env_options_and_timeouts() -> None:
    s = resolve(
        ["--rdzv-conf", "read_timeout=120, store_type=TCP", "--last-call-timeout", "10", *SCRIPT],
        {c.PET_RDZV_CONF: "join_timeout=10m,keep_alive_interval=3,is_host=yes"},
    )
    assert dict(s.rdzv_configs) == {
        "join_timeout": 600,
        "keep_alive_interval": 3,
        "is_host": True,
        "read_timeout": 120,
        "store_type": "tcp",
        "last_call_timeout": 10,
        "close_timeout": 30,
        "heartbeat_timeout": 5,
    }
    assert s.sources["rdzv_configs.join_timeout"] == "env PET_RDZV_CONF"
    assert s.sources["rdzv_configs.read_timeout"] == "--rdzv-conf"
    assert s.sources["rdzv_configs.close_timeout"] == "default"


def test_same_rdzv_key_and_value_in_two_places_is_fine() -> None:
    s = resolve(
        ["--join-timeout", "600.0", "--rdzv-conf", "join_timeout=600", *SCRIPT], {c.PET_RDZV_CONF: "join_timeout=600"}
    )
    assert s.rdzv_configs["join_timeout"] == 600


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (
            ["--join-timeout", "900"],
            {c.PET_RDZV_CONF: "join_timeout=600"},
            "rendezvous key join_timeout: PET_RDZV_CONF gives 600, --join-timeout gives 900; set it in one place",
        ),
        (
            ["--rdzv-conf", "is_host=false"],
            {c.PET_RDZV_CONF: "is_host=1"},
            "rendezvous key is_host: PET_RDZV_CONF gives 1, --rdzv-conf gives false; set it in one place",
        ),
        (
            ["--rdzv-conf", "read_timeout=5,read_timeout=6"],
            {},
            "rendezvous key read_timeout: --rdzv-conf gives 5, --rdzv-conf gives 6; set it in one place",
        ),
        (
            ["--rdzv-conf", "timeout=60"],
            {},
            "--rdzv-conf timeout: torch's c10d backend ignores 'timeout'; use join_timeout (given: 60)",
        ),
        (
            [],
            {c.PET_RDZV_CONF: "heartbeat=10"},
            "PET_RDZV_CONF heartbeat: torch's c10d backend ignores 'heartbeat'; use heartbeat_timeout (given: 10)",
        ),
        (["--rdzv-conf", "is_host=maybe"], {}, "--rdzv-conf is_host: expected true or false (given: maybe)"),
        (
            ["--rdzv-conf", "keep_alive_max_attempt=0"],
            {},
            "--rdzv-conf keep_alive_max_attempt: expected a whole number >= 1 (given: 0)",
        ),
        (
            ["--rdzv-conf", "custom=a=b"],
            {},
            "--rdzv-conf custom: not a key the c10d backend reads; it reads close_timeout, heartbeat_timeout, is_host",
        ),
        (["--rdzv-conf", "store_type=file"], {}, "--rdzv-conf store_type: expected tcp (given: file)"),
        (["--rdzv-conf", "is_host="], {}, "--rdzv-conf is_host: must not be empty (given: )"),
        (["--rdzv-conf", "novalue"], {}, "--rdzv-conf: expected KEY=VALUE[,KEY=VALUE...] (given: novalue)"),
        ([], {c.PET_RDZV_CONF: "=x"}, "PET_RDZV_CONF: expected KEY=VALUE[,KEY=VALUE...] (given: =x)"),
    ],
)
def test_rdzv_conf_problems(argv: list[str], env: dict[str, str], expected: str) -> None:
    assert error([*argv, *SCRIPT], env).startswith(expected)


# ------------------------------------------------------------------------- run id, endpoint, hosts


def test_run_id_from_operator_wins_over_job_name() -> None:
    s = resolve(SCRIPT, {**OPERATOR_ENV, c.PET_RDZV_ID: "attempt-7"})
    assert (s.run_id, s.sources["run_id"]) == ("attempt-7", "env PET_RDZV_ID")
    assert resolve(["--rdzv-id", "opt-id", *SCRIPT], OPERATOR_ENV).run_id == "opt-id"


def test_run_id_from_job_name_alone() -> None:
    env = {c.PET_NNODES: "2", c.PET_RDZV_ENDPOINT: "h:1", c.ENV_JOB_NAME: "train"}
    assert resolve(SCRIPT, env).run_id == "train"


def test_multi_node_needs_a_run_id() -> None:
    assert error(SCRIPT, {c.PET_NNODES: "1:2", c.PET_RDZV_ENDPOINT: "h:1"}) == (
        "no run id for a multi-node job: every node must use the same one; set PET_RDZV_ID, "
        "--rdzv-id, or ELASTIC_LAUNCH_NAMESPACE and ELASTIC_LAUNCH_JOB_NAME"
    )


def test_multi_node_needs_an_endpoint_with_a_port() -> None:
    assert error(["--nnodes", "2", *SCRIPT]).startswith(
        "no rendezvous endpoint: a multi-node job needs PET_RDZV_ENDPOINT"
    )
    assert error(["--nnodes", "2", "--rdzv-endpoint", "h:0", "--rdzv-id", "r", *SCRIPT]).startswith(
        "rendezvous endpoint h:0: port 0 lets the OS pick a port the other nodes cannot know"
    )


def test_etcd_has_no_local_default_endpoint() -> None:
    assert error(["--rdzv-backend", "etcd-v2", *SCRIPT]).startswith("no rendezvous endpoint: a etcd-v2 job needs")


@pytest.mark.parametrize(
    ("env", "expected_source"),
    [
        ({c.ENV_POD_NAME: "train-worker-0"}, "derived: endpoint host equals ELASTIC_LAUNCH_POD_NAME"),
        (
            {c.ENV_POD_IP: "10.0.0.5", c.PET_RDZV_ENDPOINT: "10.0.0.5:23456"},
            "derived: endpoint host equals ELASTIC_LAUNCH_POD_IP",
        ),
        ({c.ENV_POD_NAME: "train-worker-1"}, None),
        # Local "pods" share 127.0.0.1 with the endpoint; none of them may claim the store.
        ({c.ENV_POD_IP: "127.0.0.1", c.PET_RDZV_ENDPOINT: "127.0.0.1:23456"}, None),
        ({c.ENV_POD_NAME: "train-worker-0", c.PET_RDZV_CONF: "is_host=false"}, "env PET_RDZV_CONF"),
        ({c.ENV_POD_NAME: "train-worker-0", c.PET_RDZV_BACKEND: "etcd-v2"}, None),
    ],
    ids=["pod-name", "pod-ip", "other-pod", "loopback-ip", "conf-wins", "not-c10d"],
)
def test_is_host(env: dict[str, str], expected_source: str | None) -> None:
    base = {c.PET_NNODES: "1:2", c.PET_RDZV_ENDPOINT: "train-worker-0:23456", c.PET_RDZV_ID: "r"}
    s = resolve(SCRIPT, {**base, **env})
    assert s.sources.get("rdzv_configs.is_host") == expected_source
    if expected_source is None:
        assert "is_host" not in s.rdzv_configs
    else:
        assert s.rdzv_configs["is_host"] is ("false" not in env.get(c.PET_RDZV_CONF, ""))


def test_local_addr_option_wins_over_pod_ip() -> None:
    assert resolve(["--local-addr", "10.9.9.9", *SCRIPT], OPERATOR_ENV).local_addr == "10.9.9.9"


def test_debug_from_env() -> None:
    assert resolve(SCRIPT, {c.ENV_DEBUG: "1"}).debug and not resolve(SCRIPT, {c.ENV_DEBUG: "0"}).debug


# ------------------------------------------------------------------------- entrypoints


def test_script_command_is_looked_up_on_path() -> None:
    true = shutil.which("true")
    assert true is not None
    assert resolve(["--", "true", "x"]).command == (true, "x")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--", "no-such-program-xyz"], "command no-such-program-xyz: not found on PATH"),
        (["--", "./no/such/file"], "command ./no/such/file: not an executable file"),
        ([], "no command: use elastic-launch [options] -- COMMAND [ARGS...] or --function"),
        (["--"], "no command: use elastic-launch"),
        (["python", "train.py"], "unrecognized arguments: python train.py (put the training command after --)"),
        (["--result", "r.json", "--", "true"], "--result needs --function: a script's workers return nothing"),
        (["--function", "pkg.mod"], "--function: expected MODULE:FUNCTION, e.g. pkg.train:main (given: pkg.mod)"),
        (["--function", "no_such_module_xyz:f"], "--function: no module named 'no_such_module_xyz'"),
        (["--function", "no_such_pkg_xyz.mod:f"], "--function: cannot import no_such_pkg_xyz.mod: No module named"),
    ],
)
def test_entrypoint_problems(argv: list[str], expected: str) -> None:
    assert error(argv).startswith(expected)


def test_function_mode(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    s = resolve(["--function", "elastic_workers:allreduce", "--result", str(result), "--", "a", "--b"])
    assert (s.function, s.command, s.result_path) == ("elastic_workers:allreduce", ("a", "--b"), str(result))
    missing = tmp_path / "nope" / "r.json"
    assert error(["--function", "elastic_workers:allreduce", "--result", str(missing)]).startswith(
        f"--result {missing}: directory {missing.parent} does not exist"
    )


def test_function_module_check_can_be_skipped() -> None:
    s = resolve_settings(["--function", "not_in_this_image:main"], {}, check_function=False)
    assert s.function == "not_in_this_image:main"


def test_termination_log_option() -> None:
    s = resolve(["--termination-log", "/tmp/t", *SCRIPT])
    assert (s.termination_log, s.termination_log_create) == ("/tmp/t", True)
    assert resolve(["--termination-log", "", *SCRIPT]).termination_log is None


def test_settings_are_json_ready() -> None:
    s = resolve(["--rdzv-conf", "is_host=yes", *SCRIPT], OPERATOR_ENV)
    data = json.loads(json.dumps(s.to_dict()))
    assert data["rdzv_configs"]["is_host"] is True and data["command"][1:] == ["train.py", "--lr", "1e-4"]


# ------------------------------------------------------------------------- Kubeflow Trainer v2

# What Trainer v2.3's torch plugin injects into the container `node` of pod 1 of TrainJob
# `train` (Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go), plus the downward-API entries a compiled
# TrainJob adds.
TRAINER_ENV = {
    c.PET_NNODES: "3",
    c.PET_NPROC_PER_NODE: "8",
    c.PET_NODE_RANK: "1",
    c.PET_MASTER_ADDR: "train-node-0-0.train",
    c.PET_MASTER_PORT: "29500",
    c.ENV_NAMESPACE: "research",
    c.ENV_JOB_NAME: "train",
    c.ENV_POD_NAME: "train-node-0-1",
    c.ENV_POD_IP: "10.0.3.7",
}
AT_MASTER = [c.OPT_RDZV_AT_MASTER, "--max-restarts", "2", *SCRIPT]


def test_trainer_v2_env_gives_c10d_at_the_master_with_fixed_nodes() -> None:
    s = resolve(AT_MASTER, TRAINER_ENV)
    assert (s.min_nodes, s.max_nodes, s.nproc_per_node) == (3, 3, 8)
    assert (s.rdzv_backend, s.rdzv_endpoint, s.node_rank) == ("c10d", "train-node-0-0.train:29500", 1)
    assert s.rdzv_configs["is_host"] is False and s.max_restarts == 2
    assert s.run_id == "research.train" and s.local_addr == "10.0.3.7"
    assert s.sources["rdzv_endpoint"] == "env PET_MASTER_ADDR:PET_MASTER_PORT (--rdzv-at-master)"
    assert s.sources["rdzv_configs.is_host"] == "derived: PET_NODE_RANK=1"
    assert resolve(AT_MASTER, {**TRAINER_ENV, c.PET_NODE_RANK: "0"}).rdzv_configs["is_host"] is True


def test_trainer_v2_ipv6_master_gets_brackets() -> None:
    s = resolve(AT_MASTER, {**TRAINER_ENV, c.PET_MASTER_ADDR: "fd00::1"})
    assert s.rdzv_endpoint == "[fd00::1]:29500"


def test_trainer_v2_env_without_the_flag_says_which_flag() -> None:
    message = error(SCRIPT, TRAINER_ENV)
    assert message.endswith("this pod has PET_MASTER_ADDR (Kubeflow Trainer v2): pass --rdzv-at-master")


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {c.PET_NNODES: "2:4"}, "--rdzv-at-master: nnodes 2:4 (env PET_NNODES): Trainer v2 runs a fixed number"),
        (["--nnodes", "2"], {}, "--nnodes 2 (manifest option) conflicts with PET_NNODES=3"),
        ([], {c.PET_MASTER_PORT: ""}, "--rdzv-at-master: PET_MASTER_PORT is not set (Kubeflow Trainer v2 sets it"),
        ([], {c.PET_MASTER_PORT: "0"}, "PET_MASTER_PORT: must be a port number, 1-65535 (given: 0)"),
        ([], {c.PET_MASTER_ADDR: "node 0"}, "PET_MASTER_ADDR: expected a host name"),
        ([], {c.PET_NODE_RANK: "3"}, "PET_NODE_RANK: must be below the 3 nodes (given: 3)"),
        ([], {c.PET_NODE_RANK: "-1"}, "PET_NODE_RANK: expected an integer >= 0 (given: -1)"),
        (["--rdzv-backend", "etcd-v2"], {}, "--rdzv-at-master: the store runs in node 0's agent, which needs"),
        (["--rdzv-conf", "is_host=1"], {}, "rendezvous key is_host (--rdzv-conf): with --rdzv-at-master node rank 0"),
        (["--rdzv-endpoint", "elsewhere:29500"], {}, "--rdzv-at-master: the rendezvous endpoint elsewhere:29500"),
    ],
)
def test_trainer_v2_problems(argv: list[str], env: dict[str, str], expected: str) -> None:
    assert error([c.OPT_RDZV_AT_MASTER, *argv, *SCRIPT], {**TRAINER_ENV, **env}).startswith(expected)


def test_elastic_trainjob_min_nodes_and_the_pod_count() -> None:
    """An elastic TrainJob (issue 30): MIN from --min-nodes, MAX from Trainer's PET_NNODES (the pods)."""
    s = resolve([c.OPT_RDZV_AT_MASTER, c.OPT_MIN_NODES, "2", *SCRIPT], TRAINER_ENV)
    assert (s.min_nodes, s.max_nodes, s.nnodes) == (2, 3, "2:3")
    assert s.sources["nnodes"] == "option --min-nodes and env PET_NNODES"
    assert (s.rdzv_endpoint, s.rdzv_configs["is_host"]) == ("train-node-0-0.train:29500", False)
    assert resolve([c.OPT_RDZV_AT_MASTER, c.OPT_MIN_NODES, "3", *SCRIPT], TRAINER_ENV).nnodes == "3"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([c.OPT_RDZV_AT_MASTER, c.OPT_MIN_NODES, "4"], "--min-nodes: must lie in 1..3, the pods of the TrainJob"),
        ([c.OPT_RDZV_AT_MASTER, c.OPT_MIN_NODES, "0"], "--min-nodes: must lie in 1..3"),
        ([c.OPT_RDZV_AT_MASTER, c.OPT_MIN_NODES, "two"], "--min-nodes: expected an integer >= 0 (given: two)"),
        ([c.OPT_MIN_NODES, "2"], "--min-nodes is the lower bound of an elastic TrainJob and needs --rdzv-at-master"),
    ],
)
def test_elastic_trainjob_min_nodes_problems(argv: list[str], expected: str) -> None:
    assert error([*argv, *SCRIPT], TRAINER_ENV).startswith(expected)


def test_trainer_v2_without_nnodes_is_not_a_trainjob_pod() -> None:
    env = {k: v for k, v in TRAINER_ENV.items() if k != c.PET_NNODES}
    expected = "--rdzv-at-master: no PET_NNODES and no --nnodes (Kubeflow Trainer v2 sets PET_NNODES)"
    assert error(AT_MASTER, env) == expected


def test_trainer_v2_same_endpoint_given_twice_is_fine() -> None:
    s = resolve([c.OPT_RDZV_AT_MASTER, "--rdzv-endpoint", "Train-Node-0-0.train:29500", *SCRIPT], TRAINER_ENV)
    assert s.rdzv_endpoint == "train-node-0-0.train:29500"
