"""Where requests come from: the demand-source protocol (``protocol``), the registry that builds the sources
(``registry``), and the two sources, ProvisioningRequests (``prsource``) and Ray gangs of autoscaling RayClusters
(``raysource``, with ``raygangrequest`` and the GCS pollers ``gcspollers``). A source talks to the controller only
through ``protocol.Host``; what it reads of the API it reads through reflectors the runtime runs.
"""
