"""An in-memory Kubernetes API server that speaks the real HTTP protocol.

``EmbeddedAPIServer`` serves on 127.0.0.1 (a random port by default) so that production client code —
kubernetes_asyncio, our reflector, kubectl — runs against it unmodified. It is used in-process by the
tests and the demo, and standalone through ``gangscale sim apiserver``.

What it reproduces of a real kube-apiserver (v1.36), module by module:

- ``resources`` / ``builtin``: core v1 pods, nodes, podtemplates, secrets, events, namespaces;
  events.k8s.io/v1 events (same storage as core events, converted field by field);
  coordination.k8s.io/v1 leases; batch/v1 jobs (status subresource, generated selector and labels);
  apiextensions.k8s.io/v1 customresourcedefinitions; and, installed as CRDs at start,
  autoscaling.x-k8s.io v1/v1beta1 provisioningrequests, kueue.x-k8s.io v1beta2/v1beta1 workloads,
  admissionchecks, provisioningrequestconfigs, clusterqueues, localqueues, resourceflavors,
  workloadpriorityclasses, ray.io/v1 rayclusters and rayjobs, jobset.x-k8s.io/v1alpha2 jobsets. Creating a
  CRD serves its resource at once; deleting it removes the resource and all its objects.
- ``discovery``: ``/version``, legacy discovery documents, OpenAPI v3 (paths + CRD schemas).
- ``api`` / ``strategies``: uid, one global monotonic resourceVersion, creationTimestamp, generateName,
  generation (custom resources, CRDs, pods, jobs) bumped only by spec changes; create 201, get, list (see
  ``listing``), update with resourceVersion precondition (409), merge / JSON /
  strategic merge patch (strategic only for built-in kinds, 415 for custom resources, as upstream),
  server-side apply with managedFields and conflicts, delete with finalizers and deletionTimestamp,
  deletecollection, ``dryRun=All``, ``fieldValidation``; the status subresource split; per-kind defaults.
- ``listing`` / ``store``: lists in etcd key order; ``limit``/``continue`` pages that are all read at the
  first page's revision (objects created, changed or deleted between pages do not show), in O(page) each, with
  the real continue token (``{"v","rv","start"}``, unpadded base64url), its 400s, ``remainingItemCount``
  (unfiltered lists only), selectors applied within pages (pages fill past non-matching objects; the last
  page can be empty); ``410 Expired`` with an inconsistent-continuation token when the page's revision has left
  the window; ``resourceVersion`` / ``resourceVersionMatch`` (``Exact`` reads the past revision,
  ``NotOlderThan``, the legacy exact rule with ``limit``, ``0`` ignoring ``limit``), 504 for a too-new
  revision, the ``ListOptions`` 422s. ``store`` keeps the versions the watch window reaches (no copies).
- ``validation`` / ``schemas``: structural-schema validation of custom resources (422 Invalid with field
  causes), CEL immutability rules ``self == oldSelf``; object metadata validation.
- ``kindvalidation`` / ``podvalidation`` / ``resourcevalidation`` / ``quantity``: built-in kinds validated on
  create and update (patch and apply included) as upstream's registries do: Pod and PodTemplate specs (also a
  Job's template: containers, resources and extended-resource limits, hugepages, tolerations, affinity,
  nodeSelector, restartPolicy ...), Jobs, Nodes (taints, capacity), Events (core and events.k8s.io), Leases;
  a malformed quantity fails decoding with 400, as upstream.
- ``selectors``: label selectors (=, ==, !=, in, notin, exists, !exists) and the field selectors each kind
  supports (400 for an unsupported field).
- ``watching``: watch from a resourceVersion, synthetic ADDED on RV 0/unset, filtered-watch
  ADDED/DELETED transitions, BOOKMARK, timeoutSeconds, 410 Expired past the retained window.
- ``tables`` / ``printers`` / ``jsonpath``: server-side printing for ``kubectl get`` (Table responses). The real
  printers' columns, wide ones (``priority: 1``) included, for Pod (NAME READY STATUS RESTARTS AGE; IP NODE
  NOMINATED NODE READINESS GATES), Node (NAME STATUS ROLES AGE VERSION; INTERNAL-IP EXTERNAL-IP OS-IMAGE
  KERNEL-VERSION CONTAINER-RUNTIME), PodTemplate (NAME CONTAINERS IMAGES POD LABELS), Event, core and
  events.k8s.io (LAST SEEN TYPE REASON OBJECT MESSAGE; SUBOBJECT SOURCE FIRST SEEN COUNT NAME), Namespace,
  Lease, Secret, CRD; custom resources print their CRD's ``additionalPrinterColumns`` (the embedded schemas
  declare the upstream CRDs' columns and priorities) with JSONPath filters such as
  ``.status.conditions[?(@.type=="Admitted")].status``. ``includeObject`` ``Metadata``/``Object``/``None``
  is honoured (``kubectl get --sort-by`` asks for ``Object``).
- ``controllers``: garbage collection, namespace termination, the node lifecycle controller's taints and (turned
  on with ``controllers.monitor_node_health(clock)``) its health monitoring: Nodes whose Lease and status stop
  being renewed go ``Unknown`` with the ``unreachable`` taints — the kube-controller-manager's jobs, run next to
  the server as in a real cluster.
- ``faults``: injected status codes / latency / Retry-After, dropped watch streams, forced 410s, a
  request log, an "API server down" switch.

How it stays fast at scale (5,000 Nodes, 150,000 pods of 4-5 KB; ``docs/benchmarks.md``, "Paged LISTs"):

- ``store``: each stored object's JSON encoding is computed once, the first time a LIST page, a GET, a write's
  answer or a watch event serves it, and kept while the object is readable (as the watch cache's ``cachingObject``
  does): LIST pages are the objects' cached bytes joined (``listing.list_encoded``), a watch event's object is
  encoded once for all its watchers, and the answer bytes are those ``json.dumps`` gives for the same answer.
  Objects served converted (another version of a custom resource, events.k8s.io Events) and Table answers are
  encoded per request. A field selector reads only the fields it names.
- Writes: the request's decoded body is the new object (no copy), and no copy is made after it but the one a patch
  works on; the field manager compares the objects normalizing only what differs
  (``fieldsets.compare_normalized``), and the FieldsV1 of equal managedFields entries is one shared structure
  (``fieldpath``), which is most of a templated object's memory.
- Bulk loading without HTTP: ``EmbeddedAPIServer.load`` (and ``ObjectAPI.load``) creates objects in process with
  every check of a create, a pod's status written as its kubelet's status patch would, one revision each.

What it does NOT reproduce (known gaps):

- Authentication, authorization (RBAC), admission webhooks, API priority and fairness, audit.
- Protobuf and CBOR encodings (JSON only; a request that accepts only protobuf gets 406); aggregated
  discovery (clients fall back to the legacy documents); OpenAPI v2 definitions.
- List/watch consistency details: the window is one per resource and counted in events (the real server
  keeps etcd's history for about 5 minutes and a watch cache sized by time), so a continue token or an
  ``Exact`` list expires after ``--watch-window`` changes of that resource, not after minutes; a list or
  watch at a resourceVersion newer than the current one is answered at once (list: 504; watch: starts)
  instead of waiting up to 3 s for the cache to catch up. See ``listing`` for the token decoder's wording
  of JSON errors.
- Graceful pod deletion: there is no kubelet, so a pod is removed at once (as with
  ``--grace-period=0``); the pod ``eviction`` and ``ephemeralcontainers`` subresources are not served.
- Jobs: no Job controller runs here (``gangscale.sim.jobs`` emulates it as a separate component); deleting
  a Job without ``propagationPolicy`` propagates in the background instead of batch/v1's ``orphan``
  default.
- Conversion webhooks: every multi-version custom resource converts as ``strategy: None`` (only
  ``apiVersion`` changes), which is exact for ProvisioningRequest v1/v1beta1 but not for Kueue
  v1beta1/v1beta2, whose field names differ upstream.
- CEL validation rules other than ``self == oldSelf``; built-in kinds are not checked against their
  schemas, so unknown fields of built-in kinds are kept, not rejected (and a wrongly typed field is not a
  400, nor is a number too large for its Go field, such as a Pod's int32 ``containerPort`` or a Job's
  ``parallelism``, which the real server fails to decode; custom resources' ``int32``/``int64`` formats are
  range-checked, see ``validation``). Built-in validation leaves out: volumes, ports, env, probes' contents,
  security contexts, DNS config, topology spread constraints, resource claims, pod-level resources and OS
  rules in pod specs; Secrets, Namespaces' finalizer names; a Job's immutable fields and pod failure /
  success policies; Node podCIDR formats; Pod status. Defaults are applied on create only (the real server
  defaults on every decode), so fields it always defaults are not reported missing on update.
- Client-supplied ``managedFields`` on update are ignored (the server recomputes them). On create, the creator's
  Update entry also owns the fields the create's defaults set under ``status`` (a Pod's ``phase``, ``qosClass``),
  which the real server leaves to nobody (the strategy's reset fields are not recorded).
- The first LIST or watch that serves an object pays its encoding (``json.dumps``: about 100 µs for a 5 KB pod on
  the 2-core machine of ``docs/benchmarks.md``); later ones do not. Encodings cost their bytes in memory for every
  object served (about 5 KB per pod).
- ``EmbeddedAPIServer.load`` with ``status_manager`` commits a create and its status write as one revision and one
  ADDED event (over HTTP they are two revisions, ADDED then MODIFIED); the object is otherwise the same.
- Tables: batch/v1 Jobs print NAME AGE (upstream has STATUS COMPLETIONS DURATION ...); Pod STATUS ignores init
  containers (``Init:x/y``); column descriptions are short summaries, not upstream's API docs; watch streams
  carry plain objects even when ``as=Table`` is asked for (a real server sends Table rows); JSONPath outside
  the subset printer columns use (``..``, slices, unions) finds nothing.
"""

from gangscale.sim.apiserver.faults import Fault, LoggedRequest
from gangscale.sim.apiserver.server import EmbeddedAPIServer

__all__ = ["EmbeddedAPIServer", "Fault", "LoggedRequest"]
