"""The compile path stays light: no torch, kubernetes client, flytekit or flyteidl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from elastic_compile import targets

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "kubernetes", "flytekit", "flyteidl", "jsonschema", "kubernetes_validate")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_compile_imports_no_heavy_module() -> None:
    loaded = _modules_after(
        "import io, contextlib\n"
        "from elastic_compile.compiler.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['examples/ddp-2x8-gpu.yaml', '-t', 'all']) == 0\n"
    )
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == [], f"the compile path imported {heavy}"
    assert "jinja2" in loaded and "pydantic" in loaded  # the probe really compiled


def test_one_target_loads_no_other() -> None:
    """A built-in -t (or the spec's own target) imports no other target and reads no installed entry points.

    Listing every target (argparse's choices, the help's summaries) used to cost a one-spec
    compile a scan of every installed distribution's metadata and the import of all targets.
    """
    loaded = _modules_after(
        "import io, contextlib\n"
        "from elastic_compile import targets\n"
        "from elastic_compile.compiler.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['examples/ddp-2x8-gpu.yaml']) == 0\n"
        "    assert main(['examples/ddp-2x8-gpu.yaml', '-t', 'pytorchjob']) == 0\n"
        "assert targets._entry_points.cache_info().currsize == 0, 'entry points were read'\n"
    )
    prefix = "elastic_compile.targets."
    others = sorted(m for m in loaded if m.startswith(prefix) and m.split(".")[2] in targets.BUILTIN)
    assert others == ["elastic_compile.targets.pytorchjob", "elastic_compile.targets.pytorchjob.checks"]


def test_entrypoint_contract_is_stdlib_only() -> None:
    loaded = _modules_after("import elastic_compile.contract, elastic_compile.contract_values")
    assert "elastic_compile.contract_values" in loaded
    assert not {m.split(".")[0] for m in loaded} & {"jinja2", "pydantic", "yaml", *HEAVY}


def test_commands_import_only_what_they_need() -> None:
    """--version imports no library at all; schema prints the spec models' JSON Schema without Jinja."""
    version = _modules_after(
        "import io, contextlib\n"
        "from elastic_compile.compiler.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    assert main(['--version']) == 0\n"
        "assert out.getvalue().startswith('elastic-compile ')\n"
    )
    assert not {m.split(".")[0] for m in version} & {"jinja2", "pydantic", "yaml", *HEAVY}
    schema = _modules_after(
        "import io, contextlib\n"
        "from elastic_compile.compiler.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['schema']) == 0\n"
    )
    assert "pydantic" in schema and "jinja2" not in schema


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function, absolute (relative ones resolved)."""
    import ast

    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _below(layer: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    offenders: dict[str, list[str]] = {}
    for path in sorted((ROOT / "elastic_compile" / layer).rglob("*.py")):
        bad = sorted(m for m in _imports(path) if m.split(".")[0] in forbidden or m.startswith(forbidden))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    return offenders


def test_core_imports_nothing_above_it() -> None:
    """core/ is the bottom layer: what the schema, the targets and the compiler share (docs/development.md)."""
    above = tuple(f"elastic_compile.{layer}" for layer in ("schema", "targets", "compiler", "localrun", "entrypoint"))
    assert _below("core", above) == {}
    assert _imports(ROOT / "elastic_compile" / "compiler" / "cli.py")  # the scan finds imports at all


def test_the_launcher_imports_neither_jinja2_nor_the_compiler() -> None:
    """entrypoint/ runs in the training image: it shares only elastic_compile.contract with the compiler."""
    compiler = tuple(f"elastic_compile.{layer}" for layer in ("compiler", "schema", "targets", "localrun"))
    assert _below("entrypoint", ("jinja2", "pydantic", "yaml", *compiler)) == {}


def test_the_commands_name_no_target_or_kind() -> None:
    """compiler/ iterates the registered targets (pipeline, lints, import, doctor, explain, the -o base):
    a target's name or a kind it emits, as a string in its code, is target knowledge in the wrong place."""
    import re

    names = ("pytorchjob", "trainjob", "podtemplate", "flyte", "flyte2")
    kinds = ("PyTorchJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime", "PodTemplate")
    literal = re.compile("|".join(rf"""(?<![\w.])["']{re.escape(w)}["']""" for w in (*names, *kinds)))
    found = {}
    for path in sorted((ROOT / "elastic_compile" / "compiler").glob("*.py")):
        hits = [line.strip() for line in path.read_text().splitlines() if literal.search(line.split("#")[0])]
        # Docstrings show examples of -t names; they are prose, not decisions.
        hits = [h for h in hits if not h.startswith(("``", '"""', "'", "*")) and "``" not in h]
        if hits:
            found[path.name] = hits
    assert {name: [h.split("  #")[0] for h in hits] for name, hits in found.items()} == {}
