"""``elastic-compile apply`` against loopback servers: bad kubeconfigs, silent and redirecting servers, namespaces.

No cluster is needed: each server here is a real socket on 127.0.0.1 (a plain TCP listener
that accepts and never answers, or ``http.server`` answering as the test says), and the
command runs as a subprocess of the console script with the real ``kubernetes`` client, with
an empty ``TMPDIR`` and ``HOME`` of its own that must stay empty. The real API server's side
is in ``tests/realcluster/test_apply.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes", reason="apply needs the kubernetes client: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
CPU_DDP = ROOT / "examples" / "cpu-ddp.yaml"
CLI = str(Path(sys.executable).parent / "elastic-compile")
SECRET = "SECRET-t0ken-hunter2"  # in every kubeconfig: must never be printed


def kubeconfig(server: str, *, user: object = None, cluster: object = None, namespace: str | None = None) -> str:
    """A kubeconfig of one context ``x`` (cluster ``c``, user ``u``) as YAML text."""
    context: dict[str, object] = {"cluster": "c", "user": "u"}
    if namespace is not None:
        context["namespace"] = namespace
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster if cluster is not None else {"server": server}}],
            "contexts": [{"name": "x", "context": context}],
            "current-context": "x",
            "users": [{"name": "u", "user": user if user is not None else {"token": SECRET}}],
        }
    )


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def apply(tmp_path: Path, config: str, *args: str) -> Result:
    """``elastic-compile apply cpu-ddp.yaml --kubeconfig FILE ARGS`` with an empty TMPDIR and HOME that stay empty."""
    path = tmp_path / "config"
    path.write_text(config)
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(home)}
    env.pop("KUBECONFIG", None)
    done = subprocess.run(
        [CLI, "apply", str(CPU_DDP), "--kubeconfig", str(path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert sorted(tmp.iterdir()) == [] and sorted(home.iterdir()) == [], "apply left files behind"
    return Result(done.returncode, done.stdout, done.stderr)


def one_line(result: Result) -> str:
    """The only line of stderr: no traceback, no Python logging, no secret."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert SECRET not in result.stderr and SECRET not in result.stdout
    return lines[0]


# --------------------------------------------------------------------------- loopback servers


@dataclass
class Seen:
    method: str
    path: str
    body: bytes


@dataclass
class FakeServer:
    """``http.server`` on 127.0.0.1 answering every request with ``answer(seen)``: (status, headers, body)."""

    answer: Callable[[Seen], tuple[int, dict[str, str], bytes]]
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, self.rfile.read(length))
                server.seen.append(seen)
                status, headers, body = server.answer(seen)
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PATCH = do_POST = do_PUT = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def start(answer: Callable[[Seen], tuple[int, dict[str, str], bytes]]) -> FakeServer:
        servers.append(FakeServer(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _json(status: int, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


class Silent:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


# --------------------------------------------------------------------------- the kubeconfig


BAD_KUBECONFIGS = {
    "broken-yaml": (f"token: {SECRET}\n  bad: [yaml\n", "not valid YAML at line 2, column 6: "),
    "client-key-data": (
        kubeconfig("https://127.0.0.1:1", user={"client-certificate-data": "abc!!", "client-key-data": SECRET}),
        "users[0] (u): user.client-certificate-data: not valid base64 (the value is not shown)",
    ),
    "certificate-authority-data": (
        kubeconfig("https://127.0.0.1:1", cluster={"server": "https://127.0.0.1:1", "certificate-authority-data": "x"}),
        "clusters[0] (c): cluster.certificate-authority-data: not valid base64 (the value is not shown)",
    ),
    "user-is-a-string": (
        kubeconfig("https://127.0.0.1:1", user=SECRET),
        "users[0] (u): user: must be a mapping (given: a str)",
    ),
    "token-is-a-list": (
        kubeconfig("https://127.0.0.1:1", user={"token": [SECRET]}),
        "users[0] (u): user.token: must be a string (given: a list)",
    ),
    "no-such-context": (kubeconfig("https://127.0.0.1:1").replace("current-context: x", "current-context: y"), ""),
    "a-list": ("- 1\n- 2\n", "must be a mapping of kubeconfig fields (kind: Config), not a list"),
    # The token one level too far out, beside an empty ``user:``: the client's own message quoted
    # the whole entry, token included (red team 2, item 1).
    "user-misindented": (
        kubeconfig("https://127.0.0.1:1").replace(f"user:\n    token: {SECRET}", f"user:\n  token: {SECRET}"),
        "user u: user: missing or null (write the credentials under it)",
    ),
    "cluster-null": (
        kubeconfig("https://127.0.0.1:1").replace(
            "- cluster:\n    server: https://127.0.0.1:1\n", f"- cluster: null\n  extra: {SECRET}\n"
        ),
        "cluster c: cluster: missing or null; it must hold the server",
    ),
    # Without a scheme the client sent the token over plain HTTP, after urllib3's two-line
    # FutureWarning; without a server, to no host (red team 2, item 3).
    **{
        f"server-{name}": (
            kubeconfig(server, cluster=cluster),
            "cluster c: cluster.server: must be an https:// (or http://) URL with a host (the value is not shown)",
        )
        for name, server, cluster in [
            ("without-scheme", f"{SECRET}.example:6443", None),
            ("missing", "", {"insecure-skip-tls-verify": True}),
            ("file", f"file:///{SECRET}", None),
            ("bad-ipv6", f"https://{SECRET}@[::1", None),
        ]
    },
    # Python's own limits under PyYAML: internal errors, exit 3 (red team 2, item 4).
    "long-integer": ("a: " + "9" * 5000 + "\n", "not a kubeconfig: a number longer than Python reads (4300 digits)"),
    "deep-nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "not a kubeconfig: nested deeper than 64 levels"),
    # 1.9 million numbers in 3.8 MB (under the 4 MiB bound) ran for more than 300 s (red team 2, item 18).
    "dense": ("a: [" + "1," * 60_000 + "]\n", "not a kubeconfig: more than 50000 values"),
    # Ten million values from 500 bytes: the client's messages repr the entry, aliases expanded (red team 2, item 18).
    "alias-bomb": (
        "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'x'] * 10)}]\n" for i in range(7))
        + kubeconfig("https://127.0.0.1:1").replace("  name: c\n", "  name: c\n  extra: *l6\n"),
        "not a kubeconfig: its aliases expand it by more than 100000 values",
    ),
    # An OIDC user without its id-token: the client's message quoted the entry, client secret included.
    "oidc-without-id-token": (
        kubeconfig(
            "https://127.0.0.1:1", user={"auth-provider": {"name": "oidc", "config": {"client-secret": SECRET}}}
        ),
        "Expected key id-token in ",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_KUBECONFIGS))
def test_a_bad_kubeconfig_is_one_line_naming_the_entry(tmp_path: Path, case: str) -> None:
    text, expected = BAD_KUBECONFIGS[case]
    result = apply(tmp_path, text)
    assert result.code == 2
    line = one_line(result)
    assert line.startswith(f"elastic-compile: error: kubeconfig {tmp_path / 'config'}: "), line
    assert expected in line
    if case == "no-such-context":
        assert line.endswith(": no context named y")


def test_a_failing_exec_plugin_is_one_line_naming_the_user(tmp_path: Path, serve: Callable[..., FakeServer]) -> None:
    server = serve(lambda seen: _json(200, {}))
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "sh",
        "args": ["-c", "echo 'cannot log in' >&2; exit 1"],
        "interactiveMode": "Never",
    }
    result = apply(tmp_path, kubeconfig(server.url, user={"exec": plugin}), "--dry-run=server")
    assert result.code == 2
    assert one_line(result) == (
        f"elastic-compile: error: kubeconfig {tmp_path / 'config'}: user u: the exec credential plugin failed: "
        "exec: process returned 1. cannot log in"
    )
    assert server.seen == []  # nothing sent without the credentials


def test_the_context_namespace_must_be_a_label(tmp_path: Path, serve: Callable[..., FakeServer]) -> None:
    server = serve(lambda seen: _json(200, {}))
    result = apply(tmp_path, kubeconfig(server.url, namespace="a/../../b"), "--dry-run=server")
    assert result.code == 2
    assert one_line(result).endswith("context x: its namespace is not a DNS-1123 label (given: a/../../b)")
    assert server.seen == []


# --------------------------------------------------------------------------- timeouts


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_server_that_never_answers_is_given_up_after_the_request_timeout(
    tmp_path: Path, silent: Silent, scheme: str
) -> None:
    server = f"{scheme}://127.0.0.1:{silent.port}"
    cluster = {"server": server, "insecure-skip-tls-verify": True}
    result = apply(tmp_path, kubeconfig(server, cluster=cluster), "--dry-run=server", "--request-timeout", "1")
    assert result.code == 1
    # https: the TLS handshake never ends; http: connected, the answer never comes. Either way
    # the request's budget (connecting has its own, 10 s, never more than the request's) runs out.
    assert one_line(result) == (
        f"elastic-compile apply: error: the API server at {server} did not answer within 1s (--request-timeout)"
    )
    assert len(silent.accepted) == 1  # not retried


class Drip:
    """``http.server`` on 127.0.0.1 that answers 200 and then sends its body one byte at a time, for minutes."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                # Each byte well within the per-read timeout; the whole far beyond the request's.
                for _ in range(600):
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up
                    time.sleep(0.2)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_server_that_drips_its_answer_is_given_up_after_the_request_timeout(tmp_path: Path) -> None:
    # urllib3's timeouts bound each read: a byte every 0.2 s held apply for the whole 120 s (red team 2, item 5).
    drip = Drip()
    try:
        result = apply(tmp_path, kubeconfig(drip.url), "-n", "ml", "--dry-run=server", "--request-timeout", "2")
    finally:
        drip.close()
    assert result.code == 1
    assert one_line(result) == (
        f"elastic-compile apply: error: the API server at {drip.url} did not answer within 2s (--request-timeout)"
    )


def _self_signed() -> tuple[str, str]:
    """A certificate and its private key, PEM, base64 as a kubeconfig's ``*-data`` holds them."""
    pytest.importorskip("cryptography", reason="the kubernetes client's google-auth brings it")
    import base64
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.b64encode(pem_cert).decode(), base64.b64encode(pem_key).decode()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_client_key_written_for_the_client_is_removed_when_apply_is_terminated(
    tmp_path: Path, silent: Silent, signum: int
) -> None:
    """The client writes ``client-key-data`` to a file in TMPDIR and removes it only at exit: SIGTERM
    (a cancelled CI job) skipped that, and the private key stayed (red team 2, item 16)."""
    cert, key = _self_signed()
    server = f"https://127.0.0.1:{silent.port}"  # accepts, never completes the TLS handshake
    config = kubeconfig(
        server,
        cluster={"server": server, "certificate-authority-data": cert},
        user={"client-certificate-data": cert, "client-key-data": key},
    )
    (tmp_path / "config").write_text(config)
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(home)}
    env.pop("KUBECONFIG", None)
    command = [CLI, "apply", str(CPU_DDP), "--kubeconfig", str(tmp_path / "config"), "--dry-run=server"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        for _ in range(400):  # the client wrote its files; the request waits on the handshake (10 s)
            if len(list(tmp.iterdir())) >= 2 or child.poll() is not None:
                break
            time.sleep(0.025)
        written = sorted(p.read_bytes()[:27] for p in tmp.iterdir())
        child.send_signal(signum)
        child.communicate(timeout=60)
    assert written == [b"-----BEGIN CERTIFICATE-----", b"-----BEGIN PRIVATE KEY-----"]
    assert sorted(tmp.iterdir()) == [] and sorted(home.iterdir()) == []
    assert child.returncode == 128 + signum


def test_a_refused_connection_is_one_line_at_once(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again before apply connects: nothing listens there
    result = apply(tmp_path, kubeconfig(f"https://127.0.0.1:{port}"), "--dry-run=server")
    assert result.code == 1
    assert one_line(result) == (
        f"elastic-compile apply: error: cannot reach the API server at https://127.0.0.1:{port}: Connection refused"
    )


def test_a_password_in_the_server_url_is_not_shown(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # nothing listens there once closed
    result = apply(tmp_path, kubeconfig(f"https://admin:{SECRET}@127.0.0.1:{port}"), "--dry-run=server")
    assert result.code == 1
    # kubectl's way of showing it (red team 2, item 2)
    assert one_line(result) == (
        f"elastic-compile apply: error: cannot reach the API server at https://admin:***@127.0.0.1:{port}: "
        "Connection refused"
    )


@pytest.mark.parametrize("value", ["soon", "-1s", "1e9"])
def test_request_timeout_must_be_a_duration(tmp_path: Path, value: str) -> None:
    result = apply(tmp_path, kubeconfig("https://127.0.0.1:1"), f"--request-timeout={value}")
    assert result.code == 2
    assert one_line(result).startswith("elastic-compile: error: argument --request-timeout: ")


# --------------------------------------------------------------------------- namespaces and redirects


@pytest.mark.parametrize("namespace", ["x/../../../../api/v1/namespaces/kube-system/secrets/y?a=", "ML", "a" * 64, ""])
def test_namespace_must_be_a_dns_label(tmp_path: Path, serve: Callable[..., FakeServer], namespace: str) -> None:
    server = serve(lambda seen: _json(200, {}))
    result = apply(tmp_path, kubeconfig(server.url), "-n", namespace, "--dry-run=server")
    assert result.code == 2
    assert one_line(result).startswith(
        "elastic-compile: error: argument -n/--namespace: a namespace is a DNS-1123 label"
    )
    assert server.seen == []


def test_the_dry_run_goes_to_the_namespaced_path(tmp_path: Path, serve: Callable[..., FakeServer]) -> None:
    server = serve(lambda seen: _json(201, {"kind": "PyTorchJob"}))
    result = apply(tmp_path, kubeconfig(server.url), "-n", "ml", "--dry-run=server")
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout == "pytorchjob.kubeflow.org/cpu-ddp created (server dry run)\n"
    (seen,) = server.seen
    path, _, query = seen.path.partition("?")
    assert (seen.method, path) == ("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/cpu-ddp")
    assert "dryRun=All" in query.split("&")


def test_a_redirect_is_refused_not_followed(tmp_path: Path, serve: Callable[..., FakeServer]) -> None:
    elsewhere = serve(lambda seen: _json(200, {"kind": "Status", "message": "elsewhere's verdict"}))
    server = serve(lambda seen: (307, {"Location": f"{elsewhere.url}{seen.path}"}, b""))
    result = apply(tmp_path, kubeconfig(server.url), "-n", "ml", "--dry-run=server")
    assert result.code == 1
    assert one_line(result) == (
        f"elastic-compile apply: error: the API server at {server.url} answered PATCH with a redirect (HTTP 307) to "
        "another address: not followed (an API server does not redirect; check the kubeconfig's server)"
    )
    assert len(server.seen) == 1 and elsewhere.seen == []
    assert result.stdout == ""


# --------------------------------------------------------------------------- --message-format


def test_refusals_print_in_the_message_format(tmp_path: Path, serve: Callable[..., FakeServer]) -> None:
    refusal = {
        "kind": "Status",
        "status": "Failure",
        "message": "PyTorchJob.kubeflow.org cpu-ddp is invalid",
        "details": {"causes": [{"field": "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image",
                                "message": "Invalid value: bad"}]},
    }  # fmt: skip
    server = serve(lambda seen: _json(422, refusal))
    result = apply(tmp_path, kubeconfig(server.url), "-n", "ml", "--dry-run=server", "--message-format", "json")
    assert result.code == 1
    (record,) = [json.loads(line) for line in result.stderr.splitlines()]
    assert record["file"] == str(CPU_DDP) and record["field"] == "image" and record["severity"] == "error"
    assert record["line"] > 0 and record["message"].startswith("the server's dry run refused PyTorchJob cpu-ddp: ")

    github = apply(tmp_path, kubeconfig(server.url), "-n", "ml", "--dry-run=server", "--message-format", "github")
    assert github.code == 1
    assert github.stderr.startswith(f"::error file={CPU_DDP},line={record['line']},col={record['column']}::image: ")

    unreachable = apply(tmp_path, kubeconfig("https://127.0.0.1:1"), "--message-format", "json")
    (record,) = [json.loads(line) for line in unreachable.stderr.splitlines()]
    assert unreachable.code == 1 and record["file"] is None
    assert record["message"].startswith("apply: cannot reach the API server at https://127.0.0.1:1: ")
