"""A differential fuzz: the compiler's offline verdict against the real API server's, seeded.

``bench/fuzz_spec.py`` generates the cases (mutations of every example and golden spec, data
and text level; case ``i`` of seed ``s`` is always the same bytes). Each case the compiler
accepts for ``pytorchjob`` and ``podtemplate`` (and ``trainjob``, when it accepts that too) has
every object it emits sent to the server as a strict server-side dry run (our TrainingRuntime
for real, the platform's runtimes it names as copies of the stock one). The server must accept
every one: a refusal is a spec we accept and the cluster does not, a defect of ours. Cases the
compiler refuses are not sent (there is no output to send): our refusals are judged rule by rule
in ``test_refusals_vs_server.py`` (each value as the object we would have made) and, for
Trainer's webhook rules, in ``test_checks_vs_server.py``.

Replay a failing case: ``python bench/fuzz_spec.py --seed cluster --show-case N``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from types import ModuleType

import pytest
from kube_helpers import REPO, ApplyError, Cluster, apply
from specs import platform_runtimes

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import CompileError, SpecError

SEED = "cluster"
CASES = 3000


def _fuzzer() -> ModuleType:
    if "fuzz_spec" in sys.modules:
        return sys.modules["fuzz_spec"]
    spec = importlib.util.spec_from_file_location("fuzz_spec", REPO / "bench" / "fuzz_spec.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_spec"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


# 3,000 cases take 2 to 3.5 minutes at load 9 (2 busy cores): above the suite's 300 s under
# heavier load, so this test's own bound. The work is bounded by CASES, not by the clock.
@pytest.mark.timeout(900, func_only=True)
def test_the_server_accepts_every_spec_we_accept(cluster: Cluster, dry_namespace: str) -> None:
    fuzz = _fuzzer()
    seeds = fuzz.load_seeds(REPO)
    accepted = sent = 0
    defects: list[str] = []
    for index in range(CASES):
        data = fuzz.make_case(SEED, index, seeds).data
        try:
            compiled = compile_text(data, "fuzz.yaml", ("pytorchjob", "podtemplate"))
        except (SpecError, CompileError):
            continue
        accepted += 1
        outputs = list(compiled.outputs)
        with contextlib.suppress(SpecError, CompileError):  # most specs have a TrainJob too
            outputs += compile_text(data, "fuzz.yaml", ("trainjob",)).outputs
        docs = [json.loads(json.dumps(o.doc)) for o in outputs]
        for runtime in platform_runtimes(cluster, docs):
            apply(cluster, runtime, namespace=dry_namespace)
        for doc in docs:
            try:
                apply(cluster, doc, namespace=dry_namespace, dry_run=doc["kind"] != "TrainingRuntime")
                sent += 1
            except ApplyError as e:
                defects.append(f"case {index}: {doc['kind']} {doc['metadata']['name']}: {e}")
    assert accepted >= CASES // 10  # the fuzzer's mix: most mutations are refused, about a sixth are not
    assert sent >= 2 * accepted
    assert not defects, f"{len(defects)} objects of specs we accept refused by the server:\n" + "\n".join(defects)
