"""gangscale: a gang-aware, all-or-nothing node pool autoscaler for Kueue ProvisioningRequests and Ray."""

__version__ = "0.1.0.dev0"
