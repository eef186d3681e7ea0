"""Kubernetes name formats: DNS labels (RFC 1123) and DNS subdomains."""

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
