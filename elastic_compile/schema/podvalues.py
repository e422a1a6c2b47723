"""What the API server checks in a PodSpec beyond its schema: the values.

The compact schema (:mod:`elastic_compile.schema.podspec`) checks field names and types. The
API server also checks values, in Kubernetes' own validation (``pkg/apis/core/validation``,
1.33): closed sets (``imagePullPolicy``, ``dnsPolicy``, toleration operators and effects,
protocols, ...), one handler per probe, the downward API's allow-lists, file modes, resources
that cannot be overcommitted. A PyTorchJob passes its CRD with any of these wrong, and then
the operator's pod creation fails on every attempt: the job hangs with no pod and one event.
So we check them where the user wrote them, with the values that would be accepted.

Each rule is keyed by the schema definition it applies to; the podspec walk calls
:func:`check` for every object it visits, with that object's definition and location.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from elastic_compile.core import names
from elastic_compile.core.loader import dotted
from elastic_compile.core.merge import PATCH
from elastic_compile.core.quantity import is_quantity, parse_quantity, quantity_value
from elastic_compile.core.resources import (
    HUGEPAGES_PREFIX,
    MAX_DEVICE_UNITS,
    is_hugepages,
    is_native,
    overcommit_allowed,
    whole_units,
)

Loc = tuple[str | int, ...]
Problems = list[tuple[Loc, str]]

_INT32_MAX: Final = 2**31 - 1
_MODE_MAX: Final = 0o777
#: apimachinery IsEnvVarName: the API server refuses any other env name (\Z: no trailing newline).
ENV_NAME: Final = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
_SUBSCRIPT = re.compile(r"^(metadata\.(?:labels|annotations))\['(.*)'\]\Z")

# --------------------------------------------------------------------------- closed sets

#: (definition, field) -> the values the API server accepts. "" means "may be empty".
ENUMS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "Container": {
        "imagePullPolicy": ("Always", "IfNotPresent", "Never"),
        "terminationMessagePolicy": ("File", "FallbackToLogsOnError"),
    },
    "PodSpec": {
        "dnsPolicy": ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
        "preemptionPolicy": ("PreemptLowerPriority", "Never"),
    },
    # An empty operator means Equal; an empty effect matches every effect.
    "Toleration": {"operator": ("", "Equal", "Exists"), "effect": ("", "NoSchedule", "PreferNoSchedule", "NoExecute")},
    "ContainerPort": {"protocol": ("TCP", "UDP", "SCTP")},
    "HTTPGetAction": {"scheme": ("HTTP", "HTTPS")},
    "HostPathVolumeSource": {
        "type": ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
    },
    "VolumeMount": {
        "mountPropagation": ("None", "HostToContainer", "Bidirectional"),
        "recursiveReadOnly": ("Disabled", "IfPossible", "Enabled"),
    },
    "SeccompProfile": {"type": ("Localhost", "RuntimeDefault", "Unconfined")},
    "AppArmorProfile": {"type": ("Localhost", "RuntimeDefault", "Unconfined")},
    "SecurityContext": {"procMount": ("Default", "Unmasked")},
    "PodSecurityContext": {
        "fsGroupChangePolicy": ("OnRootMismatch", "Always"),
        "supplementalGroupsPolicy": ("Merge", "Strict"),
        "seLinuxChangePolicy": ("MountOption", "Recursive"),
    },
    "TopologySpreadConstraint": {
        "whenUnsatisfiable": ("DoNotSchedule", "ScheduleAnyway"),
        "nodeAffinityPolicy": ("Honor", "Ignore"),
        "nodeTaintsPolicy": ("Honor", "Ignore"),
    },
    "NodeSelectorRequirement": {"operator": ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")},
    "LabelSelectorRequirement": {"operator": ("In", "NotIn", "Exists", "DoesNotExist")},
    "ContainerResizePolicy": {"resourceName": ("cpu", "memory"), "restartPolicy": ("NotRequired", "RestartContainer")},
    "PodOS": {"name": ("linux", "windows")},
    "ObjectFieldSelector": {"apiVersion": ("v1",)},
    "PersistentVolumeClaimSpec": {"volumeMode": ("Block", "Filesystem")},
}

#: Downward API: what an env var may read (validEnvDownwardAPIFieldPathExpressions) ...
ENV_FIELD_PATHS: Final = (
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
    "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)  # fmt: skip
#: ... and what a downwardAPI volume file may (validVolumeDownwardAPIFieldPathExpressions).
VOLUME_FIELD_PATHS: Final = (
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "metadata.annotations",
    "metadata.uid",
)
#: resourceFieldRef.resource (validContainerResourceFieldPathExpressions, plus the hugepages prefixes).
RESOURCE_FIELDS: Final = (
    "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    "requests.cpu", "requests.memory", "requests.ephemeral-storage",
)  # fmt: skip
_RESOURCE_FIELD_PREFIXES: Final = ("limits." + HUGEPAGES_PREFIX, "requests." + HUGEPAGES_PREFIX)
_CPU_DIVISORS: Final = ("1m", "1")
_BYTE_DIVISORS: Final = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
_PROBE_HANDLERS: Final = ("exec", "httpGet", "tcpSocket", "grpc")
_LIFECYCLE_HANDLERS: Final = ("exec", "httpGet", "tcpSocket", "sleep")
_STANDARD_CONTAINER_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
#: Why a device count is refused (core/resources.whole_units).
DEVICE_UNITS: Final = f"an extended resource (a device) is counted in whole units, at most {MAX_DEVICE_UNITS:,}"


def one_of(values: Iterable[str]) -> str:
    """``A, B or C`` for a message."""
    shown = [v for v in values if v]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def _did_you_mean(given: str, allowed: Iterable[str]) -> str:
    options = [a for a in allowed if a]
    close = [o for o in options if o.lower() == given.strip().lower()]
    import difflib  # a misspelling's suggestion only

    close = close or difflib.get_close_matches(given, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def enum_problem(given: object, allowed: tuple[str, ...]) -> str | None:
    """Why ``given`` is not in a closed set, with the choices; None when it is (non-strings are the schema's)."""
    if not isinstance(given, str) or given in allowed:
        return None
    return f"must be one of {one_of(allowed)}" + _did_you_mean(given, allowed)


# --------------------------------------------------------------------------- the walk's hook


def check(definition: str, value: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """Add the value problems of one object of schema ``definition`` (a full name) at ``loc``."""
    short = definition.rsplit(".", 1)[-1]
    for field, allowed in ENUMS.get(short, {}).items():
        if field in value and (why := enum_problem(value[field], allowed)) is not None:
            problems.append(((*loc, field), why))
    rule = _RULES.get(short)
    if rule is not None:
        rule(value, loc, problems)


Rule = Callable[[Mapping[str, Any], Loc, Problems], None]


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _at_least(value: Mapping[str, Any], field: str, low: int, where: tuple[Loc, Problems]) -> None:
    loc, problems = where
    number = _int(value.get(field))
    if number is not None and number < low:
        problems.append(((*loc, field), f"must be at least {low}"))


def _in_range(value: Mapping[str, Any], field: str, bounds: tuple[int, int], where: tuple[Loc, Problems]) -> None:
    (low, high), (loc, problems) = bounds, where
    number = _int(value.get(field))
    if number is not None and not low <= number <= high:
        problems.append(((*loc, field), f"must be between {low} and {high}"))


# --------------------------------------------------------------------------- containers


def _container(c: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    name = c.get("name")
    if isinstance(name, str) and not (names.is_dns1123_label(name)):
        problems.append(((*loc, "name"), "a container name is a DNS-1123 label: at most 63 lower-case letters, "
                         "digits and '-', starting and ending with a letter or digit"))  # fmt: skip
    init = len(loc) >= 2 and loc[-2] == "initContainers"
    restart = c.get("restartPolicy")
    if init and restart is not None and (why := enum_problem(restart, ("Always",))) is not None:
        problems.append(((*loc, "restartPolicy"), why + " (Always makes the init container a native sidecar)"))
    elif not init and restart is not None:
        problems.append(
            (
                (*loc, "restartPolicy"),
                "may be set on init containers only; elastic-compile already makes every sidecar a native "
                "sidecar (initContainers with restartPolicy: Always): remove it",
            )
        )
    sidecar = init and restart == "Always"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe", "lifecycle"):
        if init and not sidecar and kind in c:
            problems.append(((*loc, kind), "may not be set on an init container without restartPolicy: Always "
                             "(it runs to completion before the pod starts)"))  # fmt: skip
        elif isinstance(c.get(kind), dict) and kind != "lifecycle":
            _probe(c[kind], kind, (*loc, kind), problems)
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict) and (sidecar or not init):
        for hook in ("postStart", "preStop"):
            if isinstance(lifecycle.get(hook), dict):
                _handler(lifecycle[hook], _LIFECYCLE_HANDLERS, (*loc, "lifecycle", hook), problems)
    ports = c.get("ports")
    seen: dict[str, int] = {}
    for index, port in enumerate(ports if isinstance(ports, list) else []):
        if isinstance(port, dict) and isinstance(port.get("name"), str):
            if port["name"] in seen:
                problems.append(
                    ((*loc, "ports", index, "name"), f"duplicate port name (also ports[{seen[port['name']]}])")
                )
            seen.setdefault(port["name"], index)


def _probe(probe: Mapping[str, Any], kind: str, loc: Loc, problems: Problems) -> None:
    _handler(probe, _PROBE_HANDLERS, loc, problems)
    for field in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        _at_least(probe, field, 0, (loc, problems))
    if kind in ("livenessProbe", "startupProbe") and _int(probe.get("successThreshold")) not in (None, 1):
        problems.append(((*loc, "successThreshold"), f"must be 1 for a {kind}"))
    if "terminationGracePeriodSeconds" in probe:
        if kind == "readinessProbe":
            problems.append(((*loc, "terminationGracePeriodSeconds"), "must not be set on a readinessProbe"))
        else:
            _at_least(probe, "terminationGracePeriodSeconds", 1, (loc, problems))


def _handler(handler: Mapping[str, Any], kinds: tuple[str, ...], loc: Loc, problems: Problems) -> None:
    given = [k for k in handler if k in kinds]  # as written: the second one is the extra
    if not given:
        problems.append((loc, f"needs exactly one handler: {one_of(kinds)}"))
    for extra in given[1:]:
        problems.append(((*loc, extra), f"a second handler; give exactly one of {one_of(kinds)} ({given[0]} is set)"))
    exec_ = handler.get("exec")
    if isinstance(exec_, dict) and not exec_.get("command"):
        problems.append(((*loc, "exec"), "needs a command"))
    for kind in ("httpGet", "tcpSocket"):
        action = handler.get(kind)
        if isinstance(action, dict):
            if "port" not in action:
                problems.append(((*loc, kind), "needs a port (a number 1-65535 or a container port's name)"))
            else:
                _port_or_name(action["port"], (*loc, kind, "port"), problems)
    grpc = handler.get("grpc")
    if isinstance(grpc, dict):
        _in_range(grpc, "port", (1, 65535), ((*loc, "grpc"), problems))
    sleep = handler.get("sleep")
    if isinstance(sleep, dict):
        _at_least(sleep, "seconds", 1, ((*loc, "sleep"), problems))


def _port_or_name(port: object, loc: Loc, problems: Problems) -> None:
    number = _int(port)
    if number is not None:
        if not 1 <= number <= 65535:
            problems.append((loc, "must be a port number between 1 and 65535, or a container port's name"))
    elif isinstance(port, str) and (why := port_name_problem(port)) is not None:
        problems.append((loc, why))


def port_name_problem(name: str) -> str | None:
    """Why ``name`` is not a port name (IANA_SVC_NAME), or None."""
    if names.is_port_name(name):
        return None
    return "a port name is at most 15 lower-case letters, digits and '-', with at least one letter and no '--'"


def _container_port(port: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    if "containerPort" not in port:
        problems.append((loc, "needs a containerPort"))
    _in_range(port, "containerPort", (1, 65535), (loc, problems))
    _in_range(port, "hostPort", (1, 65535), (loc, problems))
    # An empty name is no name (the API server takes it as unnamed).
    if isinstance(port.get("name"), str) and port["name"] and (why := port_name_problem(port["name"])) is not None:
        problems.append(((*loc, "name"), why))


def _security_context(sc: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    for field in ("runAsUser", "runAsGroup"):
        _in_range(sc, field, (0, _INT32_MAX), (loc, problems))
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            problems.append(((*loc, "allowPrivilegeEscalation"), "cannot be false while privileged is true"))
        added = (sc.get("capabilities") or {}).get("add") if isinstance(sc.get("capabilities"), dict) else None
        if isinstance(added, list) and any(str(a).upper() in ("SYS_ADMIN", "CAP_SYS_ADMIN") for a in added):
            problems.append(
                ((*loc, "allowPrivilegeEscalation"), "cannot be false while capabilities.add has SYS_ADMIN")
            )


def _pod_security_context(sc: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    for field in ("runAsUser", "runAsGroup", "fsGroup"):
        _in_range(sc, field, (0, _INT32_MAX), (loc, problems))


def _profile(profile: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """Seccomp and AppArmor: a localhostProfile exactly when the type is Localhost."""
    if profile.get("type") == "Localhost" and not profile.get("localhostProfile"):
        problems.append(((*loc, "localhostProfile"), "required when type is Localhost"))
    elif profile.get("type") != "Localhost" and "localhostProfile" in profile:
        problems.append(((*loc, "localhostProfile"), "may be set only when type is Localhost"))


# --------------------------------------------------------------------------- resources


def _resources(res: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """ValidateContainerResourceRequirements: names, and no overcommit of devices and hugepages."""
    sides = {s: res[s] for s in ("requests", "limits") if isinstance(res.get(s), dict)}
    amounts: dict[str, dict[str, Any]] = {side: {} for side in sides}
    for side, values in sides.items():
        found = amounts[side]
        for name, raw in values.items():
            why, native = _resource_name(str(name))
            if why is not None:
                problems.append(((*loc, side, name, "[key]"), why))
                continue
            amount = quantity_value(str(raw) if not isinstance(raw, bool) else "")
            if amount is None:
                continue  # the schema reports it
            found[name] = amount
            if not native and not whole_units(amount):
                problems.append(((*loc, side, name), DEVICE_UNITS))
    requests, limits = amounts.get("requests", {}), amounts.get("limits", {})
    for name, request in requests.items():
        limit = limits.get(name)
        what = "hugepages" if is_hugepages(name) else "a device (an extended resource)"
        if limit is None:
            if not overcommit_allowed(name):
                problems.append(((*loc, "requests", name), f"Kubernetes does not overcommit {what}: add limits.{name} "
                                 f"equal to the request ({sides['requests'][name]})"))  # fmt: skip
        elif not overcommit_allowed(name) and request != limit:
            problems.append(((*loc, "limits", name), f"Kubernetes does not overcommit {what}: the limit must equal "
                             f"the request ({sides['requests'][name]})"))  # fmt: skip
        elif request > limit:
            problems.append(((*loc, "requests", name), f"above the limit ({sides['limits'][name]})"))
    names = set(requests) | set(limits)
    hugepages = sorted(n for n in names if is_hugepages(n))
    if hugepages and not names & {"cpu", "memory"}:
        # Located at the first hugepages entry (as for the top-level resources), so the line shows its value.
        side = "requests" if hugepages[0] in requests else "limits"
        problems.append(((*loc, side, hugepages[0]), "hugepages need a cpu or memory request or limit beside them"))


def _resource_name(name: str) -> tuple[str | None, bool]:
    """``(why name is not a container resource or None, whether it is native)``."""
    why = resource_name_problem(name)
    return why, why is None and is_native(name)


def resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not a container resource name, or None."""
    if "/" not in name:
        if name in _STANDARD_CONTAINER_RESOURCES or (is_hugepages(name) and len(name) > len(HUGEPAGES_PREFIX)):
            return None
        return "not a container resource: use cpu, memory, ephemeral-storage, hugepages-<size> or vendor/device"
    if is_native(name):
        return "not a container resource: kubernetes.io names are Kubernetes' own"
    domain, _, device = name.partition("/")
    if names.is_dns1123_subdomain(domain) and names.QUALIFIED_NAME.match(device):
        return None
    return "not an extended resource name: a DNS subdomain, '/', and a name such as gpu"


# --------------------------------------------------------------------------- env and downward API


def _env_var_source(source: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    if len(source) > 1:  # else one source at most
        given = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if k in source]
        if len(given) > 1:
            problems.append((loc, f"give exactly one source ({', '.join(given)} are set)"))
    for kind in ("fieldRef", "resourceFieldRef"):
        ref = source.get(kind)
        if isinstance(ref, dict):
            problems += [((*loc, kind, *at), why) for at, why in ref_problems(ref, kind, volume=False)]


def ref_problems(ref: Mapping[str, Any], kind: str, *, volume: bool) -> Problems:
    """A downward-API ``fieldRef`` or ``resourceFieldRef`` of an env var (or, ``volume``, a volume file)."""
    found: Problems = []
    if kind == "fieldRef" and isinstance(ref.get("fieldPath"), str):
        why = field_path_problem(ref["fieldPath"], VOLUME_FIELD_PATHS if volume else ENV_FIELD_PATHS)
        if why is not None:
            found.append((("fieldPath",), why))
    elif kind == "resourceFieldRef":
        _resource_field(ref, (), found, volume=volume)
    return found


def _env_var(var: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    name = var.get("name")
    if isinstance(name, str) and not ENV_NAME.match(name):
        problems.append(((*loc, "name"), "not a valid environment variable name"))
    if var.get("value") and "valueFrom" in var:
        problems.append(((*loc, "valueFrom"), "may not be set together with a non-empty value"))


def field_path_problem(path: str, allowed: tuple[str, ...]) -> str | None:
    """Why the downward API cannot give ``path`` (env: ENV_FIELD_PATHS; volumes: VOLUME_FIELD_PATHS), or None."""
    if path in allowed:  # none of them is a subscript
        return None
    match = _SUBSCRIPT.match(path)
    if match:
        key = match.group(2)
        prefix, _, name = key.rpartition("/")
        short = len(name) <= names.QUALIFIED_NAME_MAX and len(prefix) <= names.DNS1123_SUBDOMAIN_MAX
        if short and names.QUALIFIED_NAME.match(name):
            return None
        return f"{match.group(1)}['...'] needs a label or annotation name ([prefix/]name)"
    if path in ("metadata.labels", "metadata.annotations"):
        return f"an env var reads one entry: {path}['KEY'] (the whole map is for downwardAPI volumes)"
    subscripts = "metadata.labels['KEY'], metadata.annotations['KEY']"
    return f"the downward API cannot give it; use one of {', '.join(allowed)}, {subscripts}" + _did_you_mean(
        path, allowed
    )


def _resource_field(ref: Mapping[str, Any], loc: Loc, problems: Problems, *, volume: bool) -> None:
    if volume and not ref.get("containerName"):
        problems.append((loc, "needs containerName in a volume (which container's resources to read)"))
    resource = ref.get("resource")
    known = resource in RESOURCE_FIELDS or str(resource).startswith(_RESOURCE_FIELD_PREFIXES)
    if isinstance(resource, str) and not known:
        choices = one_of([*RESOURCE_FIELDS, "limits.hugepages-<size>", "requests.hugepages-<size>"])
        problems.append(((*loc, "resource"), f"must be one of {choices}" + _did_you_mean(resource, RESOURCE_FIELDS)))
        return
    divisor = ref.get("divisor")
    if isinstance(resource, str) and divisor is not None and is_quantity(str(divisor)):
        allowed = _CPU_DIVISORS if resource.endswith(".cpu") else _BYTE_DIVISORS
        if not any(parse_quantity(str(divisor)) == parse_quantity(a) for a in allowed):
            problems.append(((*loc, "divisor"), f"for {resource}, one of {one_of(allowed)}"))


def _downward_file(item: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    given = [k for k in ("fieldRef", "resourceFieldRef") if k in item]
    if len(given) != 1:
        problems.append((loc, "give exactly one of fieldRef or resourceFieldRef"))
    for kind in ("fieldRef", "resourceFieldRef"):
        if isinstance(item.get(kind), dict):
            problems += [((*loc, kind, *at), why) for at, why in ref_problems(item[kind], kind, volume=True)]
    _mode(item, "mode", loc, problems)


# --------------------------------------------------------------------------- volumes


def _mode(value: Mapping[str, Any], field: str, loc: Loc, problems: Problems) -> None:
    number = _int(value.get(field))
    if number is not None and not 0 <= number <= _MODE_MAX:
        hint = f"; {number} is not one (did you mean 0o{number}?)" if re.fullmatch("[0-7]{3,4}", str(number)) else ""
        problems.append(((*loc, field), f"a file mode is between 0 and 0o777 (511){hint}"))


def _default_mode(value: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    _mode(value, "defaultMode", loc, problems)


def _key_to_path(value: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    _mode(value, "mode", loc, problems)


def _volume_mount(mount: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    # ValidateVolumeMounts (seen refused by kube-apiserver 1.37 in a PodTemplate).
    if mount.get("mountPath") == "":
        problems.append(((*loc, "mountPath"), "must not be empty: the directory in the container to mount at"))


def _volume(volume: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    name = volume.get("name")
    if isinstance(name, str) and not (names.is_dns1123_label(name)):
        problems.append(((*loc, "name"), "a volume name is a DNS-1123 label: at most 63 lower-case letters, digits "
                         "and '-', starting and ending with a letter or digit"))  # fmt: skip
    sources = [k for k in volume if k != "name"]
    if not sources:
        problems.append((loc, "needs a volume source, e.g. emptyDir: {}, persistentVolumeClaim or configMap"))
    for extra in sources[1:]:
        problems.append(((*loc, extra), f"a second volume source; a volume has exactly one ({sources[0]} is set)"))


# --------------------------------------------------------------------------- the pod and scheduling


def _items(value: Mapping[str, Any], field: str) -> list[Any]:
    """``value[field]`` when it is a list (anything else is the schema check's to report)."""
    items = value.get(field)
    return items if isinstance(items, list) else []


def _pod(pod: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    raw_dns = pod.get("dnsConfig")
    dns: Mapping[str, Any] = raw_dns if isinstance(raw_dns, dict) else {}
    if pod.get("dnsPolicy") == "None" and not dns.get("nameservers"):
        problems.append(((*loc, "dnsPolicy"), "None needs dnsConfig.nameservers (at least one)"))
    servers = dns.get("nameservers")
    if isinstance(servers, list):
        if len(servers) > 3:
            problems.append(((*loc, "dnsConfig", "nameservers"), "at most 3 nameservers"))
        for index, server in enumerate(servers):
            try:
                ipaddress.ip_address(str(server))
            except ValueError:
                problems.append(((*loc, "dnsConfig", "nameservers", index), "must be an IP address"))
    _in_range(pod, "activeDeadlineSeconds", (1, _INT32_MAX), (loc, problems))
    _pod_names(pod, loc, problems)
    seen: dict[str, Loc] = {}
    for field in ("containers", "initContainers"):
        for i, c in enumerate(_items(pod, field)):
            name = c.get("name") if isinstance(c, dict) else None
            if isinstance(name, str) and name in seen:
                where = dotted(seen[name])
                problems.append(((*loc, field, i, "name"), f"already the name of {where}; names are unique across "
                                 "containers and initContainers (sidecars become init containers)"))  # fmt: skip
            elif isinstance(name, str):
                seen[name] = (field, i)
    if pod.get("hostNetwork") is True:
        for field in ("containers", "initContainers"):
            for i, c in enumerate(_items(pod, field)):
                for j, port in enumerate(_items(c, "ports") if isinstance(c, dict) else []):
                    if isinstance(port, dict) and "hostPort" in port and port["hostPort"] != port.get("containerPort"):
                        problems.append(((*loc, field, i, "ports", j, "hostPort"),
                                         "must equal containerPort when hostNetwork is true"))  # fmt: skip


def name_problem(name: object) -> str | None:
    """Why ``name`` is no object name of the kinds a pod names (service account, Secret, ConfigMap)."""
    if not isinstance(name, str):
        return None
    if not names.is_dns1123_subdomain(name):
        return (
            "must be a lowercase RFC 1123 subdomain: lower case letters, digits, '-' and '.', starting and "
            f"ending with a letter or digit, at most {names.DNS1123_SUBDOMAIN_MAX} characters"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is no label value (apimachinery IsValidLabelValue): empty, or at most 63 characters."""
    if not isinstance(value, str) or value == "":
        return None
    if len(value) > names.LABEL_VALUE_MAX or not names.LABEL_VALUE.match(value):
        return (
            f"not a label value: at most {names.LABEL_VALUE_MAX} letters, digits, '-', '_' and '.', starting and "
            "ending with a letter or digit"
        )
    return None


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")


def config_key_problem(key: object) -> str | None:
    """Why ``key`` is no key of a Secret or ConfigMap (apimachinery IsConfigMapKey)."""
    if not isinstance(key, str):
        return None
    if (
        len(key) > names.DNS1123_SUBDOMAIN_MAX
        or key in (".", "..")
        or key.startswith("..")
        or not _CONFIG_KEY.match(key)
    ):
        return "not a Secret or ConfigMap key: letters, digits, '-', '_' and '.', not starting with '..'"
    return None


def qualified_name_problem(name: object) -> str | None:
    """Why ``name`` is no qualified name ([DNS subdomain/]name of at most 63), as label keys are."""
    if not isinstance(name, str):
        return None
    prefix, slash, short = name.rpartition("/")
    if (slash and not names.is_dns1123_subdomain(prefix)) or not (
        len(short) <= names.QUALIFIED_NAME_MAX and names.QUALIFIED_NAME.match(short)
    ):
        return "not a qualified name: [a DNS subdomain/]at most 63 letters, digits, '-', '_' and '.'"
    return None


def _key_selector(value: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """A secretKeyRef or configMapKeyRef: an object name and a key (the API server refuses the pod)."""
    for field, check in (("name", name_problem), ("key", config_key_problem)):
        why = check(value.get(field))
        if why is not None:
            problems.append(((*loc, field), why))


def _pod_names(pod: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    # ValidateServiceAccountName (pkg/apis/core/validation): seen refused by kube-apiserver 1.37
    # in a PodTemplate (tests/realcluster/test_server_fuzz.py).
    # An empty one is unset: the API server gives the pod the namespace's default service account.
    for field in ("serviceAccountName", "serviceAccount"):
        why = name_problem(pod.get(field) or None)
        if why is not None:
            problems.append(((*loc, field), why))
    # ValidateNodeSelector: label keys and values (seen refused by kube-apiserver 1.37 in a PodTemplate).
    selector = pod.get("nodeSelector")
    for key, value in selector.items() if isinstance(selector, dict) else ():
        if key == PATCH:  # a merge directive left by a refused extends: merge.py reports it, not as a label
            continue
        why = qualified_name_problem(key)
        if why is not None:
            problems.append(((*loc, "nodeSelector", key, "[key]"), "not a label key: " + why.partition(": ")[2]))
        why = label_value_problem(value)
        if why is not None:
            problems.append(((*loc, "nodeSelector", key), why))


def _label_selector(selector: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    labels = selector.get("matchLabels")
    for key, value in labels.items() if isinstance(labels, dict) else ():
        why = label_value_problem(value)
        if why is not None:
            problems.append(((*loc, "matchLabels", key), why))


def _toleration(t: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    if t.get("key") and (why := qualified_name_problem(t.get("key"))) is not None:
        problems.append(((*loc, "key"), why))  # a label key (seen refused by kube-apiserver 1.37)
    operator = t.get("operator", "")
    if not t.get("key") and operator != "Exists" and operator in ("", "Equal"):
        problems.append(((*loc, "operator"), "must be Exists when key is empty (that tolerates every taint)"))
    if operator == "Exists" and t.get("value"):
        problems.append(((*loc, "value"), "must be empty when operator is Exists"))
    if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
        problems.append(((*loc, "effect"), "must be NoExecute when tolerationSeconds is set"))


def _spread(c: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    _at_least(c, "maxSkew", 1, (loc, problems))
    if not c.get("topologyKey"):
        problems.append((loc, "needs a topologyKey, e.g. topology.kubernetes.io/zone"))
    if "whenUnsatisfiable" not in c:
        problems.append((loc, "needs whenUnsatisfiable: DoNotSchedule or ScheduleAnyway"))
    if "minDomains" in c:
        _at_least(c, "minDomains", 1, (loc, problems))
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            problems.append(((*loc, "minDomains"), "may be set only with whenUnsatisfiable: DoNotSchedule"))


def _label_requirement(r: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """In/NotIn need values, Exists/DoesNotExist take none (label and node selectors alike)."""
    operator, values = r.get("operator"), r.get("values")
    count = len(values) if isinstance(values, list) else 0
    _requirement_values(r, loc, problems)
    if operator in ("In", "NotIn") and count == 0:
        problems.append((loc, f"operator {operator} needs values"))
    elif operator in ("Exists", "DoesNotExist") and count:
        problems.append(((*loc, "values"), f"must be empty with operator {operator}"))


def _requirement_values(r: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    values = r.get("values")
    if r.get("operator") in ("In", "NotIn") and isinstance(values, list):
        for i, value in enumerate(values):
            why = label_value_problem(value)
            if why is not None:
                problems.append(((*loc, "values", i), why))


def _node_requirement(r: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    """A label requirement, plus Gt and Lt with exactly one integer."""
    _label_requirement(r, loc, problems)
    operator, values = r.get("operator"), r.get("values")
    if operator in ("Gt", "Lt") and not (
        isinstance(values, list) and len(values) == 1 and re.fullmatch(r"-?\d+", str(values[0]))
    ):
        problems.append(((*loc, "values"), f"operator {operator} needs exactly one value, an integer"))


def _weight(term: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    _in_range(term, "weight", (1, 100), (loc, problems))


def _node_selector(selector: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    if not selector.get("nodeSelectorTerms"):
        problems.append((loc, "needs at least one entry in nodeSelectorTerms"))


def _affinity_term(term: Mapping[str, Any], loc: Loc, problems: Problems) -> None:
    if not term.get("topologyKey"):
        problems.append((loc, "needs a topologyKey, e.g. kubernetes.io/hostname"))


_RULES: Final[dict[str, Rule]] = {
    "Container": _container,
    "ContainerPort": _container_port,
    "SecurityContext": _security_context,
    "PodSecurityContext": _pod_security_context,
    "SeccompProfile": _profile,
    "AppArmorProfile": _profile,
    "ResourceRequirements": _resources,
    "EnvVar": _env_var,
    "EnvVarSource": _env_var_source,
    "DownwardAPIVolumeFile": _downward_file,
    "SecretVolumeSource": _default_mode,
    "ConfigMapVolumeSource": _default_mode,
    "DownwardAPIVolumeSource": _default_mode,
    "ProjectedVolumeSource": _default_mode,
    "KeyToPath": _key_to_path,
    "Volume": _volume,
    "VolumeMount": _volume_mount,
    "PodSpec": _pod,
    "SecretKeySelector": _key_selector,
    "ConfigMapKeySelector": _key_selector,
    "LabelSelector": _label_selector,
    "Toleration": _toleration,
    "TopologySpreadConstraint": _spread,
    "NodeSelectorRequirement": _node_requirement,
    "LabelSelectorRequirement": _label_requirement,
    "PreferredSchedulingTerm": _weight,
    "WeightedPodAffinityTerm": _weight,
    "NodeSelector": _node_selector,
    "PodAffinityTerm": _affinity_term,
}
