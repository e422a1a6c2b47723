"""Class 2 of issue 10: values the API server rejects are located compile errors, with the choices.

A PyTorchJob's CRD takes its pod template with any value: ``imagePullPolicy: always`` passes
the CRD, and then the operator's pod creation fails on every attempt, so the job hangs with
no pod. The rules come from Kubernetes' own validation (pkg/apis/core/validation, 1.33);
each row is an invalid value and its valid twin, compiled through the CLI.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml
from cluster_helpers import BASE, compile_cli, run_cli

SIDE = "containers:\n  - name: side\n    image: ghcr.io/x/side:1\n"
INIT = "initContainers:\n  - name: init\n    image: ghcr.io/x/init:1\n"
PROBE = SIDE + "    livenessProbe:\n"
VOL = "volumes:\n  - name: v\n"
ENV = SIDE + "    env:\n      - name: X\n        valueFrom:\n"


def _c(lines: str) -> str:
    """Lines of the sidecar, indented under it."""
    return SIDE + textwrap.indent(lines, "    ")


# id: (invalid fragment of pod_template.spec, its valid twin, the error's field path, a fragment of the message)
CASES: dict[str, tuple[str, str, str, str]] = {
    "imagePullPolicy": (
        _c("imagePullPolicy: always\n"),
        _c("imagePullPolicy: Always\n"),
        "containers[0].imagePullPolicy",
        "must be one of Always, IfNotPresent or Never; did you mean Always?",
    ),
    "terminationMessagePolicy": (
        _c("terminationMessagePolicy: file\n"),
        _c("terminationMessagePolicy: File\n"),
        "containers[0].terminationMessagePolicy",
        "File or FallbackToLogsOnError",
    ),
    "container-name": (SIDE.replace("name: side", "name: Side"), SIDE, "containers[0].name", "DNS-1123 label"),
    "regular-restartPolicy": (
        _c("restartPolicy: OnFailure\n"),
        SIDE,
        "containers[0].restartPolicy",
        "may be set on init containers only",
    ),
    "dnsPolicy": (
        "dnsPolicy: clusterFirst\n",
        "dnsPolicy: ClusterFirst\n",
        "dnsPolicy",
        "ClusterFirstWithHostNet, ClusterFirst, Default or None; did you mean ClusterFirst?",
    ),
    "dnsPolicy-None": (
        "dnsPolicy: None\n",
        "dnsPolicy: None\ndnsConfig: {nameservers: [10.0.0.10]}\n",
        "dnsPolicy",
        "None needs dnsConfig.nameservers",
    ),
    "nameserver": (
        "dnsConfig: {nameservers: [dns.local]}\n",
        "dnsConfig: {nameservers: [10.0.0.10]}\n",
        "dnsConfig.nameservers[0]",
        "must be an IP address",
    ),
    "preemptionPolicy": (
        "preemptionPolicy: never\n",
        "preemptionPolicy: Never\n",
        "preemptionPolicy",
        "PreemptLowerPriority or Never",
    ),
    "activeDeadlineSeconds": (
        "activeDeadlineSeconds: 0\n",
        "activeDeadlineSeconds: 60\n",
        "activeDeadlineSeconds",
        "between 1 and 2147483647",
    ),
    "toleration-operator": (
        "tolerations: [{key: gpu, operator: exists}]\n",
        "tolerations: [{key: gpu, operator: Exists}]\n",
        "tolerations[0].operator",
        "Equal or Exists; did you mean Exists?",
    ),
    "toleration-effect": (
        "tolerations: [{key: gpu, operator: Exists, effect: NoScheduled}]\n",
        "tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]\n",
        "tolerations[0].effect",
        "NoSchedule, PreferNoSchedule or NoExecute",
    ),
    "toleration-empty-key": (
        "tolerations: [{operator: Equal, value: x}]\n",
        "tolerations: [{operator: Exists}]\n",
        "tolerations[0].operator",
        "must be Exists when key is empty",
    ),
    "toleration-exists-value": (
        "tolerations: [{key: a, operator: Exists, value: x}]\n",
        "tolerations: [{key: a, operator: Exists}]\n",
        "tolerations[0].value",
        "must be empty when operator is Exists",
    ),
    "toleration-seconds": (
        "tolerations: [{key: a, operator: Exists, effect: NoSchedule, tolerationSeconds: 60}]\n",
        "tolerations: [{key: a, operator: Exists, effect: NoExecute, tolerationSeconds: 60}]\n",
        "tolerations[0].effect",
        "must be NoExecute when tolerationSeconds is set",
    ),
    "port-protocol": (
        _c("ports: [{containerPort: 9090, protocol: tcp}]\n"),
        _c("ports: [{containerPort: 9090, protocol: TCP}]\n"),
        "containers[0].ports[0].protocol",
        "TCP, UDP or SCTP; did you mean TCP?",
    ),
    "containerPort": (
        _c("ports: [{containerPort: 0}]\n"),
        _c("ports: [{containerPort: 9090}]\n"),
        "containers[0].ports[0].containerPort",
        "between 1 and 65535",
    ),
    "hostPort": (
        _c("ports: [{containerPort: 9090, hostPort: 70000}]\n"),
        _c("ports: [{containerPort: 9090, hostPort: 9090}]\n"),
        "containers[0].ports[0].hostPort",
        "between 1 and 65535",
    ),
    "port-name": (
        _c("ports: [{containerPort: 9090, name: metrics-exporter-port}]\n"),
        _c("ports: [{containerPort: 9090, name: metrics}]\n"),
        "containers[0].ports[0].name",
        "at most 15",
    ),
    "probe-two-handlers": (
        PROBE + "      httpGet: {port: 8080, path: /h}\n      tcpSocket: {port: 8080}\n",
        PROBE + "      httpGet: {port: 8080, path: /h}\n",
        "containers[0].livenessProbe.tcpSocket",
        "a second handler; give exactly one of exec, httpGet, tcpSocket or grpc (httpGet is set)",
    ),
    "probe-no-handler": (
        PROBE + "      periodSeconds: 5\n",
        PROBE + "      periodSeconds: 5\n      tcpSocket: {port: 8080}\n",
        "containers[0].livenessProbe",
        "needs exactly one handler",
    ),
    "probe-successThreshold": (
        PROBE + "      tcpSocket: {port: 8080}\n      successThreshold: 2\n",
        PROBE + "      tcpSocket: {port: 8080}\n      successThreshold: 1\n",
        "containers[0].livenessProbe.successThreshold",
        "must be 1 for a livenessProbe",
    ),
    "probe-scheme": (
        PROBE + "      httpGet: {port: 8080, scheme: http}\n",
        PROBE + "      httpGet: {port: 8080, scheme: HTTP}\n",
        "containers[0].livenessProbe.httpGet.scheme",
        "HTTP or HTTPS",
    ),
    "probe-port": (
        PROBE + "      httpGet: {port: 0}\n",
        PROBE + "      httpGet: {port: 8080}\n",
        "containers[0].livenessProbe.httpGet.port",
        "between 1 and 65535",
    ),
    "probe-port-name": (
        PROBE + "      tcpSocket: {port: Metrics}\n",
        PROBE + "      tcpSocket: {port: metrics}\n",
        "containers[0].livenessProbe.tcpSocket.port",
        "a port name",
    ),
    "readiness-grace": (
        _c("readinessProbe: {tcpSocket: {port: 80}, terminationGracePeriodSeconds: 5}\n"),
        _c("readinessProbe: {tcpSocket: {port: 80}}\n"),
        "containers[0].readinessProbe.terminationGracePeriodSeconds",
        "must not be set on a readinessProbe",
    ),
    "lifecycle-two-handlers": (
        _c("lifecycle: {preStop: {sleep: {seconds: 5}, exec: {command: [x]}}}\n"),
        _c("lifecycle: {preStop: {sleep: {seconds: 5}}}\n"),
        "containers[0].lifecycle.preStop.exec",
        "a second handler",
    ),
    "init-probe": (
        INIT + "    livenessProbe: {tcpSocket: {port: 80}}\n",
        INIT + "    restartPolicy: Always\n    livenessProbe: {tcpSocket: {port: 80}}\n",
        "initContainers[0].livenessProbe",
        "without restartPolicy: Always",
    ),
    "init-restartPolicy": (
        INIT + "    restartPolicy: OnFailure\n",
        INIT + "    restartPolicy: Always\n",
        "initContainers[0].restartPolicy",
        "must be one of Always",
    ),
    "resizePolicy": (
        _c("resizePolicy: [{resourceName: gpu, restartPolicy: NotRequired}]\n"),
        _c("resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]\n"),
        "containers[0].resizePolicy[0].resourceName",
        "cpu or memory",
    ),
    "hostPath-type": (
        VOL + "    hostPath: {path: /data, type: directory}\n",
        VOL + "    hostPath: {path: /data, type: Directory}\n",
        "volumes[0].hostPath.type",
        "did you mean Directory?",
    ),
    "volume-two-sources": (
        VOL + "    emptyDir: {}\n    hostPath: {path: /data}\n",
        VOL + "    emptyDir: {}\n",
        "volumes[0].hostPath",
        "a second volume source",
    ),
    "mountPropagation": (
        VOL + "    emptyDir: {}\n" + _c("volumeMounts: [{name: v, mountPath: /v, mountPropagation: Bidirectionnal}]\n"),
        VOL + "    emptyDir: {}\n" + _c("volumeMounts: [{name: v, mountPath: /v, mountPropagation: Bidirectional}]\n"),
        "containers[0].volumeMounts[0].mountPropagation",
        "did you mean Bidirectional?",
    ),
    "defaultMode-decimal": (
        VOL + "    configMap: {name: c, defaultMode: 644}\n",
        VOL + "    configMap: {name: c, defaultMode: 0o644}\n",
        "volumes[0].configMap.defaultMode",
        "644 is not one (did you mean 0o644?)",
    ),
    "defaultMode-yaml11-octal": (
        VOL + "    secret: {secretName: s, defaultMode: 0600}\n",
        VOL + "    secret: {secretName: s, defaultMode: 0o600}\n",
        "volumes[0].secret.defaultMode",
        "0600 is the octal file mode 384 to YAML 1.1 and the decimal 600 to YAML 1.2, so readers "
        "disagree; write 0o600 (or 384)",
    ),
    "item-mode": (
        VOL + "    secret: {secretName: s, items: [{key: k, path: k, mode: 1000}]}\n",
        VOL + "    secret: {secretName: s, items: [{key: k, path: k, mode: 0o400}]}\n",
        "volumes[0].secret.items[0].mode",
        "a file mode is between 0 and 0o777 (511)",
    ),
    "downward-volume-fieldPath": (
        VOL + "    downwardAPI: {items: [{path: ip, fieldRef: {fieldPath: status.podIP}}]}\n",
        VOL + "    downwardAPI: {items: [{path: uid, fieldRef: {fieldPath: metadata.uid}}]}\n",
        "volumes[0].downwardAPI.items[0].fieldRef.fieldPath",
        "metadata.labels, metadata.annotations",
    ),
    "downward-volume-containerName": (
        VOL + "    downwardAPI: {items: [{path: c, resourceFieldRef: {resource: limits.cpu}}]}\n",
        VOL + "    downwardAPI: {items: [{path: c, resourceFieldRef: {resource: limits.cpu, "
        "containerName: pytorch}}]}\n",
        "volumes[0].downwardAPI.items[0].resourceFieldRef",
        "needs containerName",
    ),
    "env-fieldPath": (
        ENV + "          fieldRef: {fieldPath: spec.hostname}\n",
        ENV + "          fieldRef: {fieldPath: spec.nodeName}\n",
        "containers[0].env[0].valueFrom.fieldRef.fieldPath",
        "the downward API cannot give it",
    ),
    "env-fieldPath-labels": (
        ENV + "          fieldRef: {fieldPath: metadata.labels}\n",
        ENV + "          fieldRef: {fieldPath: \"metadata.labels['app']\"}\n",
        "containers[0].env[0].valueFrom.fieldRef.fieldPath",
        "metadata.labels['KEY']",
    ),
    "env-resource": (
        ENV + "          resourceFieldRef: {resource: limits.nvidia.com/gpu}\n",
        ENV + "          resourceFieldRef: {resource: limits.cpu}\n",
        "containers[0].env[0].valueFrom.resourceFieldRef.resource",
        "requests.hugepages-<size>",
    ),
    "env-divisor": (
        ENV + "          resourceFieldRef: {resource: limits.cpu, divisor: 1Ki}\n",
        ENV + "          resourceFieldRef: {resource: limits.cpu, divisor: 1m}\n",
        "containers[0].env[0].valueFrom.resourceFieldRef.divisor",
        "for limits.cpu, one of 1m or 1",
    ),
    "hugepages-request-only": (
        _c("resources: {requests: {hugepages-2Mi: 1Gi, memory: 1Gi}}\n"),
        _c("resources: {requests: {hugepages-2Mi: 1Gi, memory: 1Gi}, limits: {hugepages-2Mi: 1Gi}}\n"),
        "containers[0].resources.requests.hugepages-2Mi",
        "does not overcommit hugepages",
    ),
    "hugepages-unequal": (
        _c("resources: {requests: {hugepages-2Mi: 1Gi, memory: 1Gi}, limits: {hugepages-2Mi: 2Gi}}\n"),
        _c("resources: {requests: {hugepages-2Mi: 2Gi, memory: 1Gi}, limits: {hugepages-2Mi: 2Gi}}\n"),
        "containers[0].resources.limits.hugepages-2Mi",
        "the limit must equal the request",
    ),
    "hugepages-alone": (
        _c("resources: {limits: {hugepages-2Mi: 1Gi}}\n"),
        _c("resources: {limits: {hugepages-2Mi: 1Gi, cpu: 1}}\n"),
        "containers[0].resources.limits.hugepages-2Mi",
        "hugepages need a cpu or memory",
    ),
    "device-request-only": (
        _c("resources: {requests: {example.com/fpga: 1}}\n"),
        _c("resources: {requests: {example.com/fpga: 1}, limits: {example.com/fpga: 1}}\n"),
        'containers[0].resources.requests["example.com/fpga"]',
        "does not overcommit a device",
    ),
    "device-fraction": (
        _c("resources: {limits: {example.com/fpga: 500m}}\n"),
        _c("resources: {limits: {example.com/fpga: 1}}\n"),
        'containers[0].resources.limits["example.com/fpga"]',
        "counted in whole units",
    ),
    "seccomp-type": (
        "securityContext: {seccompProfile: {type: runtimeDefault}}\n",
        "securityContext: {seccompProfile: {type: RuntimeDefault}}\n",
        "securityContext.seccompProfile.type",
        "did you mean RuntimeDefault?",
    ),
    "seccomp-localhost": (
        "securityContext: {seccompProfile: {type: Localhost}}\n",
        "securityContext: {seccompProfile: {type: Localhost, localhostProfile: p.json}}\n",
        "securityContext.seccompProfile.localhostProfile",
        "required when type is Localhost",
    ),
    "apparmor-type": (
        _c("securityContext: {appArmorProfile: {type: unconfined}}\n"),
        _c("securityContext: {appArmorProfile: {type: Unconfined}}\n"),
        "containers[0].securityContext.appArmorProfile.type",
        "did you mean Unconfined?",
    ),
    "fsGroupChangePolicy": (
        "securityContext: {fsGroupChangePolicy: OnRootMissmatch}\n",
        "securityContext: {fsGroupChangePolicy: OnRootMismatch}\n",
        "securityContext.fsGroupChangePolicy",
        "did you mean OnRootMismatch?",
    ),
    "runAsUser": (
        "securityContext: {runAsUser: -1}\n",
        "securityContext: {runAsUser: 1000}\n",
        "securityContext.runAsUser",
        "between 0 and 2147483647",
    ),
    "procMount": (
        _c("securityContext: {procMount: unmasked}\n"),
        _c("securityContext: {procMount: Unmasked}\n"),
        "containers[0].securityContext.procMount",
        "Default or Unmasked",
    ),
    "privilege-escalation": (
        _c("securityContext: {privileged: true, allowPrivilegeEscalation: false}\n"),
        _c("securityContext: {privileged: false, allowPrivilegeEscalation: false}\n"),
        "containers[0].securityContext.allowPrivilegeEscalation",
        "cannot be false while privileged",
    ),
    "spread-when": (
        "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotScheduled}]\n",
        "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n",
        "topologySpreadConstraints[0].whenUnsatisfiable",
        "DoNotSchedule or ScheduleAnyway",
    ),
    "spread-maxSkew": (
        "topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]\n",
        "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]\n",
        "topologySpreadConstraints[0].maxSkew",
        "must be at least 1",
    ),
    "node-operator": (
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
        "[{matchExpressions: [{key: zone, operator: in, values: [a]}]}]}}}\n",
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
        "[{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}\n",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator",
        "did you mean In?",
    ),
    "node-gt": (
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
        "[{matchExpressions: [{key: gen, operator: Gt, values: ['3', '4']}]}]}}}\n",
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
        "[{matchExpressions: [{key: gen, operator: Gt, values: ['3']}]}]}}}\n",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].values",
        "exactly one value, an integer",
    ),
    "node-weight": (
        "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
        "[{weight: 0, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}}\n",
        "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
        "[{weight: 50, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}}\n",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "between 1 and 100",
    ),
    "label-operator": (
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: "
        "kubernetes.io/hostname, labelSelector: {matchExpressions: [{key: app, operator: Exist}]}}]}}\n",
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: "
        "kubernetes.io/hostname, labelSelector: {matchExpressions: [{key: app, operator: Exists}]}}]}}\n",
        "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
        ".matchExpressions[0].operator",
        "did you mean Exists?",
    ),
    "os-name": ("os: {name: Linux}\n", "os: {name: linux}\n", "os.name", "linux or windows; did you mean linux?"),
    # apimachinery IsEnvVarName; a trailing newline (YAML "A\n") is no name either.
    "env-name": (
        _c('env: [{name: "A\\n", value: x}]\n'),
        _c("env: [{name: A, value: x}]\n"),
        "containers[0].env[0].name",
        "not a valid environment variable name",
    ),
    # Found by the differential fuzz against kube-apiserver 1.37 (tests/realcluster/test_server_fuzz.py).
    "service-account-name": (
        'serviceAccountName: "1_000"\n',
        "serviceAccountName: trainer\n",
        "serviceAccountName",
        "RFC 1123 subdomain",
    ),
    "secret-key-ref-name": (
        ENV + '          secretKeyRef: {name: "1:4", key: k}\n',
        ENV + "          secretKeyRef: {name: creds, key: k}\n",
        "containers[0].env[0].valueFrom.secretKeyRef.name",
        "RFC 1123 subdomain",
    ),
    "config-map-key-ref-key": (
        ENV + '          configMapKeyRef: {name: conf, key: "a|b"}\n',
        ENV + "          configMapKeyRef: {name: conf, key: a.b}\n",
        "containers[0].env[0].valueFrom.configMapKeyRef.key",
        "not a Secret or ConfigMap key",
    ),
    "match-labels-value": (
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: k, "
        'labelSelector: {matchLabels: {app: "ghcr.io/x:1.0"}}}]}}\n',
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: k, "
        "labelSelector: {matchLabels: {app: trainer}}}]}}\n",
        "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels.app",
        "not a label value",
    ),
    # Found by holding our refusals against kube-apiserver 1.37 (tests/realcluster/test_refusals_vs_server.py).
    "node-selector-key": (
        "nodeSelector: {EXAMPLE.COM/gpu: a100}\n",
        "nodeSelector: {example.com/gpu: a100}\n",
        'nodeSelector["EXAMPLE.COM/gpu"]',
        "not a label key",
    ),
    "node-selector-value": (
        'nodeSelector: {example.com/gpu: "nvidia a100"}\n',
        "nodeSelector: {example.com/gpu: nvidia-a100}\n",
        'nodeSelector["example.com/gpu"]',
        "not a label value",
    ),
    "mount-path-empty": (
        VOL + "    emptyDir: {}\n" + _c('volumeMounts: [{name: v, mountPath: ""}]\n'),
        VOL + "    emptyDir: {}\n" + _c("volumeMounts: [{name: v, mountPath: /v}]\n"),
        "containers[0].volumeMounts[0].mountPath",
        "must not be empty",
    ),
    "device-count": (
        _c("resources: {limits: {example.com/fpga: 10000000000000000}}\n"),
        _c("resources: {limits: {example.com/fpga: 1000}}\n"),
        'containers[0].resources.limits["example.com/fpga"]',
        "at most 9,223,372,036,854,775",
    ),
    "toleration-key": (
        'tolerations: [{key: "a\\"b", operator: Exists}]\n',
        "tolerations: [{key: example.com/gpu, operator: Exists}]\n",
        "tolerations[0].key",
        "not a qualified name",
    ),
}

LINE = re.compile(r"^s\.yaml:\d+:\d+: \S.*$")


def _spec(fragment: str) -> str:
    return BASE + "pod_template:\n  spec:\n" + textwrap.indent(fragment, "    ")


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_invalid_value_is_a_located_error_with_the_choices(tmp_path: Path, case: str) -> None:
    bad, _good, path, message = CASES[case]
    run = compile_cli(tmp_path, _spec(bad))
    assert run.status == 2 and run.out == "", run.err
    assert all(LINE.match(line) for line in run.errors), run.err
    hits = [line for line in run.errors if f": pod_template.spec.{path}: " in line]
    assert len(hits) == 1 and message in hits[0], run.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_its_valid_twin_compiles(tmp_path: Path, case: str) -> None:
    _bad, good, _path, _message = CASES[case]
    run = compile_cli(tmp_path, _spec(good))
    assert run.status == 0, run.err


@pytest.mark.parametrize(
    ("resources", "path", "message"),
    [
        ("{requests: {hugepages-2Mi: 1Gi}}", "resources.requests.hugepages-2Mi", "hugepages need a cpu or memory"),
        ("{requests: {hugepages-2Mi: 1Gi, memory: 2Gi}, limits: {hugepages-2Mi: 2Gi}}",
         "resources.limits.hugepages-2Mi", "hugepages need limit == request (1Gi)"),
    ],
)  # fmt: skip
def test_top_level_hugepages_follow_the_same_rules(tmp_path: Path, resources: str, path: str, message: str) -> None:
    run = compile_cli(tmp_path, BASE + f"resources: {resources}\n")
    assert run.status == 2
    [line] = run.errors
    assert f": {path}: {message}" in line, line


def test_a_hugepages_request_alone_gets_its_limit(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "resources: {requests: {hugepages-2Mi: 1Gi, memory: 4Gi}}\n")
    assert run.status == 0, run.err
    assert run.training["resources"] == {
        "requests": {"hugepages-2Mi": "1Gi", "memory": "4Gi"},
        "limits": {"hugepages-2Mi": "1Gi"},
    }


def test_spec_env_downward_refs_are_checked_too(tmp_path: Path) -> None:
    text = BASE + "env:\n  - name: NODE\n    valueFrom: {fieldRef: {fieldPath: spec.hostname}}\n"
    run = compile_cli(tmp_path, text)
    assert run.status == 2
    [line] = run.errors
    assert line.startswith("s.yaml:6:39: env[0].valueFrom.fieldRef.fieldPath: the downward API cannot give it"), line


def test_spec_env_secret_and_config_map_refs_are_checked_too(tmp_path: Path) -> None:
    """Names and keys the API server refuses in the pod (found by tests/realcluster/test_server_fuzz.py)."""
    text = BASE + (
        "env:\n  - name: A\n    valueFrom: {secretKeyRef: {name: '1:4', key: k}}\n"
        "  - name: B\n    valueFrom: {configMapKeyRef: {name: conf, key: 'a|b'}}\n"
    )
    run = compile_cli(tmp_path, text)
    assert run.status == 2
    first, second = run.errors
    assert ": env[0].valueFrom.secretKeyRef.name: not a Secret name: must be a lowercase RFC 1123" in first
    assert ": env[1].valueFrom.configMapKeyRef.key: not a Secret or ConfigMap key" in second


@pytest.mark.parametrize(
    "fragment",
    [
        'serviceAccountName: ""\n',  # unset: the namespace's default service account
        _c('ports: [{containerPort: 9090, name: ""}]\n'),  # an unnamed port
    ],
)
def test_an_empty_name_is_no_name(tmp_path: Path, fragment: str) -> None:
    """The API server takes an empty service account or port name as unset (kube-apiserver 1.37)."""
    run = compile_cli(tmp_path, _spec(fragment))
    assert run.status == 0, run.err


def test_an_annotation_key_is_checked_lower_cased(tmp_path: Path) -> None:
    """apimachinery's ValidateAnnotations checks the key lower-cased: EXAMPLE.COM/Owner is valid there."""
    run = compile_cli(tmp_path, BASE + "annotations: {EXAMPLE.COM/Owner: ml}\npod_template:\n  metadata:\n"
                      "    annotations: {Example.com/x: y}\n")  # fmt: skip
    assert run.status == 0, run.err
    assert run.job["metadata"]["annotations"]["EXAMPLE.COM/Owner"] == "ml"
    bad = compile_cli(tmp_path, BASE + "labels: {EXAMPLE.COM/Owner: ml}\n")
    assert bad.status == 2 and "not a valid label name" in bad.err


def test_run_refuses_a_manifest_the_api_server_would_reject(tmp_path: Path) -> None:
    job = compile_cli(tmp_path, BASE).job
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "always"
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    result = run_cli(manifest, "--dry-run")
    assert result.status == 2 and result.out == ""
    lines = manifest.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "imagePullPolicy: always")
    column = lines[line - 1].index("always") + 1
    assert result.err == (
        f"{manifest}:{line}:{column}: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"
        ".imagePullPolicy: must be one of Always, IfNotPresent or Never; did you mean Always? (given: always)\n"
    )


def test_a_trailing_newline_ends_no_env_name(tmp_path: Path) -> None:
    """Kubernetes' IsEnvVarName (a Go regexp, whose $ is the end of the text) refuses "A\\n"; so does the schema."""
    run = compile_cli(tmp_path, BASE + 'env: [{name: "A\\n", value: x}]\n')
    assert run.status == 2 and any(": env[0].name: not a valid environment variable name" in e for e in run.errors)
