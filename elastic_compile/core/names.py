"""Kubernetes names and labels: apimachinery's validation rules, written once.

The schema (the spec's names, labels, container and volume names), the targets' checks,
``doctor`` and ``import`` all match against these, so the rules cannot drift apart.

Every pattern ends with ``\\Z``, never ``$``: Python's ``$`` also matches before a final
newline, so ``"llama\\n"`` would pass as a DNS label (Go's ``$`` is the end of the text).
The patterns say nothing of length; each rule's limit is the constant beside it.
"""

from __future__ import annotations

import re
from typing import Final

# The building blocks, for rules composed of them (an extended resource name, a manager).
_LABEL_TEXT: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: A DNS-1123 subdomain as regular-expression text, without anchors.
DNS1123_SUBDOMAIN_TEXT: Final = rf"{_LABEL_TEXT}(\.{_LABEL_TEXT})*"
#: A qualified name's name part as regular-expression text, without anchors.
QUALIFIED_NAME_TEXT: Final = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

#: IsDNS1035Label: a job's name (the PyTorchJob webhook, the TrainJob CEL rule), a Service's.
DNS1035_LABEL: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS1035_LABEL_MAX: Final = 63
#: IsDNS1123Label: a namespace, a container, a volume.
DNS1123_LABEL: Final = re.compile(rf"^{_LABEL_TEXT}\Z")
DNS1123_LABEL_MAX: Final = 63
#: IsDNS1123Subdomain: most object names, a label key's prefix, an extended resource's domain.
DNS1123_SUBDOMAIN: Final = re.compile(rf"^{DNS1123_SUBDOMAIN_TEXT}\Z")
DNS1123_SUBDOMAIN_MAX: Final = 253
#: IsQualifiedName's name part: a label or annotation key after its prefix, a resource's name.
QUALIFIED_NAME: Final = re.compile(rf"^{QUALIFIED_NAME_TEXT}\Z")
QUALIFIED_NAME_MAX: Final = 63
#: IsValidLabelValue: empty, or a qualified name's characters.
LABEL_VALUE: Final = re.compile(rf"^({QUALIFIED_NAME_TEXT})?\Z")
LABEL_VALUE_MAX: Final = 63
#: IsValidPortName (IANA_SVC_NAME): a DNS-1123 label of at most 15, with a letter and no "--".
PORT_NAME_MAX: Final = 15
#: A Kueue queue or priority class: an object name that also goes in a label value, so both
#: rules at once (lower case, digits, '-' and '.', at most 63).
KUEUE_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?\Z")
KUEUE_NAME_MAX: Final = 63


def is_dns1035_label(text: str) -> bool:
    """Whether ``text`` is a DNS-1035 label of at most 63 characters."""
    return len(text) <= DNS1035_LABEL_MAX and DNS1035_LABEL.match(text) is not None


def is_dns1123_label(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 label of at most 63 characters."""
    return len(text) <= DNS1123_LABEL_MAX and DNS1123_LABEL.match(text) is not None


def is_dns1123_subdomain(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 subdomain of at most 253 characters."""
    return len(text) <= DNS1123_SUBDOMAIN_MAX and DNS1123_SUBDOMAIN.match(text) is not None


def is_port_name(text: str) -> bool:
    """Whether ``text`` is a valid container port name (IANA_SVC_NAME)."""
    return (
        len(text) <= PORT_NAME_MAX
        and DNS1123_LABEL.match(text) is not None
        and "--" not in text
        and re.search("[a-z]", text) is not None
    )
