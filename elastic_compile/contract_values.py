"""The values both the compiler and ``elastic-launch`` accept: one set of checks for both sides.

A spec value the schema accepts travels to the pod (as an ``elastic-launch`` option or
through the operator's ``PET_*`` variables) and must be accepted there too, or every pod
exits 2 after the job was admitted. So the schema (:mod:`elastic_compile.schema.models`)
and the launcher (:mod:`elastic_compile.entrypoint.settings`) call the functions below,
and nothing else, for run ids, rendezvous hosts, rendezvous configuration keys, ports and
durations. The bounds are what torch 2.13 really accepts, narrowed where torch accepts a
value that cannot work (each narrowing says why).

Each check takes a value and returns it normalized, or raises :class:`ValueError` with a
message that names no field: the caller adds the place (the schema a ``file:line:col``
and field path, the launcher the option or variable name).

Standard library only, like :mod:`elastic_compile.contract`: the launcher imports it in
training images that may lack pydantic.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from typing import Final

# --------------------------------------------------------------------------- durations

#: A whole-second timeout above this is a typo (minutes written as seconds) rather than
#: a wish; torch has no bound of its own.
MAX_TIMEOUT_SECONDS: Final = 7 * 24 * 3600
#: The agent's poll period: below 10 ms it spins on the store, above an hour a failed
#: worker goes unnoticed for that long.
MIN_INTERVAL_SECONDS: Final = 0.01
MAX_INTERVAL_SECONDS: Final = 3600.0

DURATION_HINT: Final = "expected seconds (e.g. 900) or a duration such as 15m or 1h30m"
# Digit counts are capped so that no value overflows a float before the range check.
# ASCII digits only: Python's \d and float() also take other scripts' digits (U+09EA, Bengali four).
_DURATION: Final = re.compile(
    r"^(?:(?P<h>[0-9]{1,9})h)?(?:(?P<m>[0-9]{1,9})m)?(?:(?P<s>[0-9]{1,12}(?:\.[0-9]{1,9})?)s)?$"
)
# Plain seconds as the compiler writes them (str(int) or repr(float) of a value within
# the bounds above: at most 17 significant digits, never an exponent).
_SECONDS: Final = re.compile(r"^[0-9]{1,12}(?:\.[0-9]{1,20})?$")


def parse_duration(text: str) -> float:
    """Seconds from ``"900"``, ``"2.5"``, ``"15m"``, ``"1h30m"`` or ``"90s"``."""
    value = text.strip()
    if _SECONDS.match(value):
        seconds = float(value)
    elif value and (m := _DURATION.match(value)):
        seconds = int(m["h"] or 0) * 3600 + int(m["m"] or 0) * 60 + float(m["s"] or 0)
    else:
        raise ValueError(DURATION_HINT)
    return check_seconds(seconds)


def check_seconds(seconds: float) -> float:
    """A finite, non-negative number of seconds."""
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError("must be a finite number of seconds")
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds


def whole_seconds(seconds: float, minimum: int = 1) -> int:
    """A timeout in whole seconds, ``minimum`` to 7 days.

    Whole, because torch reads rendezvous timeouts with ``int()`` on the string
    (``RendezvousParameters.get_as_int``), which rejects ``"2.5"`` deep inside the agent;
    ``30.0`` means 30.
    """
    check_seconds(seconds)
    if seconds < minimum or not float(seconds).is_integer():
        raise ValueError(f"must be a whole number of seconds, at least {minimum}")
    if seconds > MAX_TIMEOUT_SECONDS:
        raise ValueError(f"must be at most 7 days ({MAX_TIMEOUT_SECONDS} s)")
    return int(seconds)


def interval_seconds(seconds: float) -> float:
    """The agent's monitor interval: 0.01 to 3600 seconds."""
    check_seconds(seconds)
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise ValueError(f"must be between {MIN_INTERVAL_SECONDS:g} and {MAX_INTERVAL_SECONDS:g} seconds")
    return float(seconds)


# --------------------------------------------------------------------------- ports

MIN_PORT: Final = 1
MAX_PORT: Final = 65535


def check_port(port: int, *, allow_zero: bool = False) -> int:
    """A TCP port. 0 (the OS picks) only where one process alone must know it (``allow_zero``)."""
    low = 0 if allow_zero else MIN_PORT
    if not low <= port <= MAX_PORT:
        raise ValueError(f"must be a port number, {low}-{MAX_PORT}")
    return port


def parse_port(text: str, *, allow_zero: bool = False) -> int:
    """A port written in decimal (an option, an env value)."""
    value = text.strip()
    if not re.fullmatch(r"[0-9]{1,5}", value):
        raise ValueError(f"must be a port number, {0 if allow_zero else MIN_PORT}-{MAX_PORT}")
    return check_port(int(value), allow_zero=allow_zero)


# --------------------------------------------------------------------------- run id

# torch makes each agent's log directory with mkdtemp(prefix=f"{run_id}_") (DefaultLogsSpecs
# ._make_log_dir): the run id is one path component followed by 9 characters, so it holds
# no '/' (``experiments/42`` fails with FileNotFoundError in every pod) and fits NAME_MAX
# (255) - 9. It is also the prefix of every store key and, for etcd, part of a key path.
# The character set keeps it a portable file name that prints as itself.
MAX_RUN_ID_LENGTH: Final = 246
_RUN_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
#: torchrun's default run id: every job that kept it would share one rendezvous.
RUN_ID_PLACEHOLDER: Final = "none"


def check_run_id(text: str) -> str:
    """A run id every node of one job shares."""
    if not _RUN_ID.match(text):
        hint = "; use '-' or '.' instead of '/'" if "/" in text else ""
        raise ValueError(
            f"expected letters, digits, '.', '_', ':' and '-', starting with a letter or digit{hint} "
            "(it becomes part of a directory name)"
        )
    if len(text) > MAX_RUN_ID_LENGTH:
        raise ValueError(f"must be at most {MAX_RUN_ID_LENGTH} characters (it becomes part of a directory name)")
    if text.lower() == RUN_ID_PLACEHOLDER:
        raise ValueError("'none' is torchrun's placeholder: every job that kept it would share one rendezvous")
    return text


# --------------------------------------------------------------------------- hosts

MAX_HOST_LENGTH: Final = 253  # a DNS name
# torch's own check is r"^[\w\.:-]+$" (parse_rendezvous_endpoint), where \w also matches
# non-ASCII letters that no resolver in a pod looks up. We take DNS-style labels (with '_',
# which torch and getaddrinfo accept) or an IP address.
_HOST_LABEL: Final = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME: Final = re.compile(rf"^{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?$")


def check_host(text: str) -> str:
    """A rendezvous host: a DNS name or an IPv4/IPv6 address (IPv6 bare or in brackets)."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is not None:
        if bare != text and address.version != 6:
            raise ValueError("only an IPv6 address goes in brackets")
        return text
    if bare == text and len(text) <= MAX_HOST_LENGTH and _HOSTNAME.match(text):
        return text
    raise ValueError("expected a host name (letters, digits, '-', '_', dot-separated) or an IP address")


def split_endpoint(text: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6addr]:port``, split as torch's ``parse_rendezvous_endpoint``.

    Returns the host (checked by :func:`check_host`, brackets removed) and the port
    (``default_port`` when the text has none; 0 is allowed here, the caller decides
    whether the OS may pick it).
    """
    value = text.strip()
    if not value:
        raise ValueError("empty endpoint")
    if value.startswith("[") and value.endswith("]"):
        host, port_text = value, None
    elif value.startswith("["):
        host, sep, port_text = value.rpartition(":")
        if not host.endswith("]"):
            raise ValueError("expected [ADDRESS]:PORT")
    else:
        host, sep, rest = value.rpartition(":")
        host, port_text = (host, rest) if sep else (rest, None)
    if not host:
        raise ValueError("expected HOST[:PORT]")
    check_host(host)
    port = default_port if port_text is None else parse_port(port_text, allow_zero=True)
    return host.removeprefix("[").removesuffix("]"), port


# --------------------------------------------------------------------------- rendezvous configuration

#: The timeouts c10d and etcd-v2 read (torch: torch/distributed/elastic/rendezvous/dynamic_rendezvous.py). The schema
#: gives each its own
#: field; the launcher also accepts them as rendezvous keys.
TIMEOUT_KEYS: Final = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout", "read_timeout")
#: Keys torch's documentation suggests but c10d never reads (measured): accepting them
#: would silently keep the default. Each maps to the key that works.
IGNORED_KEYS: Final[Mapping[str, str]] = {"timeout": "join_timeout", "heartbeat": "heartbeat_timeout"}

_BOOL: Final = "bool"
_COUNT: Final = "count"
_TEXT: Final = "text"
# What RendezvousParameters.get_as_bool accepts.
_TRUE: Final = frozenset({"1", "true", "t", "yes", "y"})
_FALSE: Final = frozenset({"0", "false", "f", "no", "n"})

# Every other key each backend reads, and how (torch 2.13: c10d_rendezvous_backend.py,
# dynamic_rendezvous.py create_handler, etcd_rendezvous_backend.py, etcd_rendezvous.py).
# A key no backend reads is a typo that torch would silently ignore.
_DYNAMIC_KEYS: Final[Mapping[str, str | tuple[str, ...]]] = {
    "keep_alive_interval": _COUNT,
    "keep_alive_max_attempt": _COUNT,
}
BACKEND_KEYS: Final[Mapping[str, Mapping[str, str | tuple[str, ...]]]] = {
    # store_type "file" takes the endpoint as a file path, which no pod shares: only tcp works.
    "c10d": {**_DYNAMIC_KEYS, "is_host": _BOOL, "store_type": ("tcp",)},
    "etcd-v2": {
        **_DYNAMIC_KEYS,
        "protocol": ("http", "https"),
        "ssl_cert": _TEXT,
        "ssl_cert_key": _TEXT,
        "ca_cert": _TEXT,
    },
    "etcd": {"protocol": ("http", "https"), "cert": _TEXT, "key": _TEXT, "cacert": _TEXT, "etcd_prefix": _TEXT},
}
_CONF_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_bool(text: str) -> bool:
    """The spellings torch's ``RendezvousParameters.get_as_bool`` accepts."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("expected true or false")


def check_conf_value_text(value: str) -> str:
    """What any rendezvous value must be to survive ``k=v,k=v`` (``PET_RDZV_CONF``, ``--rdzv-conf``)."""
    if not value:
        # torch's own parser refuses it too: "must have a value specified"
        raise ValueError("must not be empty")
    if "," in value:
        raise ValueError("must not contain ',' (it separates the keys in PET_RDZV_CONF)")
    if value != value.strip():
        raise ValueError("must not start or end with whitespace (torch strips it)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("must not contain control characters")
    return value


def check_conf_key(key: str, backend: str, *, timeouts: bool = True) -> None:
    """A key the backend reads; ``timeouts=False`` leaves the timeout keys out (the schema has fields for them)."""
    if key in IGNORED_KEYS:
        raise ValueError(f"torch's {backend} backend ignores {key!r}; use {IGNORED_KEYS[key]}")
    if not _CONF_KEY.match(key):
        raise ValueError("expected an identifier (letters, digits, '_')")
    keys = sorted({*BACKEND_KEYS.get(backend, {}), *(TIMEOUT_KEYS if timeouts else ())})
    if key in keys:
        return
    import difflib  # a misspelling's suggestion only

    close = difflib.get_close_matches(key, keys, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ValueError(f"not a key the {backend} backend reads; {hint}it reads {', '.join(keys)}")


def check_conf_entry(key: str, value: str, backend: str) -> object:
    """Check one rendezvous key and value for ``backend``; returns the value as torch reads it.

    Timeouts become whole seconds (``int``), ``is_host`` a ``bool``, counts an ``int``;
    anything else stays the string.
    """
    check_conf_key(key, backend)
    check_conf_value_text(value)
    if key in TIMEOUT_KEYS:
        return whole_seconds(parse_duration(value))
    kind = BACKEND_KEYS[backend].get(key, _TEXT)
    if kind == _BOOL:
        return parse_bool(value)
    if kind == _COUNT:
        if not re.fullmatch(r"[0-9]{1,9}", value) or int(value) < 1:
            raise ValueError("expected a whole number >= 1")
        return int(value)
    if isinstance(kind, tuple):
        if value.lower() not in kind:
            raise ValueError(f"expected {' or '.join(kind)}")
        return value.lower()
    return value
