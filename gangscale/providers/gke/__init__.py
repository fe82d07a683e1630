"""The ``gke`` provider: GKE node pools and Compute Engine managed instance groups, obtained all or nothing.

Modules: :mod:`.provider` (the ``NodePoolProvider``), :mod:`.checks` (what ``start`` checks of each pool), the modes
:mod:`.slices` (``slice``: one node pool per unit), :mod:`.resize` (``resize``: named VMs added to an existing node
pool), :mod:`.flexstart` (``flex-start``: a MIG resize request with a run duration) and :mod:`.queued`
(``queued-provisioning``: GKE's ``queued-provisioning.gke.io`` ProvisioningRequest), with :mod:`.groups` (a pool's
instance group: listing and deleting its VMs) and :mod:`.origins` (which resize request made a VM); :mod:`.names`
(token-derived names), :mod:`.operations` (polling long-running operations), :mod:`.client` (the REST calls),
:mod:`.errors` (failures as error classes), :mod:`.auth` (Application Default Credentials), :mod:`.pools`,
:mod:`.discover` (``gangscale pools --from-gke``).

The REST APIs are called directly with aiohttp rather than through ``google-cloud-container`` and
``google-cloud-compute``: those clients add about 140 MiB of resident memory and a second of import time to the
controller (``compute_v1`` alone: 148 MiB RSS after import, measured on CPython 3.11), against a 200 MB budget for
the whole controller, and the calls the provider makes are a dozen JSON requests. Credentials come from
``google-auth`` (Application Default Credentials, Workload Identity).
"""

from gangscale.providers.gke.provider import GkeProvider

__all__ = ["GkeProvider"]
