"""The node-pool file's schema, as strict pydantic models (see :mod:`gangscale.config` for what it means).

Every model forbids unknown keys, so a typo such as ``maxUnit`` is an error rather than a silently ignored
field. Validation is strict: YAML's ``yes``/``1``/``1.0`` are not quietly turned into strings or ints, and a
label value must be a string, as Kubernetes demands.

What ends up on a Node is checked here as the API server checks it, because a value it refuses would make every
scale-up fail with a 422 when the provider creates the pool's Nodes (``gangscale.model.k8svalidation`` holds the
checks and cites them): label keys are qualified names and label values label values
(``k8s.io/apimachinery/pkg/util/validation/validation.go`` ``IsQualifiedName``, ``IsValidLabelValue``, which
``k8s.io/apimachinery/pkg/apis/meta/v1/validation`` ``ValidateLabels`` applies to every object's labels);
taint keys are qualified names, taint values label values and effects one of three
(``pkg/apis/core/validation/validation.go`` ``validateNodeTaints``; its unique-by-key-and-effect rule is
checked by :mod:`gangscale.config`). Machine types and zones become label values of the pool's Nodes
(``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone``) and are checked as such, whatever the
cloud: a GCE name (an RFC 1035 label), an EC2 instance type (``p5.48xlarge``) and every zone name pass. A cloud's
own, stricter naming is its provider's to check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gangscale.model.k8svalidation import is_dns1123_label, is_label_value, is_qualified_name
from gangscale.model.scheduling import TAINT_EFFECTS

#: Upper bound on ``maxUnits``: a guard against a stray digit, not a statement about any cloud's capacity.
MAX_UNITS_LIMIT = 100_000
DEFAULT_PROVISION_SECONDS = 60.0


def _syntax(check: Callable[[str], list[str]], what: str, empty_ok: bool = False) -> AfterValidator:
    """A string checked by one of :mod:`gangscale.model.k8svalidation`'s functions: one error naming the value,
    with every upstream message (joined by ``; ``, as ``validateNodeTaints`` joins a value's). The value is
    shown as a Python literal, so that a stray newline or quote stays on the error's one line."""
    def validate(value: str) -> str:
        problems = [] if empty_ok and not value else check(value)
        if problems:
            # One placeholder: the value is the user's text and must not be read as a template.
            raise PydanticCustomError("k8s_syntax", "{message}",
                                      {"message": f"{what}: {'; '.join(problems)}; got {value!r}"})
        return value
    return AfterValidator(validate)


_REFUSED = "the API server would refuse the pool's nodes"
#: A node label key or taint key (``IsQualifiedName``).
LabelKey = Annotated[str, _syntax(is_qualified_name, f"not a valid label key ({_REFUSED})")]
#: A node label value or taint value (``IsValidLabelValue``).
LabelValue = Annotated[str, _syntax(is_label_value, f"not a valid label value ({_REFUSED})")]
#: A machine type or zone: a label value of the pool's Nodes (``IsValidLabelValue``), or unset.
NodeLabelValue = Annotated[str, _syntax(is_label_value, f"not a valid label value ({_REFUSED})", empty_ok=True)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)


class TaintSpec(_Strict):
    key: Annotated[str, Field(min_length=1), _syntax(is_qualified_name, f"not a valid taint key ({_REFUSED})")]
    value: Annotated[str, _syntax(is_label_value, f"not a valid taint value ({_REFUSED})")] = ""
    effect: str

    @field_validator("effect")
    @classmethod
    def _known_effect(cls, effect: str) -> str:
        if effect not in TAINT_EFFECTS:
            raise PydanticCustomError("taint_effect", "must be one of {effects}; got '{effect}'",
                                      {"effects": ", ".join(TAINT_EFFECTS), "effect": effect})
        return effect


class ReclaimSpec(_Strict):
    """``simulated.reclaim``: the simulated cloud reclaims this spot pool's VMs (``gangscale.providers.simnodes``
    ``Reclaims``). Every Ready node is reclaimed at ``perNodeHour`` (a Poisson process per node on the provider's
    clock, drawn from ``seed``); a reclaimed node turns NotReady at the notice and is deleted ``noticeSeconds``
    later (GKE's Spot VM notice: 30 s). Only on a pool of ``capacityType: spot`` (checked by
    :mod:`gangscale.config`)."""

    per_node_hour: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    notice_seconds: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    seed: int = 0


class SimulatedSpec(_Strict):
    """The simulated provider's knobs. ``stock`` is units it can still hand out (None: unlimited).

    The fault knobs make a real ``gangscale run`` process's cloud misbehave (``hack/chaos.py`` uses them); they
    start the pool's :class:`~gangscale.providers.simfaults.PoolFaults` and, like those, counters count down from
    the process start: ``partialGrant`` is one-shot, ``lostResponses`` and ``transientErrors`` are the next N calls.
    ``reclaim`` (spot pools) runs for the whole life of the process.
    """

    stock: int | None = Field(default=None, ge=0)
    provision_seconds: float = Field(default=DEFAULT_PROVISION_SECONDS, ge=0)
    #: Every new obtain fails with STOCKOUT.
    stockout: bool = False
    #: Every new obtain fails with QUOTA_EXCEEDED.
    quota: bool = False
    #: The first new obtain creates this many units, runs out of stock, deletes them and fails with STOCKOUT.
    partial_grant: int | None = Field(default=None, ge=0)
    #: Nodes created while the process runs with this never turn Ready (not after a restart either).
    never_ready: bool = False
    #: The first N obtains do their work and then fail with DEADLINE_EXCEEDED: the answer was lost.
    lost_responses: int = Field(default=0, ge=0)
    #: The first N obtain or release calls fail with UNAVAILABLE before doing anything.
    transient_errors: int = Field(default=0, ge=0)
    #: Seconds every obtain and release waits before it does anything.
    latency_seconds: float = Field(default=0.0, ge=0)
    #: Spot reclaims (spot pools only).
    reclaim: ReclaimSpec | None = None


#: How the ``gke`` provider grows a pool (see ``gangscale.providers.gke``): ``slice`` creates one GKE node pool per
#: unit (multi-host TPU slices: GKE makes a pool's slice whole or not at all); ``resize`` creates the units' named
#: VMs in an existing node pool's managed instance group (MIG) and deletes them all if not all run by the deadline;
#: ``flex-start`` asks a flex-start node pool's MIG for them with one resize request (Dynamic Workload Scheduler:
#: all at once or none, deleted at the end of the run duration); ``queued-provisioning`` asks GKE for them with a
#: ProvisioningRequest of class ``queued-provisioning.gke.io`` on a node pool with queued provisioning.
GKE_MODES = ("slice", "resize", "flex-start", "queued-provisioning")
#: Modes that take a run duration: the nodes are deleted at its end.
RUN_DURATION_MODES = ("flex-start", "queued-provisioning")
#: The run durations Compute Engine takes for a resize request: 10 minutes to 7 days (compute v1 discovery
#: document and Google's "About resize requests in a MIG"); GKE's queued provisioning caps
#: ``maxRunDurationSeconds`` at 7 days too, its default.
MIN_RUN_SECONDS, MAX_RUN_SECONDS = 600, 7 * 24 * 3600
REMOVED_MODES = {"resize-request": (
    "was removed: it sent Compute Engine resize requests to an ordinary node pool's instance group, which Compute "
    "Engine takes only for flex-start or reservation-bound VMs (and deletes them at the end of a run duration). Use "
    "resize for an ordinary pool, flex-start for a node pool created with --flex-start, queued-provisioning for one "
    "created with --enable-queued-provisioning")}
_GKE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class GkeSpec(_Strict):
    """Where a pool lives on GKE and how the ``gke`` provider grows it (see ``gangscale.providers.gke``)."""

    project: str = Field(min_length=1)
    #: The cluster's location: a region (regional cluster) or a zone.
    location: str = Field(min_length=1)
    cluster: str = Field(min_length=1)
    mode: str = "slice"
    #: ``resize``/``flex-start``/``queued-provisioning``: the existing GKE node pool whose MIG in the pool's ``zone``
    #: is grown. ``slice``: optionally an existing node pool whose node config (service account, scopes, image
    #: type, labels, taints), management and upgrade settings each new slice pool copies.
    node_pool: str = ""
    #: ``flex-start``: the resize request's ``requestedRunDuration``; ``queued-provisioning``: the request's
    #: ``maxRunDurationSeconds``. The nodes are deleted this long after they are obtained. Default: 7 days, GKE's.
    max_run_duration_seconds: int | None = Field(default=None, ge=MIN_RUN_SECONDS, le=MAX_RUN_SECONDS)

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, mode: str) -> str:
        if mode in REMOVED_MODES:
            raise PydanticCustomError("gke_mode", "'{mode}' {why}", {"mode": mode, "why": REMOVED_MODES[mode]})
        if mode not in GKE_MODES:
            raise PydanticCustomError("gke_mode", "must be one of {modes}; got '{mode}'",
                                      {"modes": ", ".join(GKE_MODES), "mode": mode})
        return mode

    @field_validator("node_pool", "cluster")
    @classmethod
    def _gke_name(cls, name: str) -> str:
        if name and (len(name) > 40 or not _GKE_NAME.fullmatch(name)):
            raise PydanticCustomError("gke_name", "must be a GKE name: lowercase letters, digits and '-', starting "
                                      "with a letter, at most 40 characters; got {name}", {"name": repr(name)})
        return name


#: An EC2 subnet id (``subnet-`` and hex digits: 8 or 17 on EC2, any number here) and the launch
#: template versions CreateFleet takes (``$Default``, ``$Latest`` or a version number; the EC2 API reference of
#: ``FleetLaunchTemplateSpecificationRequest.Version``).
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]+$")
_LAUNCH_TEMPLATE_VERSION = re.compile(r"^(\$Default|\$Latest|[1-9][0-9]*)$")
#: A launch template name: 3 to 128 characters of letters, digits and ``().-/_`` (the EC2 API reference of
#: ``CreateLaunchTemplate.LaunchTemplateName``: pattern ``[a-zA-Z0-9\(\)\.\-/_]+``).
_LAUNCH_TEMPLATE_NAME = re.compile(r"^[a-zA-Z0-9().\-/_]{3,128}$")


class AwsSpec(_Strict):
    """Where a pool lives on EKS and what the ``aws`` provider launches for it (see ``gangscale.providers.aws``):
    one EC2 instance per unit, from ``launchTemplate`` in ``subnet``, by one ``CreateFleet`` of type instant per
    obtain. ``zone``, ``machineType`` and (for ``capacityType: reservation``) ``reservation.name`` are the pool's own
    fields; the checks that tie them together are :func:`gangscale.config._aws_issues`."""

    region: str = Field(min_length=1)
    #: The EKS cluster's name: instances are tagged ``kubernetes.io/cluster/<cluster>=owned``.
    cluster: str = Field(min_length=1)
    #: A launch template id (``lt-…``) or name; it carries the node's bootstrap (``nodeadm`` user data).
    launch_template: str = Field(min_length=1)
    launch_template_version: str = "$Default"
    #: One subnet in the pool's zone: a fleet of type instant takes one subnet per override.
    subnet: str = ""
    #: The EKS managed node group whose launch template this is; its nodes carry ``eks.amazonaws.com/nodegroup``.
    node_group: str = ""
    #: A cluster placement group for the pool's instances.
    placement_group: str = ""
    #: With ``capacityType: reservation``: the reservation is a Capacity Block for ML.
    capacity_block: bool = False

    @field_validator("subnet")
    @classmethod
    def _subnet_id(cls, subnet: str) -> str:
        if subnet and not _SUBNET_ID.fullmatch(subnet):
            raise PydanticCustomError("aws_subnet", "must be a subnet id (subnet- and hex digits); got "
                                      "{subnet}", {"subnet": repr(subnet)})
        return subnet

    @field_validator("launch_template")
    @classmethod
    def _launch_template(cls, template: str) -> str:
        if not template.startswith("lt-") and not _LAUNCH_TEMPLATE_NAME.fullmatch(template):
            raise PydanticCustomError("aws_launch_template", "must be a launch template id (lt-…) or name (3 to 128 "
                                      "letters, digits and ().-/_); got {template}", {"template": repr(template)})
        return template

    @field_validator("launch_template_version")
    @classmethod
    def _version(cls, version: str) -> str:
        if not _LAUNCH_TEMPLATE_VERSION.fullmatch(version):
            raise PydanticCustomError("aws_version", "must be $Default, $Latest or a version number; got {version}",
                                      {"version": repr(version)})
        return version


class ReservationSpec(_Strict):
    """The reservation a ``capacityType: reservation`` pool draws on: its name (for people and ``pools --from-gke``)
    and its size in nodes (no more units than it holds are asked for; None: bounded by maxUnits only)."""

    name: str = ""
    nodes: int | None = Field(default=None, ge=0)


class TierPolicySpec(_Strict):
    """One tier policy (:class:`gangscale.model.tiers.TierPolicy`); tiers are checked there, the one place that
    knows them. Unset fields of a class's policy are the top level's."""

    order: list[str] | None = None
    mix_tiers: bool | None = None
    wait_seconds: dict[str, float] | None = None


class CapacityTiersSpec(TierPolicySpec):
    classes: dict[str, TierPolicySpec] = Field(default_factory=dict)


class PoolSpec(_Strict):
    """One ``nodePools[]`` entry, as written; :func:`gangscale.config.parse_pool_file` resolves it."""

    name: str
    machine_type: NodeLabelValue = ""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    # Quantities are checked while resolving, where a bad one can be reported with its resource name.
    allocatable: dict[str, Any] = Field(default_factory=dict)
    tpu_topology: str = ""
    nodes_per_unit: int | None = Field(default=None, ge=1)
    min_units: int = Field(default=0, ge=0)
    # Required on purpose: a pool without a maximum could scale expensive accelerators without bound.
    max_units: int = Field(ge=0, le=MAX_UNITS_LIMIT)
    zone: NodeLabelValue = ""
    price_per_unit_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # Checked by NodePool, the one place that knows the tiers (None: from the gke mode, else on-demand).
    capacity_type: str | None = None
    reservation: ReservationSpec | None = None
    simulated: SimulatedSpec | None = None
    gke: GkeSpec | None = None
    aws: AwsSpec | None = None

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: str) -> str:
        # The name is the value of the gangscale.io/node-pool label and of GKE's node pool label.
        if is_dns1123_label(name):
            raise PydanticCustomError(
                "dns_label", "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
                "with a letter or digit, at most 63 characters; got {name}", {"name": repr(name)})
        return name


class PlannerSpec(_Strict):
    # Criterion names are checked by gangscale.model.policy.Policy, the one place that knows them.
    policy: list[str] | None = None
    extended_resource_toleration: bool = True


class PoolFileSpec(_Strict):
    """The top level's keys. Pools and the planner section are validated separately, so that a problem in one
    does not hide the problems in the others."""

    node_pools: list[Any] = Field(min_length=1)
    planner: Any = None
    capacity_tiers: Any = None
