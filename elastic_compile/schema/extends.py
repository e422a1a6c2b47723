"""How a spec merges onto its base (``extends:``): the lists merged by key, by path; loading a spec with its bases.

:mod:`elastic_compile.core.merge` merges mappings deeply and replaces lists; this module
names the lists of elastic.yaml that merge by key instead (docs/many-jobs.md has the table):

* ``env``, in either form (``NAME: value`` or a list of EnvVars), by name; an inherited
  variable is replaced whole, because a variable has one source (a value and a
  ``valueFrom`` merged together would be both, which the API server rejects);
* ``pod_template.spec``: by Kubernetes' own strategic-merge keys, read from the same file
  the kustomize bases carry (``schema/compact/k8s-merge-keys.json``), so a base merges into
  a spec exactly as an overlay's patch merges into the compiled base: containers,
  initContainers, volumes and imagePullSecrets by name (volumes with ``retainKeys``: a
  volume that names a new source loses the old one), volumeMounts by mountPath, ports by
  containerPort, and a container's env by name as above;
* ``pod_template.spec.tolerations``, which Kubernetes replaces, by ``key`` and ``effect``:
  a node's taints are unique by key and effect, so a toleration with the same pair is the
  same toleration changed (operator, value, seconds), and any other adds to the inherited
  ones. Platform defaults tolerate the GPU taint, a team adds its spot pool, and neither
  has to repeat the other. ``accelerator_tolerations`` merge the same way;
* ``accelerator`` is replaced whole (:data:`~elastic_compile.core.merge.WHOLE`): a device and
  its partition name one piece of hardware, so a job that writes ``{device: nvidia-tesla-a100}``
  under a base's ``{device: nvidia-tesla-a100, partition: 1g.5gb}`` gets the whole GPU, not the
  base's slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from elastic_compile.core import extends, safefs
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded
from elastic_compile.core.merge import ITEM, WHOLE, ListRule
from elastic_compile.schema import ElasticSpec, compact
from elastic_compile.schema.validate import fragment_problems, validate

#: ``env`` at the top level: by name, in both forms.
ENV: Final = ListRule(("name",), "replace", map_value="value")
#: A container's env in the pod template: by name, each variable replaced whole.
CONTAINER_ENV: Final = ListRule(("name",), "replace")
#: ``pod_template.spec.tolerations``: by key and effect (see the module docstring).
TOLERATIONS: Final = ListRule(("key", "effect"), "replace", required=False)

_POD_TEMPLATE_SPEC: Final = ("pod_template", "spec")
_POD_SPEC: Final = "io.k8s.api.core.v1.PodSpec"
_MERGE_KEY: Final = "x-kubernetes-patch-merge-key"
_STRATEGY: Final = "x-kubernetes-patch-strategy"


def _resolve(definitions: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = definitions.get(str(node["$ref"]).rsplit("/", 1)[-1])
    return node


@lru_cache(maxsize=1024)  # the paths of a spec's lists: a few dozen
def spec_rule(path: tuple[str, ...]) -> ListRule | None:
    """The rule of the list at ``path`` (mapping keys and :data:`~elastic_compile.core.merge.ITEM`), or None."""
    if path == ("env",):
        return ENV
    if path == ("accelerator",):
        return WHOLE
    if path == ("accelerator_tolerations",):
        return TOLERATIONS
    if path[:2] != _POD_TEMPLATE_SPEC or len(path) < 3:
        return None
    rest = path[2:]
    if rest == ("tolerations",):
        return TOLERATIONS
    definitions = compact.merge_keys()
    node: Any = definitions.get(_POD_SPEC)
    for part in rest:
        node = _resolve(definitions, node)
        if not isinstance(node, dict):
            return None
        node = node.get("items") if part == ITEM else node.get("properties", {}).get(part)
    if not isinstance(node, dict) or _MERGE_KEY not in node:
        return None
    strategy = str(node.get(_STRATEGY, "")).split(",")
    if "merge" not in strategy:
        return None
    if rest[-1] == "env":
        return CONTAINER_ENV
    return ListRule((str(node[_MERGE_KEY]),), "retain" if "retainKeys" in strategy else "merge")


def resolver(boundary: safefs.Boundary | Path | None = None) -> extends.Resolver:
    """Reads specs with their bases (``extends:``) for one run, each base once.

    ``boundary``: where bases may be read (default: the git working tree of the current
    directory, as for ``-o``).
    """
    return extends.Resolver(boundary or safefs.work_tree(), spec_rule, fragment_problems)


def unique_problems(problems: Sequence[Problem]) -> list[Problem]:
    """Each located message once: a base's problem is found in the base and in every spec merged with it."""
    seen: dict[tuple[str, int, int, str], Problem] = {}
    for p in problems:
        seen.setdefault((p.file, p.line, p.col, p.message), p)
    return list(seen.values())


def load_spec(
    path: str | Path, bases: extends.Resolver | None = None, targets: Sequence[str] | None = None
) -> tuple[Loaded, ElasticSpec]:
    """The spec at ``path`` merged onto its bases, and validated; ``SpecError`` with every problem of both.

    ``targets``: the target names the compile asks for, if any (:func:`~.validate.validate`).
    """
    loaded, problems = (bases or resolver()).load(path)
    try:
        spec = validate(loaded, targets)
    except SpecError as e:
        raise SpecError(sorted(unique_problems([*problems, *e.problems]))) from e
    if problems:
        raise SpecError(sorted(problems))
    return loaded, spec


__all__ = ["CONTAINER_ENV", "ENV", "TOLERATIONS", "load_spec", "resolver", "spec_rule", "unique_problems"]
