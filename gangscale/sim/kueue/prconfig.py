"""Reading a ProvisioningRequestConfig the way Kueue's provisioning admission check does: resolving an
AdmissionCheck's ``spec.parameters``, the retry strategy, the request parameters, and whether an existing
ProvisioningRequest still matches its config.

Reproduced (Kueue ``pkg/util/admissioncheck`` ``ConfigHelper``; ``provisioning.go``): a reference is valid when
it is set, names an object, and has group ``kueue.x-k8s.io`` and kind ``ProvisioningRequestConfig``; the error
texts are Kueue's (``missing parameters reference``; ``empty name: bad parameters reference``;
``wrong group "<g>", expecting "kueue.x-k8s.io": bad parameters reference``; the same for ``kind``; and the API
server's ``provisioningrequestconfigs.kueue.x-k8s.io "<name>" not found``). ``retryStrategy`` fields default to
the CRD's 3 / 60 s / 1800 s (the embedded API server does not apply CRD defaults). Parameters are the config's,
overlaid with every ``provreq.kueue.x-k8s.io/<key>`` Workload annotation, prefix stripped; a request is in sync
with its config when the class matches and every config parameter is present with the same value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.sim.kueue.checkstate import RetryStrategy
from gangscale.sim.kueue.prnames import CONFIG_KIND, KUEUE_GROUP, PARAMETER_ANNOTATION_PREFIX

JSON = dict[str, Any]


@dataclass(frozen=True)
class ConfigLookup:
    """The config an AdmissionCheck points at, or why there is none. ``missing`` is True only when the reference
    is valid and the object does not exist: Kueue then treats the check as inactive; any other error stops
    its reconcile of the Workload."""

    config: JSON | None
    error: str = ""
    missing: bool = False


def config_from_ref(ref: Mapping[str, Any] | None, configs: Mapping[str, JSON]) -> ConfigLookup:
    if not ref:
        return ConfigLookup(None, "missing parameters reference")
    name = ref.get("name") or ""
    if not name:
        return ConfigLookup(None, "empty name: bad parameters reference")
    group = ref.get("apiGroup") or ""
    if group != KUEUE_GROUP:
        return ConfigLookup(None, f'wrong group "{group}", expecting "{KUEUE_GROUP}": bad parameters reference')
    kind = ref.get("kind") or ""
    if kind != CONFIG_KIND:
        return ConfigLookup(None, f'wrong kind "{kind}", expecting "{CONFIG_KIND}": bad parameters reference')
    config = configs.get(name)
    if config is None:
        return ConfigLookup(None, f'provisioningrequestconfigs.kueue.x-k8s.io "{name}" not found', missing=True)
    return ConfigLookup(config)


def config_spec(config: Mapping[str, Any] | None) -> JSON:
    return dict((config or {}).get("spec") or {})


def retry_strategy(prc_spec: Mapping[str, Any]) -> RetryStrategy:
    raw = prc_spec.get("retryStrategy") or {}
    default = RetryStrategy()
    return RetryStrategy(
        backoff_limit_count=int(raw.get("backoffLimitCount", default.backoff_limit_count)),
        backoff_base_seconds=int(raw.get("backoffBaseSeconds", default.backoff_base_seconds)),
        backoff_max_seconds=int(raw.get("backoffMaxSeconds", default.backoff_max_seconds)),
    )


def request_parameters(prc_spec: Mapping[str, Any], workload: Mapping[str, Any]) -> dict[str, str]:
    """The config's parameters, then the Workload's ``provreq.kueue.x-k8s.io/`` annotations (they win)."""
    params = {str(k): str(v) for k, v in (prc_spec.get("parameters") or {}).items()}
    for key, value in ((workload.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(PARAMETER_ANNOTATION_PREFIX):
            params[key[len(PARAMETER_ANNOTATION_PREFIX):]] = str(value)
    return params


def synced_with_config(request: Mapping[str, Any], prc_spec: Mapping[str, Any]) -> bool:
    """Same class, and every config parameter present with the same value (podSets and parameters that came
    from annotations are not compared)."""
    spec = request.get("spec") or {}
    if spec.get("provisioningClassName") != prc_spec.get("provisioningClassName"):
        return False
    have = spec.get("parameters") or {}
    return all(k in have and str(have[k]) == str(v) for k, v in (prc_spec.get("parameters") or {}).items())
