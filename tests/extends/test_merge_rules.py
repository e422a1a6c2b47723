"""Every merge rule of ``extends:`` (docs/many-jobs.md's table), through the real compile.

Each test writes a base and a spec into a working tree, compiles the spec, and checks the
validated spec and the PyTorchJob it became: a rule that merged the data but lost the
value on the way out would fail here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from extends_helpers import JOB, Write, compile_file, container, pod, user_env

from elastic_compile.compiler.pipeline import compile_path, resolver
from elastic_compile.core.errors import SpecError


def test_mappings_merge_deeply_and_the_extending_file_wins(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": """
                image: registry.example.com/trainer:1
                labels: {team: ml, tier: batch}
                resources:
                  requests: {cpu: 8, memory: 64Gi}
                  limits: {memory: 64Gi}
                rdzv: {join_timeout: 15m, read_timeout: 20m}
                run_policy: {clean_pod_policy: All, ttl_seconds_after_finished: 600}
            """,
            "job.elastic.yaml": """
                extends: _base.elastic.yaml
                name: job
                command: [python, train.py]
                labels: {tier: interactive, app: bert}
                resources:
                  requests: {cpu: 16}
                rdzv: {join_timeout: 30m}
                run_policy: {ttl_seconds_after_finished: 60}
            """,
        }
    )
    spec = compile_file("job.elastic.yaml").spec
    assert spec.labels == {"team": "ml", "tier": "interactive", "app": "bert"}
    assert (spec.resources.requests, spec.resources.limits) == ({"cpu": "16", "memory": "64Gi"}, {"memory": "64Gi"})
    assert (spec.rdzv.join_timeout, spec.rdzv.read_timeout) == (1800, 1200)
    assert (spec.run_policy.clean_pod_policy, spec.run_policy.ttl_seconds_after_finished) == ("All", 60)
    assert spec.image == "registry.example.com/trainer:1"


def test_a_chain_merges_from_the_last_base_and_the_nearest_file_wins(write: Write) -> None:
    write(
        {
            "platform/_defaults.elastic.yaml": "image: reg/platform:1\nmax_restarts: 3\nnnodes: 2\n",
            "teams/nlp/_team.elastic.yaml": "extends: ../../platform/_defaults.elastic.yaml\nimage: reg/nlp:2\n",
            "teams/nlp/job.elastic.yaml": "extends: _team.elastic.yaml\n" + JOB + "max_restarts: 5\n",
        }
    )
    compiled = compile_file("teams/nlp/job.elastic.yaml")
    assert (compiled.spec.image, compiled.spec.max_restarts, compiled.spec.nnodes.max) == ("reg/nlp:2", 5, 2)
    assert compiled.loaded is not None
    assert compiled.loaded.chain == (
        "teams/nlp/job.elastic.yaml",
        "teams/nlp/_team.elastic.yaml",
        "platform/_defaults.elastic.yaml",
    )


def test_other_lists_and_scalars_are_replaced(write: Write) -> None:
    terms = "[{matchExpressions: [{key: pool, operator: In, values: [%s]}]}]"
    write(
        {
            "_base.elastic.yaml": f"""
                image: reg/t:1
                command: [python, -m, platform.train, --epochs, "10"]
                nnodes: "2:4"
                pod_template:
                  spec:
                    affinity:
                      nodeAffinity:
                        requiredDuringSchedulingIgnoredDuringExecution:
                          nodeSelectorTerms: {terms % "a100, h100"}
            """,
            "job.elastic.yaml": f"""
                extends: _base.elastic.yaml
                name: job
                command: [python, train.py]
                nnodes: 2
                pod_template:
                  spec:
                    affinity:
                      nodeAffinity:
                        requiredDuringSchedulingIgnoredDuringExecution:
                          nodeSelectorTerms: {terms % "h100"}
            """,
        }
    )
    compiled = compile_file("job.elastic.yaml")
    assert compiled.spec.command == ["python", "train.py"]
    assert str(compiled.spec.nnodes) == "2"
    required = pod(compiled)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
    ]


def test_null_removes_an_inherited_value(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": """
                image: reg/t:1
                namespace: ml
                shared_memory: 16Gi
                resources: {requests: {cpu: 8, memory: 64Gi}, limits: {memory: 64Gi}}
                env: {NCCL_DEBUG: WARN, NCCL_IB_HCA: mlx5}
                pod_template:
                  spec:
                    nodeSelector: {pool: a100, zone: a}
                    priorityClassName: batch
            """,
            "job.elastic.yaml": """
                extends: _base.elastic.yaml
                name: job
                command: [python, train.py]
                namespace: null
                shared_memory: ~
                resources: {requests: {memory: null}, limits: null}
                env: {NCCL_IB_HCA: null, NOT_INHERITED: null}
                run_policy: {ttl_seconds_after_finished: null}
                pod_template:
                  spec:
                    nodeSelector: {zone: null}
                    priorityClassName: null
            """,
        }
    )
    compiled = compile_file("job.elastic.yaml")
    spec = compiled.spec
    assert (spec.namespace, spec.shared_memory) == (None, True)  # unset: the schema's defaults
    assert (spec.resources.requests, spec.resources.limits) == ({"cpu": "8"}, {})
    assert spec.env == {"NCCL_DEBUG": "WARN"}
    assert pod(compiled)["nodeSelector"] == {"pool": "a100"}
    assert "priorityClassName" not in pod(compiled)
    assert "namespace" not in compiled.outputs[0].doc["metadata"]


ENV_FORMS = {
    "map": "env: {A: base-a, B: base-b}\n",
    "list": "env:\n  - {name: A, value: base-a}\n  - {name: B, value: base-b}\n",
}
OVER_FORMS = {
    "map": "env: {B: over-b, C: over-c, A: null}\n",
    "list": "env:\n  - {name: B, value: over-b}\n  - {name: C, value: over-c}\n  - {name: A, $patch: delete}\n",
}


@pytest.mark.parametrize("over_form", sorted(OVER_FORMS))
@pytest.mark.parametrize("base_form", sorted(ENV_FORMS))
def test_env_merges_by_name_in_both_forms(write: Write, base_form: str, over_form: str) -> None:
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\n" + ENV_FORMS[base_form],
            "job.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB + OVER_FORMS[over_form],
        }
    )
    compiled = compile_file("job.elastic.yaml")
    # The inherited B keeps its place, C is appended, A is removed; either form in, the same pod out.
    assert user_env(compiled) == [{"name": "B", "value": "over-b"}, {"name": "C", "value": "over-c"}]
    both_maps = base_form == over_form == "map"
    assert isinstance(compiled.spec.env, dict) == both_maps  # one list form unless both are maps


def test_an_env_variable_is_replaced_whole(write: Write) -> None:
    # A value and a valueFrom merged together would be both, which the API server rejects.
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\nenv:\n  - {name: TOKEN, value: dev-token}\n",
            "job.elastic.yaml": "extends: _base.elastic.yaml\n"
            + JOB
            + "env:\n  - name: TOKEN\n    valueFrom: {secretKeyRef: {name: tokens, key: prod}}\n",
        }
    )
    assert user_env(compile_file("job.elastic.yaml")) == [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "prod"}}}
    ]


def test_containers_merge_by_name_and_their_lists_by_kubernetes_keys(write: Write) -> None:
    write(
        {
            "platform/_defaults.elastic.yaml": """
                image: reg/t:1
                pod_template:
                  spec:
                    volumes:
                      - {name: logs, emptyDir: {}}
                    containers:
                      - name: log-shipper
                        image: fluent/fluent-bit:3.0
                        args: [--config, /etc/fb.conf]
                        ports: [{containerPort: 2020, name: metrics}]
                        env: [{name: LEVEL, value: info}]
                        volumeMounts: [{name: logs, mountPath: /logs, readOnly: true}]
            """,
            "_team.elastic.yaml": """
                extends: platform/_defaults.elastic.yaml
                pod_template:
                  spec:
                    volumes:
                      - {name: datasets, persistentVolumeClaim: {claimName: nlp-datasets}}
                    containers:
                      - name: pytorch
                        volumeMounts: [{name: datasets, mountPath: /data, readOnly: true}]
                      - name: log-shipper
                        args: [--config, /etc/team.conf]
                        ports: [{containerPort: 2020, name: http-metrics}, {containerPort: 2021}]
                        env: [{name: TEAM, value: nlp}]
            """,
            "job.elastic.yaml": "extends: _team.elastic.yaml\n"
            + JOB
            + """pod_template:
  spec:
    containers:
      - name: pytorch
        volumeMounts:
          - {name: datasets, mountPath: /data, readOnly: false}
          - {name: logs, mountPath: /logs}
      - name: log-shipper
        env: [{name: LEVEL, value: debug}]
""",
        }
    )
    compiled = compile_file("job.elastic.yaml")
    shipper = container(compiled, "log-shipper")
    assert shipper["image"] == "fluent/fluent-bit:3.0"  # inherited from two files up
    assert shipper["args"] == ["--config", "/etc/team.conf"]  # a plain list: replaced
    assert shipper["ports"] == [{"containerPort": 2020, "name": "http-metrics"}, {"containerPort": 2021}]
    assert shipper["env"] == [{"name": "LEVEL", "value": "debug"}, {"name": "TEAM", "value": "nlp"}]
    assert shipper["volumeMounts"] == [{"name": "logs", "mountPath": "/logs", "readOnly": True}]
    mounts = [m for m in container(compiled)["volumeMounts"] if m["name"] != "dshm"]
    assert mounts == [
        {"name": "datasets", "mountPath": "/data", "readOnly": False},  # by mountPath: merged
        {"name": "logs", "mountPath": "/logs"},
    ]
    assert [v["name"] for v in pod(compiled)["volumes"]] == ["logs", "datasets", "dshm"]


def test_volumes_keep_only_the_source_the_extending_file_names(write: Write) -> None:
    # Kubernetes' retainKeys: a volume that changes its source loses the old one.
    write(
        {
            "_base.elastic.yaml": """
                image: reg/t:1
                pod_template:
                  spec:
                    volumes:
                      - {name: data, emptyDir: {medium: Memory}}
                      - {name: cache, emptyDir: {medium: Memory}}
                    containers:
                      - name: pytorch
                        volumeMounts: [{name: data, mountPath: /data}, {name: cache, mountPath: /cache}]
            """,
            "job.elastic.yaml": "extends: _base.elastic.yaml\n"
            + JOB
            + """pod_template:
  spec:
    volumes:
      - {name: data, persistentVolumeClaim: {claimName: datasets}}
      - {name: cache, emptyDir: {sizeLimit: 10Gi}}
""",
        }
    )
    volumes = {v["name"]: v for v in pod(compile_file("job.elastic.yaml"))["volumes"]}
    assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
    assert volumes["cache"] == {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "10Gi"}}


TOLERATIONS = """
image: reg/t:1
pod_template:
  spec:
    tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
      - {key: cloud.google.com/gke-spot, operator: Equal, value: "true", effect: NoSchedule}
      - {operator: Exists, effect: NoExecute, tolerationSeconds: 300}
"""


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        pytest.param(
            "- {key: dedicated, operator: Equal, value: ml, effect: NoSchedule}",
            ["nvidia.com/gpu", "cloud.google.com/gke-spot", None, "dedicated"],
            id="a new key is added",
        ),
        pytest.param(
            "- {key: nvidia.com/gpu, operator: Exists, effect: NoExecute}",
            ["nvidia.com/gpu", "cloud.google.com/gke-spot", None, "nvidia.com/gpu"],
            id="the same key with another effect is another toleration",
        ),
        pytest.param(
            "- {key: cloud.google.com/gke-spot, effect: NoSchedule, $patch: delete}",
            ["nvidia.com/gpu", None],
            id="delete by key and effect",
        ),
        pytest.param(
            "- {$patch: replace}\n      - {key: dedicated, operator: Exists, effect: NoSchedule}",
            ["dedicated"],
            id="replace the inherited list",
        ),
    ],
)
def test_tolerations_merge_by_key_and_effect(write: Write, over: str, expected: list[str | None]) -> None:
    job = "extends: _base.elastic.yaml\n" + JOB + f"pod_template:\n  spec:\n    tolerations:\n      {over}\n"
    write({"_base.elastic.yaml": TOLERATIONS, "job.elastic.yaml": job})
    assert [t.get("key") for t in pod(compile_file("job.elastic.yaml"))["tolerations"]] == expected


def test_a_toleration_with_the_same_key_and_effect_is_replaced_whole(write: Write) -> None:
    # Merged, Equal's value would stay beside operator Exists, which the API server rejects.
    job = (
        "extends: _base.elastic.yaml\n"
        + JOB
        + "pod_template:\n  spec:\n    tolerations:\n"
        + "      - {key: cloud.google.com/gke-spot, operator: Exists, effect: NoSchedule}\n"
    )
    write({"_base.elastic.yaml": TOLERATIONS, "job.elastic.yaml": job})
    assert pod(compile_file("job.elastic.yaml"))["tolerations"][1] == {
        "key": "cloud.google.com/gke-spot",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


def test_patch_replace_makes_a_mapping_replace_the_inherited_one(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\npod_template:\n  spec:\n    nodeSelector: {pool: a100, zone: a}\n",
            "job.elastic.yaml": "extends: _base.elastic.yaml\n"
            + JOB
            + "pod_template:\n  spec:\n    nodeSelector: {$patch: replace, pool: h100}\n",
        }
    )
    assert pod(compile_file("job.elastic.yaml"))["nodeSelector"] == {"pool": "h100"}


def test_directives_and_nulls_with_nothing_inherited_are_consumed(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\n",
            "job.elastic.yaml": "extends: _base.elastic.yaml\n"
            + JOB
            + """pod_template:
  spec:
    nodeSelector: {$patch: replace, pool: h100, zone: null}
    tolerations:
      - {$patch: replace}
      - {key: gone, effect: NoSchedule, $patch: delete}
      - {key: dedicated, operator: Exists, effect: NoSchedule}
""",
        }
    )
    spec = pod(compile_file("job.elastic.yaml"))
    assert (spec["nodeSelector"], spec["tolerations"]) == (
        {"pool": "h100"},
        [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    )


def test_a_bad_directive_is_a_located_error_in_the_file_that_wrote_it(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": TOLERATIONS,
            "job.elastic.yaml": "extends: _base.elastic.yaml\n"
            + JOB
            + "pod_template:\n  spec:\n    tolerations:\n      - {key: a, $patch: remove}\n"
            + "    nodeSelector: {$patch: delete}\n",
        }
    )
    with pytest.raises(SpecError) as e:
        compile_file("job.elastic.yaml")
    assert [str(p) for p in e.value.problems] == [
        "job.elastic.yaml:7:26: pod_template.spec.tolerations[0].$patch: expected delete (in an entry, beside its "
        "keys) or replace (alone: {$patch: replace}) (given: remove)",
        "job.elastic.yaml:8:28: pod_template.spec.nodeSelector.$patch: expected replace here ($patch: delete "
        "removes an entry of a list merged by key) (given: delete)",
    ]


def test_a_base_shared_by_many_specs_is_never_changed_by_one_of_them(write: Write) -> None:
    # One resolver reads the base once and merges every spec onto the same objects.
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\nenv: {A: base}\nlabels: {team: ml}\n"
            "pod_template: {spec: {nodeSelector: {pool: a100}}}\n",
            "a.elastic.yaml": "extends: _base.elastic.yaml\nname: a\ncommand: [x]\nenv: {A: mine, B: b}\n"
            "labels: {team: null}\npod_template: {spec: {nodeSelector: {pool: null, zone: z}}}\n",
            "b.elastic.yaml": "extends: _base.elastic.yaml\nname: b\ncommand: [x]\n",
        }
    )
    bases = resolver(Path.cwd())
    a = compile_path("a.elastic.yaml", bases=bases)
    b = compile_path("b.elastic.yaml", bases=bases)
    assert (a.spec.env, a.spec.labels, pod(a)["nodeSelector"]) == ({"A": "mine", "B": "b"}, {}, {"zone": "z"})
    assert (b.spec.env, b.spec.labels, pod(b)["nodeSelector"]) == ({"A": "base"}, {"team": "ml"}, {"pool": "a100"})


def test_x_keys_hold_anchors_and_are_ignored_in_every_section(write: Write) -> None:
    write(
        {
            "job.elastic.yaml": """
                x-gpu-node: &gpu-node {node.kubernetes.io/instance-type: a100-80g}
                x-labels: &labels {team: nlp}
                name: job
                image: reg/t:1
                command: [python, train.py]
                labels: *labels
                resources: {x-note: sizes from the capacity plan, requests: {cpu: 8}}
                rdzv: {x-why: a slow image pull, join_timeout: 30m}
                run_policy: {x-owner: nlp, suspend: false}
                pod_template:
                  x-comment: pod settings
                  metadata: {labels: *labels, x-more: 1}
                  spec: {nodeSelector: *gpu-node}
                env: {x-not-a-section: kept}
            """
        }
    )
    compiled = compile_file("job.elastic.yaml")
    assert compiled.spec.labels == {"team": "nlp"}
    assert pod(compiled)["nodeSelector"] == {"node.kubernetes.io/instance-type": "a100-80g"}
    assert compiled.spec.rdzv.join_timeout == 1800
    # env is a map of names, not a section: x-not-a-section is an ordinary variable there.
    assert user_env(compiled) == [{"name": "x-not-a-section", "value": "kept"}]
    dumped = compiled.spec.model_dump(by_alias=True)
    assert not [k for k in dumped if k.startswith("x-")]


def test_x_keys_are_not_allowed_in_kubernetes_shapes(write: Write) -> None:
    # pod_template.spec is Kubernetes' PodSpec: an unknown field there is a typo to report.
    write({"job.elastic.yaml": JOB + "image: reg/t:1\npod_template:\n  spec:\n    x-anchors: {a: 1}\n"})
    with pytest.raises(SpecError) as e:
        compile_file("job.elastic.yaml")
    assert [str(p) for p in e.value.problems] == [
        "job.elastic.yaml:6:5: pod_template.spec.x-anchors: unknown field (given: x-anchors)"
    ]
