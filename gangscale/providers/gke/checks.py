"""What the ``gke`` provider checks of every pool before its first call, with the reason for each refusal.

- every mode: the cluster answers (``clusters.get``);
- ``slice``: the cluster's release channel is read (slices must then keep auto-upgrade and auto-repair on), and
  the template node pool, if the pool names one, is read (its node config, management and upgrade settings are
  copied into each slice);
- ``resize``, ``flex-start``, ``queued-provisioning``: the node pool exists and has a managed instance group in
  the pool's zone (that group is what the mode grows);
- ``resize`` and ``flex-start``: GKE's cluster autoscaler is off on it (two autoscalers on one pool undo each
  other's work);
- ``flex-start``: the node pool is a flex-start node pool (``config.flexStart``) and its instance template's
  ``scheduling.provisioningModel`` is ``FLEX_START``: Compute Engine takes resize requests for the flex-start and
  reservation-bound provisioning models (Google's "About resize requests in a MIG");
- ``queued-provisioning``: the node pool has ``queuedProvisioning.enabled`` (only such pools get nodes from a
  ``queued-provisioning.gke.io`` ProvisioningRequest), and the provider can reach the Kubernetes API.
"""

from __future__ import annotations

from typing import Any

from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke.client import GcpHttp
from gangscale.providers.gke.operations import compute_path
from gangscale.providers.gke.pools import GkePool

JSON = dict[str, Any]


def refused(gp: GkePool, code: str, message: str) -> ProviderError:
    return ProviderError(ErrorClass.PERMANENT, code, message, pool=gp.name)


async def node_pool(http: GcpHttp, gp: GkePool) -> JSON:
    return await http.container("GET", f"{gp.cluster_path}/nodePools/{gp.node_pool}")


def group_in_zone(gp: GkePool, pool: JSON) -> str:
    """The node pool's instance group in the pool's zone, as a path."""
    for url in pool.get("instanceGroupUrls") or []:
        if f"/zones/{gp.zone}/" in str(url):
            return compute_path(str(url))
    raise refused(gp, "NO_INSTANCE_GROUP", f"node pool {gp.node_pool} has no instance group in zone {gp.zone} (its "
                                           f"locations: {', '.join(pool.get('locations') or []) or '?'})")


def not_autoscaled(gp: GkePool, pool: JSON) -> None:
    if (pool.get("autoscaling") or {}).get("enabled"):
        raise refused(gp, "AUTOSCALED_BY_GKE", f"node pool {gp.node_pool} has GKE's cluster autoscaler enabled; two "
                                               "autoscalers on one pool undo each other's work. Disable it (gcloud "
                                               f"container node-pools update {gp.node_pool} --no-enable-autoscaling) "
                                               "or give gangscale a pool of its own")


async def flex_start(http: GcpHttp, gp: GkePool, pool: JSON, group: str) -> None:
    if not (pool.get("config") or {}).get("flexStart"):
        raise refused(gp, "NOT_FLEX_START", f"node pool {gp.node_pool} is not a flex-start node pool (config.flexStart "
                                            "is not set): Compute Engine takes resize requests only for flex-start "
                                            "or reservation-bound VMs. Use mode resize for an ordinary node pool, or "
                                            "create one with --flex-start")
    manager = await http.compute("GET", group)
    template = await http.compute("GET", compute_path(str(manager.get("instanceTemplate") or "")))
    model = ((template.get("properties") or {}).get("scheduling") or {}).get("provisioningModel", "STANDARD")
    if model != "FLEX_START":
        raise refused(gp, "NOT_FLEX_START", f"the instance template of node pool {gp.node_pool} in {gp.zone} has the "
                                            f"provisioning model {model}, not FLEX_START")


def queued(gp: GkePool, pool: JSON, has_kube: bool) -> None:
    if not (pool.get("queuedProvisioning") or {}).get("enabled"):
        raise refused(gp, "NOT_QUEUED", f"node pool {gp.node_pool} does not have queued provisioning "
                                        "(queuedProvisioning.enabled): GKE gives its nodes only to other node pools' "
                                        "requests. Use mode resize, or create it with --enable-queued-provisioning")
    if not has_kube:
        raise refused(gp, "NO_KUBERNETES_CLIENT", "mode queued-provisioning creates ProvisioningRequests: the "
                                                  "provider needs the Kubernetes API")
