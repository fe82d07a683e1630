"""The ``aws`` provider: EC2 instances for EKS node pools, obtained all or nothing by one ``CreateFleet``.

Design (issue 29; cloud-providers.md §3 and §4):

- **One unit is one instance**: the unit id is the instance id, ``Unit.nodes`` its private DNS name, which is the
  name of its EKS Node.
- **obtain** (:mod:`.provider`, request in :mod:`.fleet`): first the token's instances (``DescribeInstances`` with
  ``tag:gangscale.io/token``): a repeat after a lost answer or a crash answers with them. Else one ``CreateFleet`` of
  type ``instant`` with ``MinTargetCapacity == TotalTargetCapacity``, ``SingleInstanceType`` and
  ``SingleAvailabilityZone``, one override (instance type, subnet, zone, cluster placement group), the token as
  ``ClientToken`` and as an instance tag, and the capacity type as :mod:`.fleet` says (on-demand, spot, an
  On-Demand Capacity Reservation by id through ``reserved-capacity``, a Capacity Block through
  ``capacity-block``). No instance: the fleet's errors classified, nothing left (``rolled_back``). Fewer
  instances than asked (which ``MinTargetCapacity`` should exclude): they are terminated, a stockout. A whole-call
  failure whose outcome is unknown (a server error, a lost connection or timeout) is TRANSIENT with
  ``rolled_back=False``: the caller repeats with the same token, which ``ClientToken`` makes one launch. Then
  ``DescribeInstances`` of the ids until each has its private DNS name; an instance that ended at launch rolls the
  obtain back.
- **lookup**: ``DescribeInstances`` by the token tag; none, or all shutting down or terminated: None; else every
  instance is a unit, those not pending or running (or without a name yet) ``incomplete``.
- **release**: ``TerminateInstances`` of the units' instances that still exist and carry the pool's tag, in batches
  of at most 1000; idempotent.
- **Node recognition** (``node_ref``): the pool by its identifying label (``eks.amazonaws.com/nodegroup`` when the
  pool names ``nodeGroup``, else ``gangscale.io/node-pool``) and ``topology.kubernetes.io/zone``; the unit and claim
  (the token itself) by the node's name, from a map that every ``DescribeInstances`` answer fills, with unknown
  names read in the background and the controller told through ``set_reclassify`` (:mod:`.nodes`).
- **start** (:mod:`.checks`): the launch template exists, the subnet exists in the pool's zone, the instance type
  is offered there (PERMANENT errors naming the pool and the field); then every instance tagged
  ``gangscale.io/cluster=<cluster>`` fills the node-name map.
- **Errors** (:mod:`.errors`): EC2 codes to error classes, stockouts apart from quotas, ``x-amz-retry-after``.
- **The fence** is asked before every ``CreateFleet`` and ``TerminateInstances`` (:mod:`.client`).

The client is aiobotocore (asyncio botocore: AWS's serialisation, SigV4, the ``standard`` retry mode), created in
``start()`` and closed in ``aclose()``, imported only then (:mod:`.client`). Credentials: botocore's default chain —
environment, shared files, IRSA (web identity), EKS Pod Identity (container credentials), instance profile.
"""

from gangscale.providers.aws.provider import AwsProvider

__all__ = ["AwsProvider"]
