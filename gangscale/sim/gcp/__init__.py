"""A fake Google Cloud control plane for tests and the demo: GKE (container.googleapis.com v1) node pools and
operations, the Compute Engine (compute.googleapis.com/compute/v1) managed instance groups under them, and the GCE
metadata server, on one local aiohttp port, on an injected clock.

Spec: ``research/cloud-providers.md`` §1 and §4.3. A client pointed at :attr:`FakeGcp.url` for both the
``https://container.googleapis.com/`` and ``https://compute.googleapis.com/compute/v1`` base URLs (and at it as
``GCE_METADATA_HOST``/``GCE_METADATA_IP``) works unchanged: the paths are the real ones.

Usage::

    gcp = FakeGcp(clock, kube_http)              # kube_http: gangscale.kube.transport.KubeHTTP, or None
    gcp.add_cluster("us-central1", "c1", ["us-central1-a", "us-central1-b"])
    gcp.add_node_pool(("us-central1", "c1"), "cpu", machine_type="e2-standard-8", node_count_per_zone=1)
    await gcp.start()                            # gcp.url, gcp.faults (GcpFaults), gcp.calls, gcp.state
    ...; await gcp.settle()                      # every Node call made so far is done
    await gcp.stop()

Modules: ``server`` (:class:`FakeGcp`: HTTP, auth, faults, the ticker), ``container`` and ``compute`` (the two
APIs' handlers and request checks), ``metadata``, ``engine`` (VMs, MIGs, resize requests, compute operations, time),
``pools`` (node pools and their operations), ``nodes`` (the Nodes a kubelet would register), ``render`` (the JSON),
``templates`` (the MIGs' instance templates: provisioning model, end of life, which MIGs take resize requests),
``queued``, ``queuedplan`` and ``queuedstatus`` (GKE's handling of ``queued-provisioning.gke.io``
ProvisioningRequests), ``state``, ``faults``, ``errors``, ``routing``, ``wire`` (timestamps, links, names, machine
shapes).

Faithful (what a provider may rely on)
--------------------------------------
- Paths, methods and camelCase JSON of: nodePools list/get/create/delete/setSize/setAutoscaling, operations
  get/list/cancel, clusters get (container); instanceGroupManagers list/get/listManagedInstances (POST)/resize/
  createInstances/deleteInstances, instanceGroupManagerResizeRequests insert/get/list/cancel/delete, instances get,
  instanceTemplates get, zoneOperations get/wait (compute). Proto3 JSON as Google sends it: int64/uint64 as strings
  (ids, ``acceleratorCount``, ``requestedRunDuration.seconds``, ``maxPodsPerNode``), empty lists and unset messages
  left out (an empty list answer is ``{}``, without ``nodePools``/``operations``/``managedInstances``/``items``).
- Errors in the AIP-193 envelope ``{"error": {"code", "message", "status", "errors": [{"message", "domain",
  "reason"}]}}`` (container errors also carry ``details[RequestInfo]``). VERBATIM texts: 401 (missing / invalid
  credentials, with ``WWW-Authenticate``), 404 ``Not found: projects/…/nodePools/NP.``, 409 ``Already exists:
  projects/….``, the 403 "Insufficient regional quota …" (reason ``forbidden``, CPUS from the machine catalog),
  400 FAILED_PRECONDITION "Operation operation-… is currently upgrading cluster C. / creating a node pool for
  cluster C. / deleting a node pool for cluster C. Please wait and try again once it is done.", 429 "Too many
  operations: cluster "C" hits the concurrent operations quota N, please try again later.", 400 "Node_pool.name
  must be specified." and the node-pool name regex message, the proto enum/type errors (``Invalid value at
  'node_pool.config.taints[0].effect' (type.googleapis.com/google.container.v1.NodeTaint.Effect), "NoSchedule"``),
  the unknown-field error ``Invalid JSON payload received. Unknown name "x": Cannot find field.``, compute's
  ``The resource 'projects/…' was not found`` / ``already exists``, the GKE stockout message "Google Compute Engine:
  Not all instances running in IGM after 35m4s. Expected N, running k, transitioning N-k. Current errors:
  [GCE_STOCKOUT]: Instance '…' creation failed: The zone 'projects/P/zones/Z' does not have enough resources
  available to fulfill the request. '(resource type:compute)'." (``[GCE_QUOTA_EXCEEDED]`` with "Quota 'CPUS'
  exceeded.  Limit: L in region R." for quota), per-instance ``ZONE_RESOURCE_POOL_EXHAUSTED`` /
  ``QUOTA_EXCEEDED`` codes in ``lastAttempt.errors.errors[]``.
- Container Operation: ``name`` ``operation-<13 digits>-<8 hex>``, ``operationType`` (``CREATE_NODE_POOL``,
  ``DELETE_NODE_POOL``, ``SET_NODE_POOL_SIZE``; ``UPDATE_CLUSTER`` for setAutoscaling), ``status``, ``zone`` and
  ``location``, ``selfLink``/``targetLink`` (with the project NUMBER, as GKE's are: match them by their
  ``/locations/L/clusters/C/nodePools/NP`` suffix), ``startTime``/``endTime`` RFC3339 UTC with nanoseconds and
  ``Z``, and on failure ``error {code, message}`` plus the same text in ``statusMessage``.
- Node pools: a create is visible at once (``PROVISIONING``, ``instanceGroupUrls`` already filled: one MIG per zone,
  ``gke-<cluster>-<pool>-<8 hex>-grp``, base instance name without ``-grp``, instances ``<base>-<4 chars>``); a
  multi-host TPU slice pool (``placementPolicy.tpuTopology`` + TPU machine type; hosts = chips / chips per VM) gets
  every VM at once after ``operation_seconds`` or none; other pools get VMs one by one as stock allows. A failed
  create leaves the pool behind with ``conditions[{code: GCE_STOCKOUT|GCE_QUOTA_EXCEEDED, message,
  canonicalCode: RESOURCE_EXHAUSTED}]``: ``ERROR`` if it has no VM, ``RUNNING_WITH_ERROR`` if it has some (a slice
  never has some). Delete: ``STOPPING`` (VMs ``STOPPING``, instances ``DELETING``) until the operation ends, then
  404 and the Nodes deleted; every registered Node of the pool is cordoned (``spec.unschedulable``) when the delete
  starts, as GKE drains the nodes of a node pool it deletes (the Pods themselves are not evicted: simplified).
  GKE's only idempotency is the pool name (409 on a retry).
- Compute: every mutating call honours ``requestId`` (a UUID; the zero UUID is refused): a repeat answers the first
  Operation as it is now and changes nothing. Compute Operation: ``kind``, ``id``, ``name``, ``zone`` URL,
  ``operationType`` (``compute.instanceGroupManagers.resize|createInstances|deleteInstances``,
  ``compute.instanceGroupManagerResizeRequests.insert|cancel|delete``), ``targetLink``, ``targetId``, ``status``,
  ``progress``, ``insertTime``/``startTime``/``endTime``, ``clientOperationId`` (the requestId), ``user``; MIG
  operations end when the change is scheduled (the change is applied when the call is answered). ``wait`` holds
  until DONE or ``wait_seconds`` of clock time, and may answer not DONE. ManagedInstance: ``instance`` URL (before
  the VM exists), ``name``, ``id`` and ``instanceStatus`` once it exists, ``currentAction``
  (``CREATING``/``DELETING``/``NONE``), ``lastAttempt.errors.errors[]`` while it cannot be created; a MIG retries
  such instances every ``retry_seconds`` (``CREATING`` retries forever). Resize requests: ``CREATING`` →
  ``ACCEPTED`` → ``SUCCEEDED`` (all VMs in one instant) or ``FAILED`` (``status.error.errors[]``; members removed,
  target size back) or ``CANCELLED``; ``status.lastAttempt.error.errors[]`` while waiting; their members count in
  ``targetSize`` from the start. Cancel only while ACCEPTED; delete only once not active, and deleting a SUCCEEDED
  request leaves its VMs (Google: deleting a request does not delete the VMs it made).
- Instance templates and flex-start (:mod:`.templates`, with sources): each MIG's ``instanceTemplate`` is served by
  ``instanceTemplates.get`` at the path its URL names, with ``properties.machineType`` and
  ``properties.scheduling.provisioningModel`` from the node pool: ``config.flexStart`` → ``FLEX_START`` with
  ``instanceTerminationAction: DELETE``, ``onHostMaintenance: TERMINATE`` and ``maxRunDuration`` (from
  ``config.maxRunDuration``, container v1 ``NodeConfig``); ``config.spot`` → ``SPOT``; else ``STANDARD``;
  ``reservationAffinity`` from ``config.reservationAffinity``. A resize request on a MIG whose template is neither
  ``FLEX_START`` nor ``RESERVATION_BOUND`` and consumes no specific reservation is refused with 400 (Google's "About
  resize requests in a MIG": resize requests are for those provisioning models; the wording is the fake's own);
  ``requestedRunDuration`` is optional (gcloud's reference: optional for FLEX_START or reservation MIGs, the only ones
  taken) and 10 minutes to 7 days when given. A VM made by a resize request carries the metadata item
  ``google-compute-mig-resize-request`` = the request's name (GKE's code: set by Compute Engine, copied by GKE into a
  Node label). A VM's end of life — the request's ``requestedRunDuration`` counted from its success, else the
  template's ``maxRunDuration`` counted from the VM's creation — is shown as the output-only
  ``ManagedInstance.scheduling.terminationTimestamp`` and ``Instance.resourceStatus.scheduling.terminationTimestamp``,
  and the VM is deleted then ("At the end of the run duration instance will be deleted",
  ``InstanceGroupManagerResizeRequest.requestedRunDuration``).
- Queued provisioning (:mod:`.queued`, rules and sources in :mod:`.queuedstatus`): with a Kubernetes client, the fake
  plays GKE's autoscaler for ProvisioningRequests (``autoscaling.x-k8s.io/v1``) of class
  ``queued-provisioning.gke.io``, as GoogleCloudPlatform/cluster-autoscaler does: ``Accepted=False/NotAccepted``
  first; the target is the queued node pool the PodTemplate's ``cloud.google.com/gke-nodepool`` selector names (zone
  from ``topology.kubernetes.io/zone``, else the pool's first); problems (``MissingPodTemplates``,
  ``NoQueuedNodepoolAvailable``, ``ProvisioningRequestNotSchedulableInNodepool``, ``NodepoolSizeReached``) are
  ``Accepted=False`` for 2 minutes, then ``Failed=True``; ``status.provisioningClassDetails`` (``NodeGroupName``,
  ``ResizeRequestName``, ``NodePoolName``, ``SelectedZone``, ``AcceleratorType``, ``NodePoolAutoProvisioned``,
  ``PodTemplateName``, ``ProvisioningMode``) is written, then a MIG resize request named as GKE names it
  (``gke-<ns≤20>-<name≤20>-<16 hex of sha256>``) for the bin-packed node count with ``requestedRunDuration`` =
  ``maxRunDurationSeconds`` or 7 days, then ``Accepted=True/SuccessfullyQueued``; last-attempt errors →
  ``Provisioned=False`` (``ResourcePoolExhausted``, ``QuotaExceeded``, GCE's message); SUCCEEDED →
  ``Provisioned=True`` at once; 10 minutes later ``BookingExpired=True``; at Provisioned + the run duration
  ``CapacityRevoked=True`` (the VMs are deleted then); FAILED → ``Failed=True`` with the mapped reason;
  ``ValidUntilSeconds`` → ``Failed=True/WaitTimeExceeded``. A deleted request's resize request is cancelled if
  ACCEPTED and deleted (its Nodes, if any, stay), as are those of ended requests an hour after they ended. Status is
  written with ``PUT …/status`` (``UpdateStatus``); conditions are upstream ``metav1.Condition`` s whose
  ``lastTransitionTime`` moves when status, reason or message changes, with ``observedGeneration``.
- Metadata server: ``GET /`` answers with ``Metadata-Flavor: Google``; ``/computeMetadata/v1/…`` requires the
  request header (403 otherwise); ``…/service-accounts/default/token`` → ``{"access_token", "expires_in",
  "token_type": "Bearer"}``; ``…/default/?recursive=true`` → ``{"aliases", "email", "scopes"}``; ``project/project-id``
  and ``numeric-project-id`` as text. Every container/compute call needs ``Authorization: Bearer <token>``.
- Nodes (through the given KubeHTTP, as a kubelet): name = instance name, ``spec.providerID`` =
  ``gce://<project>/<zone>/<instance>``, the pool's ``config.labels`` plus ``cloud.google.com/gke-nodepool``,
  ``kubernetes.io/hostname``, ``kubernetes.io/os``/``arch``, ``node.kubernetes.io/instance-type``,
  ``topology.kubernetes.io/zone``/``region``, ``cloud.google.com/machine-family``, ``cloud.google.com/gke-spot``
  (spot pools), ``cloud.google.com/gke-flex-start: "true"`` (flex-start pools: GKE's documented nodeSelector),
  ``autoscaling.gke.io/provisioning-request: <resize request>`` (VMs made by a resize request, from registration),
  ``cloud.google.com/gke-accelerator`` (GPU machine or ``config.accelerators[0].acceleratorType``),
  ``cloud.google.com/gke-tpu-accelerator`` and ``…-tpu-topology`` (TPU); the pool's taints plus
  ``nvidia.com/gpu=present:NoSchedule`` / ``google.com/tpu=present:NoSchedule`` and, on a
  ``queuedProvisioning.enabled`` pool, ``cloud.google.com/gke-queued=true:NoSchedule`` (GKE's code: "the taint added
  to the queued provisioning nodepools"); capacity and allocatable from
  :mod:`gangscale.model.catalog`; ``Ready=False`` at registration (``register_seconds`` after the VM runs, and
  ``register_spread_seconds`` more for each further VM of one create: a slice's hosts register one at a time),
  ``Ready=True`` ``ready_seconds`` later (strategic merge patch on ``/status``) unless its VM's kubelet is broken
  (below); the Node is deleted when its VM is gone (404 ignored).

Simplified, and gaps (a provider must not rely on these)
--------------------------------------------------------
- Texts that are the fake's own (not verified against GKE/GCE): negative ``initialNodeCount``/``nodeCount``,
  unknown machine type, a location outside the cluster, TPU topology/count checks, setSize on a multi-host slice
  (knob ``setsize_multihost_rejected``; whether GKE accepts it is unverified) or on a queued-provisioning pool
  (knob ``setsize_queued_rejected``), autoscaling limit checks, operation cancel refusals, the busy activity of a
  running setSize ("resizing a node pool for cluster C") and setAutoscaling ("updating cluster C"), the 403 for
  another project, the 404 text of a container operation, every compute 400 (requestId, size, names, resize
  requests, deleteInstances of a non-member, "cannot be resized while resize request … is in progress"), the
  metadata 403 text, the HTML error pages.
- The numeric ``error.code`` of a stocked-out operation is a knob (``stockout_error_code``, default 8
  RESOURCE_EXHAUSTED; GKE's value is unverified). Operations start ``RUNNING`` (never ``PENDING``); ``progress``,
  ``detail`` and ``clusterConditions`` are not sent. Check order (project, cluster, body, pool, busy, 429, quota)
  is the fake's.
- Unknown fields are refused only at the top level of request bodies; NodePool/NodeConfig fields other than those
  checked are echoed as given (labels are not validated as Kubernetes labels). Defaults filled in: machine type
  ``e2-medium``, disk, image, scopes, ``management``, ``maxPodsConstraint``, ``upgradeSettings``, a fixed
  ``version``. Machine types: the catalog, plus ``<family>-standard|highmem|highcpu-<n>`` (4/8/1 GiB per vCPU)
  and the E2 shared-core types; anything else is refused.
- A create or setSize fails only if some VM could not be CREATED by its deadline (``max(operation_seconds,
  stockout_after)`` after its start); VMs that exist but still boot make it wait. The pool's missing VMs keep being
  retried by its MIGs afterwards (as CREATING does), but its status is not set back to RUNNING if they come; a
  failed slice drops its missing members (target size 0). ``partial_gpu_grant`` (GPU pools only) and
  ``async_quota_next`` cap the pool for its whole life. One running operation per node pool is always enforced
  (``serialize_cluster_ops`` extends it to the cluster); setSize removes VMs newest first.
- Broken kubelets (the knobs' model, not GKE's verified behaviour): under ``never_ready`` every VM created gets
  a Node that registers ``Ready=False`` (``KubeletNotReady``) and never turns Ready; ``partial_slice_hosts`` = k
  does that to all but the first k VMs of the next multi-host slice, whose create still ends DONE with the pool
  ``RUNNING`` and every VM ``RUNNING`` (a slice is still created whole or not at all: there is no slice with
  VMs missing). Which it is is fixed when the VM is created, for its whole life: nothing repairs such a node
  (GKE's node auto-repair would recreate the VM after a while; the pool's status and conditions never show it).
- Quota: only the regional ``CPUS`` quota of VMs that exist (not of instances still CREATING); no GPU/TPU quotas.
  Stock is per ``(zone, machineType)`` and given back when a VM is deleted. No reservations (a reservation
  affinity is only shown in the template), spot preemption, DWS queueing order or capacity search, repair,
  upgrades, autoscaler (``autoscaling`` is stored, never acted on, except that a queued request may not exceed its
  maximum), or cluster create/delete (clusters come from :meth:`FakeGcp.add_cluster`).
- Flex-start and templates: the template is partial (see :mod:`.templates`); Google does not document whether a
  MIG's target size drops when a VM reaches its end of life: the fake assumes it does (the member leaves, as with
  deleteInstances). A resize-request VM's own ``scheduling`` is its template's. ``config.maxRunDuration`` of a pool
  that is not flex-start is not applied to its VMs. GKE's flex-start node label ``cloud.google.com/gke-provisioning``
  and ``cloud.google.com/gke-max-run-duration-seconds`` (written by GKE's node auto-provisioning) are not set.
- Queued provisioning: see :mod:`.queued` for what is left out: it reacts at once (no ~10 s loops), considers
  only the pool the template names, does no OBTAINABILITY, bulk MIGs or auto-provisioning, and does NOT model GKE's
  scale-down of the empty nodes after the booking ends or after a request is deleted (such nodes stay until their
  run duration ends); the texts of predicate failures inside ``ProvisioningRequestNotSchedulableInNodepool``
  messages, and of resize-request refusals, are the fake's own.
- VMs: PROVISIONING → STAGING → RUNNING over ``boot_seconds``; a deleted VM is STOPPING for ``vm_delete_seconds`` and
  then gone (no TERMINATED); its Node is deleted when it is gone, or ``node_delete_seconds`` later (on GKE the cloud
  node lifecycle controller deletes it once it notices the VM missing). ``currentAction`` is CREATING until the VM
  runs (no VERIFYING, no CREATING_WITHOUT_RETRIES, no instance health). Instance and MIG JSON are partial (no disks,
  networks or autoscaler resources served); compute timestamps are UTC with milliseconds and ``+00:00``
  (GCE uses a Pacific offset). Resize requests try all their VMs at once every ``retry_seconds``; they fail only
  through ``resize_request_fail_after``; ``instances`` (named VMs) is accepted as well as ``resizeBy``; any MIG
  ``resize`` is refused while one is active, and their members cannot be deleted before they succeed.
- createInstances with a name in use: synchronous 409 (GCE may report it per instance). deleteInstances of an
  instance still CREATING removes it at once. No paging, ``filter`` or ``orderBy`` anywhere.
- Links name the real hosts (``https://container.googleapis.com/v1/…``, ``https://www.googleapis.com/compute/v1/…``),
  never the fake: a client must route links by their path. Node-pool ``selfLink`` uses the project id. MIG names
  truncate cluster and pool to 20 characters each (GKE's own rule is not reproduced).
- Auth: one token string (the constructor's), valid from the start; a metadata fetch renews it; it expires only
  with ``token_expires_after``; scopes and IAM permissions are not checked. Metadata: only the keys listed above
  (no ``wait_for_change``, identity tokens or ``alt=json``).
- Nodes: no addresses, nodeInfo, heartbeats or conditions other than Ready; the Node is deleted at once when the VM
  is gone. Errors never carry ``Retry-After`` unless injected (``faults.errors``).
"""

from gangscale.sim.gcp.faults import Call, GcpFaults, Hold, InjectedError
from gangscale.sim.gcp.server import FakeGcp

__all__ = ["Call", "FakeGcp", "GcpFaults", "Hold", "InjectedError"]
