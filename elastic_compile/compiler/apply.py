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
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from elastic_compile import targets
from elastic_compile.compiler.pipeline import Compiled
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.targets.checks import locate, parse_path

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
        return f"{root}/namespaces/{self.namespace}/{self.plural}/{self.doc['metadata']['name']}"


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


class Client:
    """The API client of the kubeconfig, and the one request apply makes."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        try:
            # The client's functions are untyped; persist_config=False: never write the kubeconfig back.
            self.api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, persist_config=False
            )
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
            if context is not None:
                active = next(c for c in contexts if c["name"] == context)
        except (ConfigException, OSError, StopIteration) as e:
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise SpecError([Problem("elastic-compile", 0, 0, "usage", f"kubeconfig {where}: {e}")]) from e
        self.api.user_agent = USER_AGENT
        self.namespace = str((active.get("context") or {}).get("namespace") or "default")
        self.server = str(self.api.configuration.host)

    def close(self) -> None:
        self.api.close()

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
        try:
            resp = self.api.call_api(method_, url, header_params=headers, body=payload)
        except urllib3.exceptions.HTTPError as e:
            raise ApplyFailed(f"cannot reach the API server at {self.server}: {e}") from e
        raw = resp.read() or b"{}"
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"message": raw.decode("utf-8", "replace")[:500]}
        return resp.status, data, resp.headers


def run(
    compiled: Sequence[Compiled],
    *,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    dry_run: bool,
    field_manager: str,
    force_conflicts: bool,
) -> int:
    """Dry-run every object, then (unless ``dry_run``) apply them; print as the module says; the exit code."""
    client = Client(kubeconfig, context)
    try:
        items = plan(compiled, namespace, client.namespace)
        return _run(client, items, dry_run=dry_run, field_manager=field_manager, force_conflicts=force_conflicts)
    except ApplyFailed as e:
        print(f"elastic-compile apply: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        client.close()


def _run(client: Client, items: list[Item], *, dry_run: bool, field_manager: str, force_conflicts: bool) -> int:
    query = [("fieldManager", field_manager), ("fieldValidation", "Strict")]
    if force_conflicts:
        query.append(("force", "true"))
    problems: list[Problem] = []
    unchecked = _needs_not_yet_there(client, items)
    for item in items:
        if id(item) in unchecked:
            print(
                f"elastic-compile apply: note: {item.shown}: not dry-run: the server admits it only once "
                f"{unchecked[id(item)]} exists, which this apply creates first",
                file=sys.stderr,
            )
            continue
        status, body, headers = client.request("PATCH", item.path, [*query, ("dryRun", "All")], item.doc)
        for text in _warnings(headers):
            problems.append(locate(item.compiled.loaded, ("name",), f"warning from the server on {item.shown}: {text}"))
        if not 200 <= status < 300:
            problems += refusal_problems(item, body, dry_run=True)
        elif dry_run:
            print(f"{item.shown} {'created' if status == 201 else 'configured'} (server dry run)")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return EXIT_REFUSED
    if dry_run:
        return 0
    for item in items:
        status, body, _ = client.request("PATCH", item.path, query, item.doc)
        if not 200 <= status < 300:
            for p in refusal_problems(item, body, dry_run=False):
                print(p, file=sys.stderr)
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


__all__ = ["FIELD_MANAGER", "ApplyFailed", "Item", "plan", "refusal_problems", "run", "spec_path"]
