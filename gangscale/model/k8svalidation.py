"""Kubernetes' name and label syntax checks, with the real API server's messages.

Pure functions, each returning the list of problems (empty when the value is valid), as
``k8s.io/apimachinery/pkg/util/validation/validation.go`` (Kubernetes 1.36) does:

- :func:`is_qualified_name` — ``IsQualifiedName`` (label keys, annotation keys, finalizers, taint keys):
  an optional DNS-1123 subdomain prefix (<= 253 characters) and ``/``, then a name of at most 63
  characters matching ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``. ``api/validate/content``'s
  ``IsLabelKey`` gives the same answers; a key with two ``/`` reads ``a valid label key must consist of
  ...`` (releases before ``content`` said ``a qualified name``);
- :func:`is_label_value` — ``IsValidLabelValue``: empty, or at most 63 characters of the same pattern;
- :func:`is_dns1123_subdomain` / :func:`is_dns1123_label` — ``IsDNS1123Subdomain`` / ``IsDNS1123Label``
  (``must not contain dots`` for a label that would be a valid subdomain comes from current upstream
  source; the release that introduced it was not verified);
- :func:`is_dns1035_label` — ``IsDNS1035Label``: ``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters
  (RFC 1035; also the shape Compute Engine gives resource names).

The texts are upstream's ``RegexError``/``MaxLenError`` ones, double space included
(``(e.g. 'MyName',  or 'my.name', ...``). The embedded API server (``gangscale.sim.apiserver``) answers
with them; the pool file (:mod:`gangscale.config`) checks node labels and taints with them before the
API server would refuse the nodes.
"""

from __future__ import annotations

import re

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                      "and must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                          "characters, '-' or '.', and must start and end with an alphanumeric character")
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character")

_QNAME_RE = re.compile(_QNAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_RE = re.compile(_DNS1035_FMT)

#: ``LabelValueMaxLength``, ``DNS1123LabelMaxLength``, ``DNS1035LabelMaxLength`` and the name part of a
#: qualified name (``qualifiedNameMaxLength``): all 63.
LABEL_MAX_LENGTH = 63
#: ``DNS1123SubdomainMaxLength``.
SUBDOMAIN_MAX_LENGTH = 253


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``: the message, the examples, the regex."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(n: int) -> str:
    """``MaxLenError``."""
    return f"must be no more than {n} characters"


def is_qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys, finalizer names and taint keys: ``[prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return ["a valid label key " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(parts[0]))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > LABEL_MAX_LENGTH:
        errs.append("name part " + max_len_error(LABEL_MAX_LENGTH))
    if not _QNAME_RE.fullmatch(name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value: str) -> list[str]:
    """Label values and taint values: empty, or a qualified name's name part."""
    errs = [max_len_error(LABEL_MAX_LENGTH)] if len(value) > LABEL_MAX_LENGTH else []
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(SUBDOMAIN_MAX_LENGTH)] if len(value) > SUBDOMAIN_MAX_LENGTH else []
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX_LENGTH)] if len(value) > LABEL_MAX_LENGTH else []
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX_LENGTH)] if len(value) > LABEL_MAX_LENGTH else []
    if not _DNS1035_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errs
