"""``elastic-compile apply``: the compiled objects, sent to the cluster of the user's kubeconfig.

Shaped after ``kubectl apply --server-side`` (docs/apply.md says why each choice):

* every object goes through **server-side apply** under our field manager
  (``elastic-compile``; ``--field-manager``), with ``fieldValidation=Strict``: a field the
  server does not know is an error, not a field dropped in silence;
* **a server-side dry run of every object comes first**; only when the server (its schemas,
  CEL rules and the operators' admission webhooks) accepts them all are they applied for
  real, in stream order (our ConfigMap and TrainingRuntime before the job): a spec the
  cluster refuses leaves nothing half-applied by a refusal we could have seen.
  ``--dry-run=server`` stops after the dry run;
* a TrainJob whose own TrainingRuntime is in the same apply and not yet on the server cannot
  be judged by Trainer's webhook before the runtime exists: its dry run is left out (said on
  stderr), and the real apply creates the runtime first;
* ``--namespace`` as kubectl's: the objects of a spec without ``namespace`` go there (default:
  the kubeconfig context's namespace, else ``default``); a spec whose namespace differs is an
  error;
* a conflict with another field manager fails unless ``--force-conflicts``.

Output: one line per object on stdout, as kubectl prints them (``pytorchjob.kubeflow.org/NAME
created``, ``configured``; `` (server dry run)`` after a dry run). Each refusal and each warning
of the server is one located line on stderr, at the spec field we can tie it to (else the
spec's ``name``). Exit 0: all accepted; 1: the server refused an object or could not be reached;
2: bad input (spec, options, kubeconfig).

The ``kubernetes`` client is imported here only, when the command runs (never on the compile
path); only the resource paths of the kinds we emit are used, so nothing is discovered or
cached on disk.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

from elastic_compile import targets
from elastic_compile.compiler.pipeline import Compiled
from elastic_compile.core import names
from elastic_compile.core.errors import Problem, SpecError, printable, show_given
from elastic_compile.targets.checks import locate, parse_path

if TYPE_CHECKING:
    from elastic_compile.compiler.diagnostics import Reporter

#: The field manager of every object we apply (``--field-manager`` changes it).
FIELD_MANAGER: Final = "elastic-compile"


#: The last name in a server's field path -> the spec field that writes it (for locating a
#: refusal): the pod's own here, each target's in :attr:`Target.spec_fields`.
_POD_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "image": ("image",),
    "command": ("command",),
    "args": ("command",),
    "env": ("env",),
    "resources": ("resources",),
    "namespace": ("namespace",),
    "labels": ("labels",),
    "annotations": ("annotations",),
}

#: An admission webhook's denial names no cause; its message starts with the field path of its
#: first error ("... denied the request: spec.runtimeRef: Invalid value: ...").
_DENIED_AT: Final = re.compile(r"denied the request: ([A-Za-z][\w.\[\]\"/-]*): ")

EXIT_REFUSED: Final = 1
USER_AGENT: Final = "elastic-compile"


class ApplyFailed(Exception):
    """The server refused, or could not be reached; the message says which and why."""


@dataclass(frozen=True)
class Item:
    """One object to apply, with the spec it came from."""

    compiled: Compiled
    doc: dict[str, Any]
    namespace: str
    #: The API resource (plural) of the object's kind, from the targets (:func:`plan` looked it up).
    plural: str

    @property
    def shown(self) -> str:
        """``kind.group/name`` as kubectl prints it."""
        group = self.doc["apiVersion"].rpartition("/")[0]
        kind = str(self.doc["kind"]).lower()
        return f"{kind}.{group}/{self.doc['metadata']['name']}" if group else f"{kind}/{self.doc['metadata']['name']}"

    @property
    def path(self) -> str:
        """The object's resource path on the API server."""
        version = self.doc["apiVersion"]
        root = "/api/v1" if version == "v1" else f"/apis/{version}"
        # Both are checked names (DNS labels, subdomains); quoted anyway, so that no text can add a path segment.
        namespace, name = quote(self.namespace, safe=""), quote(str(self.doc["metadata"]["name"]), safe="")
        return f"{root}/namespaces/{namespace}/{self.plural}/{name}"


def plan(compiled: Sequence[Compiled], namespace: str | None, default_namespace: str) -> list[Item]:
    """Every Kubernetes object of ``compiled``, in stream order, each with the namespace it goes to.

    A spec's own namespace wins; one that differs from ``namespace`` (``-n``) is an error, as
    in kubectl. ``SpecError`` with one located line per spec at fault.
    """
    items: list[Item] = []
    problems: list[Problem] = []
    known = targets.resources()  # every kind our targets emit (all namespaced)
    for c in compiled:
        if namespace is not None and c.spec.namespace and c.spec.namespace != namespace:
            problems.append(
                locate(
                    c.loaded,
                    ("namespace",),
                    f"the spec's namespace is {c.spec.namespace}, not --namespace {namespace} "
                    f"(kubectl refuses the same: give --namespace {c.spec.namespace}, or none)",
                )
            )
            continue
        ns = c.spec.namespace or namespace or default_namespace
        for output in c.outputs:
            if not output.is_resource:
                continue  # the Flyte task spec: no Kubernetes object
            key = (str(output.doc.get("apiVersion")), str(output.doc.get("kind")))
            if key not in known:
                raise SpecError([locate(c.loaded, (), f"apply: {key[1]} ({key[0]}) is no kind apply knows")])
            doc = json.loads(json.dumps(output.doc))
            doc["metadata"]["namespace"] = ns
            items.append(Item(c, doc, ns, known[key]))
    if problems:
        raise SpecError(problems)
    return items


def spec_path(server_field: str) -> tuple[str, ...]:
    """The spec field a server's field path (``spec.trainer.image``) comes from, else ``name``."""
    parts = [p for p in parse_path(server_field.lstrip(".")) if isinstance(p, str)]
    fields = {**_POD_FIELDS, **targets.spec_fields()}
    for part in reversed(parts):
        if part in fields:
            return fields[part]
    return ("name",)


def refusal_problems(item: Item, body: Mapping[str, Any], dry_run: bool) -> list[Problem]:
    """One located line per cause the server gave (or one for its message)."""
    what = f"{item.doc['kind']} {item.doc['metadata']['name']}"
    verb = "the server's dry run refused" if dry_run else "the server refused"
    causes = [c for c in (body.get("details") or {}).get("causes") or [] if isinstance(c, Mapping)]
    if not causes:
        message = str(body.get("message") or body)
        denied = _DENIED_AT.search(message)
        where = spec_path(denied.group(1)) if denied else ("name",)
        return [locate(item.compiled.loaded, where, f"{verb} {what}: {message}")]
    out = []
    for cause in causes:
        field = str(cause.get("field") or "")
        text = f"{verb} {what}: {field + ': ' if field else ''}{cause.get('message', '')}"
        out.append(locate(item.compiled.loaded, spec_path(field) if field else ("name",), text))
    return out


def _warnings(headers: Any) -> list[str]:
    """The texts of the response's ``Warning`` headers (``299 - "text"``)."""
    out = []
    for raw in headers.getlist("Warning") if hasattr(headers, "getlist") else []:
        code, _, rest = str(raw).partition(" ")
        _agent, _, text = rest.partition(" ")
        out.append(text.strip().strip('"') if code == "299" else str(raw))
    return out


#: Seconds to wait for the TCP connection and the TLS handshake: kubectl's TLS handshake timeout.
CONNECT_TIMEOUT: Final = 10.0
#: ``--request-timeout``'s default, in seconds: a dry run's admission webhooks may take up to 30 s
#: each (their ``timeoutSeconds`` at most), so twice that before a silent server is given up.
REQUEST_TIMEOUT: Final = 60.0
#: The most of a response body read: an API server's answer is a few KiB.
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024


def shown_server(url: str) -> str:
    """The server's URL as a message shows it: a password in it as ``***``, as kubectl shows it.

    A kubeconfig's ``server`` may carry credentials (``https://admin:PASSWORD@host``); every
    line that names the server (unreachable, timed out, redirected) goes to CI logs.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or "@" not in parts.netloc:
        return url if "@" not in url else "the kubeconfig's server (not shown: it holds an @)"
    userinfo, _, host = parts.netloc.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    shown = f"{user}:***@{host}" if has_password else f"{user}@{host}"
    return parts._replace(netloc=shown).geturl()


class _DeadlinePassed(Exception):
    """Raised in the request by :func:`_deadline`'s alarm; urllib3 catches none of its base classes."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (0: never) with :class:`_DeadlinePassed`.

    urllib3's timeouts bound each read of the socket, so a server that sends a byte a second
    (headers or body) would hold the request forever; kubectl's ``--request-timeout`` bounds the
    whole exchange, and so does this. A timer signal reaches only the main thread, where the
    command runs; elsewhere (a caller's thread) the per-read timeouts alone hold.
    """
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _DeadlinePassed

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Client:
    """The API client of the kubeconfig, and the one request apply makes.

    ``request_timeout`` (``--request-timeout``, kubectl's meaning): how long one request may
    wait for the server, 0 for no limit; connecting (TCP and TLS) waits at most
    :data:`CONNECT_TIMEOUT` in any case. Nothing is retried (a refused connection is one line
    at once), and a redirect is refused, never followed: it would send the object, and
    perhaps credentials, to another address.
    """

    def __init__(self, kubeconfig: str | None, context: str | None, request_timeout: float = REQUEST_TIMEOUT) -> None:
        from elastic_compile.compiler import kubeconfig as kc

        active = kc.check(kubeconfig, context)
        if active.namespace is not None and not names.is_dns1123_label(active.namespace):
            raise kc.error(
                active.shown,
                f"context {active.context}: its namespace is not a DNS-1123 label "
                f"(given: {show_given(active.namespace)})",
            )
        self._quiet = kc.quiet_client()
        records = self._quiet.__enter__()
        try:
            self.api = kc.load_client(active, kubeconfig, records)
        except BaseException:
            self._quiet.__exit__(None, None, None)
            raise
        self.api.user_agent = USER_AGENT
        self.namespace = active.namespace or "default"
        self.server = shown_server(str(self.api.configuration.host))
        self.request_timeout = request_timeout
        read = request_timeout or None
        self._timeout = (min(CONNECT_TIMEOUT, read or CONNECT_TIMEOUT), read)

    def close(self) -> None:
        try:
            self.api.close()
        finally:
            self._quiet.__exit__(None, None, None)

    def request(self, method: str, path: str, query: list[tuple[str, str]], body: Any = None) -> tuple[int, Any, Any]:
        """One request; (status, parsed JSON body, headers). Raises ApplyFailed when the server is unreachable."""
        import urllib3

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/apply-patch+yaml"
        # UTF-8 bytes: given a dict, the client writes JSON with \\u escapes, and a character past
        # U+FFFF becomes a surrogate pair, which the server's YAML reader refuses (an emoji in a label).
        payload_bytes = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        method_, url, headers, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query,
            header_params=headers,
            body=payload_bytes,
            auth_settings=["BearerToken"],
        )
        start = time.monotonic()
        try:
            with _deadline(self.request_timeout):
                resp = self.api.call_api(
                    method_, url, header_params=headers, body=payload, _request_timeout=self._timeout
                )
                # The urllib3 response, not yet read (the client asks for it unloaded): read up to the bound only.
                raw = resp.response.read(MAX_RESPONSE_BYTES + 1) or b"{}"
        except _DeadlinePassed:
            raise ApplyFailed(self._too_slow()) from None
        except urllib3.exceptions.HTTPError as e:
            raise ApplyFailed(self._unreachable(e, time.monotonic() - start)) from e
        if 300 <= resp.status < 400:
            raise ApplyFailed(
                f"the API server at {self.server} answered {method} with a redirect (HTTP {resp.status}) to "
                "another address: not followed (an API server does not redirect; check the kubeconfig's server)"
            )
        if len(raw) > MAX_RESPONSE_BYTES:
            raise ApplyFailed(f"the API server at {self.server} answered with more than {MAX_RESPONSE_BYTES} bytes")
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"message": raw.decode("utf-8", "replace")[:500]}
        return resp.status, data, resp.headers

    def _too_slow(self) -> str:
        return f"the API server at {self.server} did not answer within {self.request_timeout:g}s (--request-timeout)"

    def _unreachable(self, e: Exception, waited: float) -> str:
        """One line for a request that got no answer: a timeout, a refused connection, TLS."""
        import urllib3

        reason = e.reason if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None else e
        # A NewConnectionError (refused, no route) is a ConnectTimeoutError too, in urllib3's classes.
        if isinstance(reason, urllib3.exceptions.TimeoutError) and not isinstance(
            reason, urllib3.exceptions.NewConnectionError
        ):
            connect, read = self._timeout
            # urllib3 reports a TLS handshake that never ends as a read timeout; only the time
            # waited tells it from a silent answer: the read's budget is never shorter than connect's.
            if read is None or waited < read:
                return f"cannot reach the API server at {self.server}: no connection within {connect:g}s"
            return self._too_slow()
        cause = reason.__cause__ or reason.__context__
        if isinstance(reason, urllib3.exceptions.NewConnectionError) and isinstance(cause, OSError) and cause.strerror:
            detail = cause.strerror
        else:
            detail = str(reason)
        return printable(f"cannot reach the API server at {self.server}: {(detail.splitlines() or [''])[0]}")


def run(
    compiled: Sequence[Compiled],
    *,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    dry_run: bool,
    field_manager: str,
    force_conflicts: bool,
    request_timeout: float = REQUEST_TIMEOUT,
    reporter: Reporter | None = None,
) -> int:
    """Dry-run every object, then (unless ``dry_run``) apply them; print as the module says; the exit code.

    ``reporter`` prints the located lines (``--message-format``); text on stderr by default.
    """
    from elastic_compile.compiler.diagnostics import Reporter

    out = reporter if reporter is not None else Reporter()
    with _signals_end_by_exit():
        client = Client(kubeconfig, context, request_timeout)
        try:
            items = plan(compiled, namespace, client.namespace)
            return _run(
                client, items, out, dry_run=dry_run, field_manager=field_manager, force_conflicts=force_conflicts
            )
        except ApplyFailed as e:
            if out.format == "text":
                print(f"elastic-compile apply: error: {e}", file=sys.stderr)
            else:
                out.error(f"apply: {e}")
            return EXIT_REFUSED
        finally:
            client.close()


@contextmanager
def _signals_end_by_exit() -> Iterator[None]:
    """SIGTERM and SIGHUP end the command as ``SystemExit(128 + signal)``, through ``finally`` and ``atexit``.

    The client writes the kubeconfig's ``*-data`` (a client's private key) to temporary files
    while it loads it, and removes them only in an ``atexit`` handler, which the default action
    of SIGTERM (a CI job cancelled, ``timeout``) skips: the key stayed in ``$TMPDIR``. Only the
    main thread receives signals; from another thread (a Python caller's) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    wanted = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {signum: signal.signal(signum, end) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(
    client: Client, items: list[Item], out: Reporter, *, dry_run: bool, field_manager: str, force_conflicts: bool
) -> int:
    query = [("fieldManager", field_manager), ("fieldValidation", "Strict")]
    if force_conflicts:
        query.append(("force", "true"))
    problems: list[Problem] = []
    unchecked = _needs_not_yet_there(client, items)
    for item in items:
        if id(item) in unchecked:
            note = (
                f"{item.shown}: not dry-run: the server admits it only once {unchecked[id(item)]} exists, which "
                "this apply creates first"
            )
            if out.format == "text":
                print(f"elastic-compile apply: note: {note}", file=sys.stderr)
            else:
                out.note(f"apply: {note}")
            continue
        status, body, headers = client.request("PATCH", item.path, [*query, ("dryRun", "All")], item.doc)
        for text in _warnings(headers):
            problems.append(locate(item.compiled.loaded, ("name",), f"warning from the server on {item.shown}: {text}"))
        if not 200 <= status < 300:
            problems += refusal_problems(item, body, dry_run=True)
        elif dry_run:
            print(f"{item.shown} {'created' if status == 201 else 'configured'} (server dry run)")
    if problems:
        out.problems(problems)
        return EXIT_REFUSED
    if dry_run:
        return 0
    for item in items:
        status, body, _ = client.request("PATCH", item.path, query, item.doc)
        if not 200 <= status < 300:
            out.problems(refusal_problems(item, body, dry_run=False))
            return EXIT_REFUSED  # what came before it stays applied; what comes after is not sent
        print(f"{item.shown} {'created' if status == 201 else 'configured'}")
    return 0


def _needs_not_yet_there(client: Client, items: Sequence[Item]) -> dict[int, str]:
    """The objects whose admission needs another of this apply that is not on the server yet
    (a TrainJob and its TrainingRuntime: :meth:`Target.admission_needs`), each with that one shown."""
    by_key = {(i.namespace, i.doc["apiVersion"], i.doc["kind"], i.doc["metadata"]["name"]): i for i in items}
    out: dict[int, str] = {}
    for item in items:
        need = targets.admission_needs(item.doc)
        first = by_key.get((item.namespace, *need)) if need is not None else None
        if first is not None:
            status, _, _ = client.request("GET", first.path, [])
            if status == 404:
                out[id(item)] = f"{first.doc['kind']} {first.doc['metadata']['name']}"
    return out


__all__ = ["FIELD_MANAGER", "ApplyFailed", "Item", "plan", "refusal_problems", "run", "shown_server", "spec_path"]
