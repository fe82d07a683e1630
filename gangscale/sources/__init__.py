"""Cluster objects turned into gangs: ProvisioningRequests and RayClusters."""
