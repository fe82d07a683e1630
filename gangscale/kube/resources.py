"""The API resources gangscale (and its simulated cluster and tests) talk to, in one place."""

from __future__ import annotations

from gangscale.kube.transport import Resource

PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
PODTEMPLATES = Resource("", "v1", "podtemplates")
EVENTS = Resource("", "v1", "events")
SECRETS = Resource("", "v1", "secrets")
EVENTS_V1 = Resource("events.k8s.io", "v1", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
PROVREQS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests")
PROVREQS_BETA = Resource("autoscaling.x-k8s.io", "v1beta1", "provisioningrequests")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads")
CLUSTERQUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", namespaced=False)
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters")
LOCALQUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues")
RESOURCEFLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", namespaced=False)
WORKLOADPRIORITYCLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", namespaced=False)
ADMISSIONCHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", namespaced=False)
PROVREQCONFIGS = Resource("kueue.x-k8s.io", "v1beta2", "provisioningrequestconfigs", namespaced=False)
RAYJOBS = Resource("ray.io", "v1", "rayjobs")
JOBS = Resource("batch", "v1", "jobs")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
