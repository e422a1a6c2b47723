"""``launcher: bundled``: elastic-launch as one Python file in a ConfigMap, run by the image's own python3.

Many teams cannot change their training image, but every torch image has Python and
torch, which is all elastic-launch needs. So the compiler emits, beside the job, a
ConfigMap holding the launcher as one self-contained file; the training container mounts
it read-only at :data:`~elastic_compile.schema.models.BUNDLE_MOUNT` and runs
``python3 /opt/elastic-launch/elastic-launch.py <options> -- <command>``.

The file is generated at compile time from the installed package's own modules: the
import closure of ``elastic_compile.entrypoint.cli`` within ``elastic_compile`` (the
entrypoint, ``contract.py``, ``contract_values.py`` and the package ``__init__``), each
embedded as the exact text of its file, plus a small importer that serves them from the
file. It is plain text (the ConfigMap diff of a launcher change shows the code that
changed), generated with no clock, random value or absolute path, in a fixed order, so
two builds are byte-identical. Nothing generated is committed anywhere.

What the manifest says about the launcher: the ConfigMap's labels carry the launcher's
version, its annotation the SHA-256 of the file (``sha256sum`` of the file in the pod
prints the same), and its name the first characters of that hash: a new launcher is a
new, immutable ConfigMap, so the code a running pod was given never changes under it.
The pod template carries the same version and hash.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path
from typing import Any, Final, NamedTuple

import elastic_compile
from elastic_compile import contract
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.compact import CORE_FILE
from elastic_compile.schema.models import BUNDLE_MOUNT, BUNDLE_VOLUME_NAME
from elastic_compile.targets import Document
from elastic_compile.targets.checks import identity_errors, schema_errors

#: The ConfigMap key, hence the file's name in the mount.
BUNDLE_KEY: Final = contract.BUNDLE_FILE
#: Where the training container finds the file.
BUNDLE_PATH: Final = contract.BUNDLE_PATH
#: The image's interpreter. ``python3``, not ``python``: Debian and Ubuntu images without
#: python-is-python3 have only ``python3``, while images with a venv or conda on PATH have both.
PYTHON: Final = "python3"
#: The ConfigMap's file in ``-o`` bases: its own file, so a job's diff stays readable.
CONFIGMAP_FILE: Final = "elastic-launch-configmap.yaml"

#: Label and annotation keys that say which launcher runs (on the ConfigMap and the pods).
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_VERSION: Final = "app.kubernetes.io/version"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
ANNOTATION_SHA256: Final = "elastic-compile.dev/launcher-sha256"
ANNOTATION_LAUNCHER: Final = "elastic-compile.dev/launcher"
#: Hex digits of the SHA-256 in the ConfigMap's name (40 bits: a collision between two
#: launcher versions of one job is not a practical concern).
NAME_DIGEST_LENGTH: Final = 10

#: Kubernetes refuses a ConfigMap whose data and binaryData values exceed 1 MiB together
#: (validation.ValidateConfigMap, api.MaxSecretSize).
CONFIGMAP_LIMIT: Final = 1024 * 1024

_PACKAGE: Final = "elastic_compile"
_ENTRY: Final = "elastic_compile.entrypoint.cli"


class Module(NamedTuple):
    """One module of the bundle: its name, whether it is a package, its file (relative) and text."""

    name: str
    is_package: bool
    relpath: str
    source: str


class Bundle(NamedTuple):
    """The launcher file and what identifies it."""

    modules: tuple[Module, ...]
    text: str
    version: str

    @property
    def sha256(self) -> str:
        """The SHA-256 of the file, as ``sha256sum`` prints it."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return len(self.text.encode("utf-8"))


def package_root() -> Path:
    """The directory of the installed ``elastic_compile`` package."""
    return Path(elastic_compile.__file__).resolve().parent


def _module_file(root: Path, name: str) -> tuple[Path, bool] | None:
    """The file of module ``name`` under ``root`` and whether it is a package; None for no module."""
    parts = name.split(".")[1:]
    base = root.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if parts and base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every ``elastic_compile`` module name ``tree`` imports, at any depth (lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in found if n == _PACKAGE or n.startswith(_PACKAGE + ".")}


def launcher_modules(root: Path | None = None) -> tuple[Module, ...]:
    """The import closure of elastic-launch within ``elastic_compile``, sorted by name.

    Every parent package is included (the import system needs them); a name imported
    ``from`` a module that is not itself a module (a function, a constant) adds nothing.
    """
    root = root or package_root()
    todo = [_ENTRY]
    modules: dict[str, Module] = {}
    while todo:
        name = todo.pop()
        if name in modules:
            continue
        located = _module_file(root, name)
        if located is None:
            continue
        path, is_package = located
        source = path.read_bytes().decode("utf-8")
        modules[name] = Module(name, is_package, path.relative_to(root.parent).as_posix(), source)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += parents
        todo += sorted(_imported(ast.parse(source, filename=str(path)), name, is_package))
    return tuple(modules[name] for name in sorted(modules))


# The file around the modules. Plain text with no clock, path or random value; the
# modules follow, each as a raw string holding its file's exact text. Kept in the
# standard library only: it runs in training images that have nothing of ours.
_HEAD = '''\
#!/usr/bin/env python3
# elastic-launch {version}, bundled by elastic-compile (launcher: bundled). Generated; do not edit.
#
# Run it with the image's own Python, where torch is installed:
#     python3 elastic-launch.py [options] -- python train.py ...
# It is elastic-launch itself: the modules below are the exact text of the files of the
# elastic_compile package that elastic-launch imports ({files}),
# served to the import system from this file, so nothing needs to be installed.
# The ConfigMap that holds this file names its SHA-256 in the annotation
# elastic-compile.dev/launcher-sha256.
import sys

if sys.version_info < (3, 10):
    sys.stderr.write("elastic-launch: error: needs Python 3.10 or newer (this is %d.%d)\\n" % sys.version_info[:2])
    sys.exit(2)

import importlib.abc
import importlib.util

VERSION = {version!r}
_MODULES = {{}}


def _module(name, is_package, relpath, source):
    _MODULES[name] = (is_package, relpath, source)


class _BundledModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Imports the modules of this file before any installed copy, so this version runs.

    Processes that multiprocessing spawns run this file again as __mp_main__, which
    installs the importer there too: function-mode workers import from it.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MODULES:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, origin=self._origin(fullname), is_package=_MODULES[fullname][0]
        )

    def is_package(self, fullname):
        return _MODULES[fullname][0]

    def get_source(self, fullname):
        return _MODULES[fullname][2]

    def get_code(self, fullname):
        # Tracebacks name the module's file inside this one; linecache asks get_source.
        return compile(self.get_source(fullname), self._origin(fullname), "exec", dont_inherit=True)

    def _origin(self, fullname):
        return __file__ + "/" + _MODULES[fullname][1]


'''

_TAIL = """

if not any(type(finder).__name__ == "_BundledModules" for finder in sys.meta_path):
    sys.meta_path.insert(0, _BundledModules())

# The guard matters: spawn and forkserver run this file again in every worker, as __mp_main__.
if __name__ == "__main__":
    from elastic_compile.entrypoint.cli import run

    run()
"""


def _embedded(module: Module) -> str:
    """``module`` as a call that holds its exact text in a raw string."""
    source = module.source
    # A raw triple-quoted string holds any text but these exactly; the test suite runs this
    # on every module, so a module that breaks a rule fails here, in the project's tests.
    if "'''" in source or "\r" in source or not source.endswith("\n"):
        raise ValueError(
            f"{module.relpath}: cannot be embedded verbatim (it holds ''' or \\r, or lacks a final newline)"
        )
    return f"# {module.relpath}\n_module({module.name!r}, {module.is_package!r}, {module.relpath!r}, r'''{source}''')\n"


def build(root: Path | None = None) -> Bundle:
    """The launcher file, built from the package's files under ``root`` (default: the installed package)."""
    modules = launcher_modules(root)
    version = elastic_compile.__version__
    files = ", ".join(m.relpath for m in modules)
    text = _HEAD.format(version=version, files=files) + "\n".join(_embedded(m) for m in modules) + _TAIL
    return Bundle(modules, text, version)


@cache
def bundle() -> Bundle:
    """The launcher file of the installed package (built once per process)."""
    return build()


def configmap_name(spec: ElasticSpec) -> str:
    """``<job>-elastic-launch-<first hex digits of the file's SHA-256>``."""
    return f"{spec.name}-elastic-launch-{bundle().sha256[:NAME_DIGEST_LENGTH]}"


def labels() -> dict[str, str]:
    """What the ConfigMap and the pods say about the launcher, as labels."""
    return {LABEL_NAME: "elastic-launch", LABEL_VERSION: bundle().version, LABEL_PART_OF: "elastic-compile"}


def pod_annotations() -> dict[str, str]:
    """The annotations the pods get: which launcher file they run."""
    b = bundle()
    return {ANNOTATION_LAUNCHER: f"elastic-launch {b.version} (bundled)", ANNOTATION_SHA256: b.sha256}


def configmap(spec: ElasticSpec) -> dict[str, Any]:
    """The ConfigMap holding the launcher file: immutable, so a pod's launcher never changes under it."""
    b = bundle()
    meta: dict[str, Any] = {"name": configmap_name(spec)}
    if spec.namespace is not None:
        meta["namespace"] = spec.namespace
    meta["labels"] = labels()
    meta["annotations"] = {ANNOTATION_SHA256: b.sha256}
    return {"metadata": meta, "immutable": True, "data": {BUNDLE_KEY: b.text}}


def volume(spec: ElasticSpec) -> dict[str, Any]:
    """The pod volume of the ConfigMap."""
    return {"name": BUNDLE_VOLUME_NAME, "configMap": {"name": configmap_name(spec)}}


def volume_mount() -> dict[str, Any]:
    """The training container's read-only mount of it."""
    return {"name": BUNDLE_VOLUME_NAME, "mountPath": BUNDLE_MOUNT, "readOnly": True}


def command() -> list[str]:
    """The training container's command: the image's python3 running the file."""
    return [PYTHON, BUNDLE_PATH]


# --------------------------------------------------------------------------- the document

API_VERSION: Final = "v1"
KIND: Final = "ConfigMap"
#: Its resource on the API server (:attr:`Target.resources <elastic_compile.targets.Target.resources>`).
RESOURCE: Final = {(API_VERSION, KIND): "configmaps"}


def documents(spec: ElasticSpec) -> list[Document]:
    """The ConfigMap document a Kubernetes target emits before its job (none unless ``launcher: bundled``).

    First in the target's list: kubectl creates in stream order, and a pod whose ConfigMap
    does not exist yet waits in ContainerCreating. Every Kubernetes target of ``-t all``
    emits the same document; the pipeline keeps one.
    """
    if spec.launcher != "bundled":
        return []
    return [Document("configmap.yaml.j2", CONFIGMAP_FILE, API_VERSION, KIND, {"configmap": configmap(spec)})]


def check(doc: dict[str, Any], spec: ElasticSpec) -> list[str]:
    """What is wrong with a rendered launcher ConfigMap: identity, schema, size, and the file's exact text."""
    problems = [
        *identity_errors(doc, API_VERSION, KIND, configmap_name(spec)),
        *schema_errors(doc, CORE_FILE, API_VERSION, KIND),
    ]
    data = doc.get("data")
    if not isinstance(data, dict) or data.get(BUNDLE_KEY) != bundle().text:
        problems.append(f"data.{BUNDLE_KEY}: must be the launcher file exactly")
    size = configmap_size(doc)
    if size > CONFIGMAP_LIMIT:
        problems.append(f"data: {size} bytes, above Kubernetes' limit of {CONFIGMAP_LIMIT} for a ConfigMap")
    return problems


def configmap_size(doc: dict[str, Any]) -> int:
    """What the API server counts against :data:`CONFIGMAP_LIMIT`: the bytes of the data values."""
    data = doc.get("data")
    return sum(len(str(v).encode("utf-8")) for v in (data.values() if isinstance(data, dict) else ()))
