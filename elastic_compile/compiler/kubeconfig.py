"""The kubeconfig ``apply`` reads: checked before the ``kubernetes`` client loads it, and the client made quiet.

The client turns a malformed kubeconfig into whatever its code happens to raise (a YAML
scanner error of several lines, ``binascii.Error: Incorrect padding``, an ``AttributeError``
for a user entry that is a string), and a failing exec credential plugin into a line of
Python logging (``ERROR:root:exec: ...``) after which it goes on without credentials. Here
every such problem is one line, ``kubeconfig FILE: ...``, naming the entry at fault and never
a value of the file (tokens, keys and passwords live there), and exit 2 (bad input), as
kubectl refuses such a kubeconfig before it sends anything.

The files are read as the client reads them (``yaml.safe_load``; ``$KUBECONFIG`` a list of
files merged, the first entry of a name winning), so what is checked is what it loads.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from elastic_compile.core.errors import Problem, SpecError, printable

#: A kubeconfig larger than this is not one (a few hundred clusters with their CAs fit in 1 MiB).
MAX_BYTES: Final = 4 * 1024 * 1024
#: The most values aliases may add to a kubeconfig. The client's messages print its entries with
#: ``repr``, aliases expanded: 700 bytes of nested aliases took 28 s and 1 GiB before it sent anything.
MAX_ALIAS_GROWTH: Final = 100_000
#: The most YAML events (values, collections, aliases) a kubeconfig may hold: a context with its
#: cluster and user is about 25, so this is 2,000 of them; the pure-Python parser reads it in about 3 s.
MAX_EVENTS: Final = 50_000
#: The deepest nesting of a kubeconfig (its own is 5 levels).
MAX_DEPTH: Final = 64
#: The client's separator of the files in ``$KUBECONFIG`` (``kubernetes.config.kube_config``).
PATH_SEPARATOR: Final = ";" if os.name == "nt" else ":"
DEFAULT: Final = "~/.kube/config"

#: The body key of each list's entries.
_BODIES: Final = {"clusters": "cluster", "contexts": "context", "users": "user"}
#: Fields that must be strings when present, per kind of entry.
_STRINGS: Final = {
    "cluster": ("server", "certificate-authority", "certificate-authority-data", "tls-server-name", "proxy-url"),
    "context": ("cluster", "user", "namespace"),
    "user": (
        "token",
        "tokenFile",
        "username",
        "password",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
    ),
}
#: Fields holding base64 (PEM data), per kind of entry: Go's decoder, which kubectl uses, refuses
#: anything but the standard alphabet and padding (line breaks aside).
_BASE64: Final = {
    "cluster": ("certificate-authority-data",),
    "user": ("client-certificate-data", "client-key-data"),
}


#: The body of an entry that has none (``user:`` left empty): the client cannot load it.
_MISSING: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(frozen=True)
class Active:
    """What the kubeconfig's chosen context names."""

    shown: str  # the file (or files) messages name
    context: str
    cluster: str
    user: str | None
    namespace: str | None


def location(kubeconfig: str | None) -> str:
    """The file(s) the client reads: ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``."""
    return kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT


def error(shown: str, message: str) -> SpecError:
    """The one line of a kubeconfig problem: ``elastic-compile: error: kubeconfig FILE: MESSAGE``."""
    return SpecError([Problem("elastic-compile", 0, 0, "usage", printable(f"kubeconfig {shown}: {message}"))])


def _read(path: str) -> Any:
    """One file as the client parses it; SpecError naming the place of a YAML error, never its text."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise error(path, f"cannot read it: {e.strerror or type(e).__name__}") from None
    if len(raw) > MAX_BYTES:
        raise error(path, f"larger than {MAX_BYTES} bytes; not a kubeconfig")
    try:
        too_costly = _bounded(raw)
        if too_costly is not None:
            raise error(path, f"not a kubeconfig: {too_costly}")
        return yaml.safe_load(raw)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise error(path, f"not valid YAML{at}: {e.problem or e.context}") from None
    except yaml.YAMLError as e:  # bytes that are not UTF-8 (a ReaderError): its first line names no content
        raise error(path, f"not valid YAML: {str(e).splitlines()[0]}") from None
    # What PyYAML's constructor lets through from Python itself: int() past its 4,300 digits,
    # and the recursion of thousands of nested brackets.
    except ValueError:
        raise error(path, "not a kubeconfig: a number longer than Python reads (4300 digits)") from None
    except RecursionError:
        raise error(path, "not a kubeconfig: nested too deeply to read") from None


def _bounded(raw: bytes) -> str | None:
    """Why ``raw`` is too costly to load (too many values, or aliases that add too many), or None.

    One pass over PyYAML's events, stopped at the bound: the client loads with the pure-Python
    loader, so a 3.8 MB list of 1.9 million numbers ran for more than 300 s and 1.4 GiB; and it
    prints entries with ``repr``, aliases expanded. Each alias adds the size of its anchor's node.
    """
    sizes: dict[str, int] = {}  # anchor -> values in its node, aliases expanded
    open_: list[list[Any]] = [[0, None]]  # [values so far, anchor] of each open collection
    nodes = expanded = 0  # the document's values as written, and with every alias expanded
    for events, event in enumerate(yaml.parse(raw, Loader=yaml.SafeLoader), start=1):
        if events > MAX_EVENTS:
            return f"more than {MAX_EVENTS} values"
        if len(open_) > MAX_DEPTH:
            # PyYAML's scanner checks every open flow level at each token: 5,000 '[' took 15 s.
            return f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(event, yaml.AliasEvent):
            size = sizes.get(event.anchor or "", 0)  # a recursive alias (its node still open) adds nothing more
            open_[-1][0] += size
            expanded += size
            if expanded - nodes > MAX_ALIAS_GROWTH:
                return f"its aliases expand it by more than {MAX_ALIAS_GROWTH} values"
        elif isinstance(event, yaml.ScalarEvent):
            open_[-1][0] += 1
            nodes += 1
            expanded += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_.append([1, event.anchor])
            nodes += 1
            expanded += 1
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            size, anchor = open_.pop()
            if anchor is not None:
                sizes[anchor] = size
            open_[-1][0] += size
    return None


def _entry_problem(kind: str, body: Any) -> str | None:
    """What is wrong with the shape of one entry's body (``cluster``, ``context``, ``user``)."""
    if body is None:
        return None
    if not isinstance(body, Mapping):
        return f"{kind}: must be a mapping (given: a {type(body).__name__})"
    for key in _STRINGS[kind]:
        if key in body and body[key] is not None and not isinstance(body[key], str):
            return f"{kind}.{key}: must be a string (given: a {type(body[key]).__name__})"
    for key in _BASE64.get(kind, ()):
        value = body.get(key)
        if isinstance(value, str):
            try:
                base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
            except (binascii.Error, ValueError):
                return f"{kind}.{key}: not valid base64 (the value is not shown)"
    if kind == "cluster" and not isinstance(body.get("insecure-skip-tls-verify"), bool | None):
        return f"{kind}.insecure-skip-tls-verify: must be true or false"
    if kind == "user":
        return _exec_problem(body.get("exec"))
    return None


def _exec_problem(spec: Any) -> str | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        return "user.exec: must be a mapping"
    if not isinstance(spec.get("command"), str) or not spec["command"]:
        return "user.exec.command: must be the program to run"
    args = spec.get("args")
    if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        return "user.exec.args: must be a list of strings"
    env = spec.get("env")
    if env is not None and not (
        isinstance(env, list)
        and all(
            isinstance(e, Mapping) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str) for e in env
        )
    ):
        return "user.exec.env: must be a list of {name, value} strings"
    return None


def check(kubeconfig: str | None, context: str | None) -> Active:
    """Read and check the kubeconfig as the client would merge it; the chosen context's entries.

    SpecError (one line, naming the file and the entry) for what the client would choke on:
    YAML, shapes, base64, a context or cluster that is not there.
    """
    shown = location(kubeconfig)
    paths = [os.path.expanduser(p) for p in shown.split(PATH_SEPARATOR) if p]
    found = [p for p in paths if os.path.exists(p)]
    if not found:
        raise error(shown, "no such file" if len(paths) == 1 else "none of these files exists")
    merged: dict[str, dict[str, tuple[str, Any]]] = {kind: {} for kind in _BODIES}
    current: str | None = None
    for path in found:
        doc = _read(path)
        if doc is None:
            raise error(path, "the file is empty")
        if not isinstance(doc, Mapping):
            raise error(path, f"must be a mapping of kubeconfig fields (kind: Config), not a {type(doc).__name__}")
        for kind, body_key in _BODIES.items():
            entries = doc.get(kind)
            if entries is None:
                continue
            if not isinstance(entries, list):
                raise error(path, f"{kind}: must be a list")
            for i, entry in enumerate(entries):
                if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                    raise error(path, f"{kind}[{i}]: must be a mapping with a name")
                name = entry["name"]
                why = _entry_problem(body_key, entry.get(body_key))
                if why is not None:
                    raise error(path, f"{kind}[{i}] ({name}): {why}")
                body = entry.get(body_key)
                # The client reads the chosen entries' bodies with ``entry[key]``, which fails on a
                # missing or null body with a message that quotes the whole entry (a token written
                # one level too far out, beside an empty ``user:``): judged here, by name only.
                merged[kind].setdefault(name, (path, body if body is not None else _MISSING))
        # The client keeps the last file's current-context (KubeConfigMerger.load_config).
        if doc.get("current-context") is not None:
            current = str(doc["current-context"])
    chosen = context if context is not None else current
    if not chosen:
        raise error(shown, "no current-context; give --context")
    if chosen not in merged["contexts"]:
        raise error(shown, f"no context named {chosen}")
    where, ctx = merged["contexts"][chosen]
    if ctx is _MISSING:
        raise error(where, f"context {chosen}: context: missing or null; it must name a cluster")
    cluster = ctx.get("cluster")
    if not isinstance(cluster, str) or cluster not in merged["clusters"]:
        raise error(where, f"context {chosen}: its cluster {cluster} is not in the kubeconfig")
    if merged["clusters"][cluster][1] is _MISSING:
        raise error(
            merged["clusters"][cluster][0], f"cluster {cluster}: cluster: missing or null; it must hold the server"
        )
    cluster_file, cluster_body = merged["clusters"][cluster]
    if not _server_url(cluster_body.get("server")):
        raise error(
            cluster_file,
            f"cluster {cluster}: cluster.server: must be an https:// (or http://) URL with a host "
            "(the value is not shown)",
        )
    user = ctx.get("user")
    if isinstance(user, str) and user in merged["users"] and merged["users"][user][1] is _MISSING:
        raise error(merged["users"][user][0], f"user {user}: user: missing or null (write the credentials under it)")
    namespace = ctx.get("namespace") or None
    return Active(shown, chosen, cluster, user if isinstance(user, str) else None, namespace)


@contextmanager
def quiet_client() -> Iterator[list[logging.LogRecord]]:
    """While the client runs: nothing of its logging (or urllib3's) printed; the kubernetes
    package's own error records kept in the list yielded (an exec plugin's failure is one).

    ``kube_config`` logs with ``logging.error``, which gives the root logger a handler printing to
    stderr when it has none (``logging.basicConfig``): a handler of ours is there first. Every
    logger is as it was afterwards (tests call the command in one process).
    """
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR and "kubernetes" in Path(record.pathname).parts:
                records.append(record)

    root = logging.getLogger()
    keep = _Keep()
    quiet = [logging.getLogger(name) for name in ("kubernetes", "urllib3")]
    saved = [(logger, logger.propagate, logger.handlers[:]) for logger in quiet]
    root.addHandler(keep)
    for logger in quiet:
        logger.propagate = False
        logger.handlers = [logging.NullHandler()]
    try:
        yield records
    finally:
        root.removeHandler(keep)
        for logger, propagate, handlers in saved:
            logger.propagate = propagate
            logger.handlers = handlers


def _server_url(server: Any) -> bool:
    """Whether ``server`` is an http(s) URL with a host.

    The client passes anything else to urllib3 as it is: ``127.0.0.1:6443`` goes out as plain
    HTTP with the credentials (client-go would use https with a CA or certificate configured),
    and urllib3 prints a FutureWarning of two lines; a missing one becomes a request to no host.
    """
    if not isinstance(server, str):
        return False
    try:
        parts = urlsplit(server)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an invalid port or IPv6 literal
        return False


def _without_values(message: str) -> str:
    """The first line of the client's ConfigException, cut before any entry it quotes.

    The client names each merged entry ``<file>/<repr of the entry>`` (``KubeConfigMerger._merge``),
    so ``Expected key server in <file>/{'name': 'c', ...}/cluster`` would print every value of it.
    """
    line = (message.splitlines() or ["ConfigException"])[0]
    quoted = line.find("{")
    return line if quoted < 0 else line[:quoted].rstrip("/ ") + " (the entry is not shown)"


def load_client(active: Active, kubeconfig: str | None, records: list[logging.LogRecord]) -> Any:
    """The client's ``ApiClient`` for ``active``'s context; SpecError (one line) when it cannot load.

    Call inside :func:`quiet_client`, passing its records. The client retries nothing and
    follows no redirect (``urllib3.Retry(total=0, redirect=False)``): a redirect comes back as
    the response, for the caller to refuse.
    """
    import urllib3
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration(retries=urllib3.Retry(total=0, redirect=False))

    entry = f"context {active.context} (cluster {active.cluster}, user {active.user or 'none'})"
    before = len(records)
    try:
        # persist_config=False: never write the kubeconfig back. The client's functions are untyped.
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=location(kubeconfig),
            context=active.context,
            persist_config=False,
            client_configuration=configuration,
        )
    except ConfigException as e:
        raise error(active.shown, f"{entry}: {_without_values(str(e))}") from None
    except Exception as e:  # the client's own code choking on a shape we do not check; its text may quote values
        raise error(active.shown, f"{entry}: the kubernetes client cannot load it ({type(e).__name__})") from None
    failed = records[before:]
    if failed:
        # "exec: process returned 1. <the plugin's stderr>": the plugin's own words, first line only.
        said = (failed[0].getMessage().splitlines() or ["failed"])[0][:300]
        api.close()
        raise error(active.shown, f"user {active.user or 'none'}: the exec credential plugin failed: {said}")
    return api


__all__ = ["Active", "check", "error", "load_client", "location", "quiet_client"]
