"""Names and constants of Kueue's provisioning admission check: ProvisioningRequest and PodTemplate names,
``limitObjectName``, and reading the attempt number back out of a ProvisioningRequest name.

Reproduced (Kueue ``pkg/controller/admissionchecks/provisioning``): a request is named
``<workload>-<check>-<attempt>`` (attempts count from 1), its PodTemplates ``ppt-<request>-<podSet>``; a name
longer than 247 characters is cut to 247 and suffixed with ``-`` and the first 5 hex digits of the SHA-1 of the
whole name (253 characters at most). A request name is matched to its Workload and check with
``^<prefix>([0-9]+)$``; a name without that suffix counts as attempt 1.

Choice made here: the attempt number is appended *after* the ``<workload>-<check>-`` prefix has been limited
(the fix Kueue merged after v0.19.2, PR #14916) rather than hashing the whole name. With the v0.19.2 rule a long
name's hash covers the attempt while the matcher hashes only the prefix, so the request never matches and is
deleted and re-created forever (kueue#12542); that loop is not worth emulating. Short names are identical under
both rules. The fix reserves room for any int32 attempt (10 digits); how exactly it shortens the prefix is not
in the stored sources, so here the prefix is limited to 243 characters the same way ``limitObjectName`` limits
a name (cut, ``-``, 5 hash digits) and keeps its trailing ``-``.
"""

from __future__ import annotations

import hashlib
import re

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
CONFIG_KIND = "ProvisioningRequestConfig"
KUEUE_GROUP = "kueue.x-k8s.io"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
#: Workload annotations with this prefix become ProvisioningRequest parameters (prefix stripped).
PARAMETER_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
CHECK_INACTIVE = "the check is not active"
NOT_NEEDED = "the provisioning request is not needed"

MAX_NAME = 253
_HASH_DIGITS = 5
#: Longest name kept as is; longer ones are cut here and get ``-<hash>``.
MAX_UNHASHED = MAX_NAME - 1 - _HASH_DIGITS
#: Digits of the largest int32, the most an attempt number can take.
_ATTEMPT_DIGITS = 10
_TEMPLATE_PREFIX = "ppt"


def limit_object_name(full: str, limit: int = MAX_NAME) -> str:
    """``full`` if it fits in ``limit - 6`` characters, else its first ``limit - 6`` characters, ``-`` and the
    first 5 hex digits of its SHA-1 (``limit`` characters in all)."""
    keep = limit - 1 - _HASH_DIGITS
    if len(full) <= keep:
        return full
    digest = hashlib.sha1(full.encode()).hexdigest()[:_HASH_DIGITS]
    return f"{full[:keep]}-{digest}"


def request_name_prefix(workload: str, check: str) -> str:
    """``<workload>-<check>-``, limited so that any attempt number still fits in a 253-character name."""
    full = f"{workload}-{check}-"
    room = MAX_NAME - _ATTEMPT_DIGITS
    if len(full) <= room:
        return full
    # Limit the prefix without its dash, then put the dash back, so the attempt stays visibly separate.
    return limit_object_name(full[:-1], room - 1) + "-"


def request_name(workload: str, check: str, attempt: int) -> str:
    """The ProvisioningRequest name of ``attempt`` (1, 2, ...) of ``check`` for ``workload``."""
    return f"{request_name_prefix(workload, check)}{attempt}"


def template_name(request: str, pod_set: str) -> str:
    """The PodTemplate name of ``pod_set`` in ProvisioningRequest ``request``."""
    return limit_object_name(f"{_TEMPLATE_PREFIX}-{request}-{pod_set}")


def _attempt_match(name: str, workload: str, check: str) -> re.Match[str] | None:
    return re.fullmatch(re.escape(request_name_prefix(workload, check)) + "([0-9]+)", name)


def matches(name: str, workload: str, check: str) -> bool:
    """Whether ``name`` is a ProvisioningRequest of ``check`` for ``workload`` (any attempt)."""
    return _attempt_match(name, workload, check) is not None


def attempt_of(name: str, workload: str, check: str) -> int:
    """The attempt number in ``name``; 1 when the name has no attempt suffix for this workload and check."""
    found = _attempt_match(name, workload, check)
    return int(found.group(1)) if found else 1
