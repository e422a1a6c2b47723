"""The shared value checks (``elastic_compile.contract_values``) against what torch 2.13 really does.

Each check is narrower than or equal to torch: whatever it accepts, torch's own parser
accepts with the same meaning (hypothesis over generated values); what it refuses beyond
torch has a reason in the table below.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_compile import contract_values as cv

torch_rdzv = pytest.importorskip("torch.distributed.elastic.rendezvous", reason="needs torch (test extra)")
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs  # noqa: E402
from torch.distributed.elastic.rendezvous import RendezvousParameters  # noqa: E402
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint  # noqa: E402

# ------------------------------------------------------------------------- hosts and endpoints

label = st.from_regex(r"\A[A-Za-z0-9_]([A-Za-z0-9_-]{0,20}[A-Za-z0-9_])?\Z")
hostnames = st.lists(label, min_size=1, max_size=4).map(".".join)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
hosts = hostnames | ipv4 | ipv6 | ipv6.map(lambda a: f"[{a}]")


@given(host=hosts, port=st.integers(0, 65535) | st.none())
def test_every_endpoint_we_accept_torch_reads_the_same(host: str, port: int | None) -> None:
    text = host if port is None else f"{host}:{port}"
    if port is None and ":" in host and not host.startswith("["):
        # A bare IPv6 address without a port reads as "address:port" in torch too ("fd00::1"
        # is host "fd00:", port 1, which we refuse; "::ffff:0:0" is host "::ffff:0", port 0).
        # Whatever we accept, torch must read the same; the operator always adds a port.
        try:
            ours = cv.split_endpoint(text, 29400)
        except ValueError:
            return
        assert parse_rendezvous_endpoint(text, 29400) == ours
        return
    ours = cv.split_endpoint(text, 29400)
    assert parse_rendezvous_endpoint(text, 29400) == ours
    assert ours[1] == (29400 if port is None else port)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("h\u00e9", "torch's \\w takes non-ASCII letters; resolvers in pods do not"),
        ("a..b", "an empty label"),
        ("-a", "a label starts with a letter, digit or '_'"),
        ("a b", "a space"),
        ("[10.0.0.1]", "brackets are for IPv6 only"),
        ("x" * 64, "a label over 63 characters"),
        ("a:b", "':' outside an IPv6 address"),
    ],
)
def test_hosts_refused_beyond_torch(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=r"host name|IPv6"):
        cv.check_host(text)


@pytest.mark.parametrize("text", ["h:65536", "h:-1", "h:1e3", "[::1", "", "h:"])
def test_endpoints_torch_refuses_too(text: str) -> None:
    with pytest.raises(ValueError):
        cv.split_endpoint(text, 29400)


# ------------------------------------------------------------------------- run ids


@settings(deadline=None)  # the first example pays for torch's lazy imports (0.4 s under load)
@given(run_id=st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,60}\Z"))
def test_every_run_id_we_accept_makes_torchs_log_directory(run_id: str) -> None:
    if run_id.lower() == "none":
        return
    cv.check_run_id(run_id)
    with tempfile.TemporaryDirectory() as root:
        made = DefaultLogsSpecs(log_dir=root)._make_log_dir(root, run_id)
        assert Path(made).parent == Path(root)


def test_longest_run_id_fits_torchs_log_directory_and_one_more_does_not(tmp_path: Path) -> None:
    longest = "r" * cv.MAX_RUN_ID_LENGTH
    cv.check_run_id(longest)
    DefaultLogsSpecs(log_dir=str(tmp_path))._make_log_dir(str(tmp_path), longest)
    with pytest.raises(OSError):  # the limit is the file system's, as torch meets it
        DefaultLogsSpecs(log_dir=str(tmp_path))._make_log_dir(str(tmp_path), longest + "r")
    with pytest.raises(ValueError, match="at most 246"):
        cv.check_run_id(longest + "r")


def test_a_slash_in_a_run_id_breaks_torch_and_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DefaultLogsSpecs(log_dir=str(tmp_path))._make_log_dir(str(tmp_path), "experiments/42")
    with pytest.raises(ValueError, match="instead of '/'"):
        cv.check_run_id("experiments/42")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("text", ["none", "None", "", ".hidden", "-x", "a b", "a\u00e9", "a\nb"])
def test_run_ids_refused(text: str) -> None:
    with pytest.raises(ValueError):
        cv.check_run_id(text)


# ------------------------------------------------------------------------- rendezvous keys


def _params(config: dict[str, object]) -> RendezvousParameters:
    return RendezvousParameters("c10d", "localhost:0", "r", 1, 1, **config)


@given(value=st.sampled_from(["1", "true", "T", "YES", "y", "0", "false", "f", "No", "N"]))
def test_is_host_spellings_mean_what_torch_reads(value: str) -> None:
    assert cv.check_conf_entry("is_host", value, "c10d") == _params({"is_host": value}).get_as_bool("is_host")


@given(n=st.integers(1, 10**9 - 1))
def test_counts_mean_what_torch_reads(n: int) -> None:
    value = cv.check_conf_entry("keep_alive_interval", str(n), "c10d")
    assert value == _params({"keep_alive_interval": str(n)}).get_as_int("keep_alive_interval")


@pytest.mark.parametrize(
    ("key", "value", "backend", "message"),
    [
        ("timeout", "60", "c10d", "ignores 'timeout'; use join_timeout"),
        ("heartbeat", "5", "etcd-v2", "ignores 'heartbeat'; use heartbeat_timeout"),
        ("is_hots", "1", "c10d", "did you mean is_host?"),
        ("protocol", "https", "c10d", "not a key the c10d backend reads"),
        ("is_host", "maybe", "c10d", "expected true or false"),
        ("store_type", "file", "c10d", "expected tcp"),
        ("protocol", "ftp", "etcd", "expected http or https"),
        ("keep_alive_max_attempt", "0", "c10d", "expected a whole number >= 1"),
        ("keep_alive_max_attempt", "1.5", "c10d", "expected a whole number >= 1"),
        ("join_timeout", "2.5", "c10d", "whole number of seconds"),
        ("ssl_cert", "a,b", "etcd-v2", "must not contain ','"),
        ("ssl_cert", " a", "etcd-v2", "whitespace"),
        ("ssl_cert", "", "etcd-v2", "must not be empty"),
        ("ssl_cert", "a\tb", "etcd-v2", "control characters"),
        ("1key", "x", "c10d", "identifier"),
    ],
)
def test_conf_entries_refused(key: str, value: str, backend: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        cv.check_conf_entry(key, value, backend)


def test_conf_entries_typed_as_torch_reads_them() -> None:
    assert cv.check_conf_entry("join_timeout", "15m", "c10d") == 900
    assert cv.check_conf_entry("store_type", "TCP", "c10d") == "tcp"
    assert cv.check_conf_entry("ca_cert", "/etc/ssl/ca=1.pem", "etcd-v2") == "/etc/ssl/ca=1.pem"
    assert cv.check_conf_entry("etcd_prefix", "/torchelastic/p2p", "etcd") == "/torchelastic/p2p"


# ------------------------------------------------------------------------- durations and ports


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("900", 900.0), ("30.0", 30.0), ("15m", 900.0), ("1h30m", 5400.0), ("90s", 90.0), ("1.5s", 1.5), (" 5 ", 5.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert cv.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "nan", "inf", "-1", "1e3", "1_000", "1:30", "5 m", "m", "1d"])
def test_durations_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected seconds"):
        cv.parse_duration(text)


@given(seconds=st.floats(cv.MIN_INTERVAL_SECONDS, cv.MAX_INTERVAL_SECONDS))
def test_every_interval_round_trips_through_its_text(seconds: float) -> None:
    # The compiler writes repr(float); the launcher must read back the same number.
    assert cv.interval_seconds(cv.parse_duration(repr(seconds))) == seconds


def test_bounds() -> None:
    assert cv.whole_seconds(cv.MAX_TIMEOUT_SECONDS) == cv.MAX_TIMEOUT_SECONDS
    assert cv.whole_seconds(0, minimum=0) == 0
    for bad in (0, 0.5, cv.MAX_TIMEOUT_SECONDS + 1):
        with pytest.raises(ValueError):
            cv.whole_seconds(bad)
    with pytest.raises(ValueError):
        cv.interval_seconds(3600.5)
    assert cv.check_port(65535) == 65535
    assert cv.parse_port("0", allow_zero=True) == 0
    for port in ("0", "65536", "-1", "x", "123456"):
        with pytest.raises(ValueError):
            cv.parse_port(port)
