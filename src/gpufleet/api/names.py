"""Kubernetes name formats: DNS labels (RFC 1123), DNS subdomains, label keys and values."""

import re

DNS_LABEL_MAX_CHARS = 63
DNS_SUBDOMAIN_MAX_CHARS = 253

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

DNS_LABEL_RULE = (
    "must be a DNS label (lowercase letters, digits and '-', "
    "starting and ending with a letter or digit)"
)
DNS_SUBDOMAIN_RULE = (
    "must be a DNS subdomain (lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit)"
)


def is_dns_label(value: str, max_chars: int = DNS_LABEL_MAX_CHARS) -> bool:
    return len(value) <= max_chars and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= DNS_SUBDOMAIN_MAX_CHARS and _DNS_SUBDOMAIN.fullmatch(value) is not None


LABEL_VALUE_MAX_CHARS = 63
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

QUALIFIED_NAME_RULE = (
    "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 "
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)
LABEL_VALUE_RULE = (
    "must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit"
)


def is_qualified_name(value: str) -> bool:
    """A label or annotation key as Kubernetes validates it (`example.com/name`)."""
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= DNS_LABEL_MAX_CHARS and _QUALIFIED_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return value == "" or (
        len(value) <= LABEL_VALUE_MAX_CHARS and _QUALIFIED_NAME.fullmatch(value) is not None
    )
