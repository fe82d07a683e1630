"""A fake EC2 for tests, the demo and ``gangscale sim aws``: the EC2 query API (``POST /``, form-encoded, XML
answers, SigV4 ``Authorization``) on one local aiohttp port, on an injected clock, whose request parsing and answers
follow botocore's own EC2 service model (:mod:`.model`).

Usage::

    ec2 = FakeEc2(clock, kube, region="us-east-1")        # kube: gangscale.kube.transport.KubeHTTP, or None
    ec2.add_subnet("subnet-0abc", "us-east-1a", cidr="10.0.0.0/20")
    ec2.add_launch_template("lt-0123456789abcdef0", "gpu", user_data=nodeconfig_mime)
    ec2.stock[("p5.48xlarge", "us-east-1a", "on-demand")] = 8     # absent: unlimited
    await ec2.start()                                     # ec2.url; ec2.faults, ec2.instances, ec2.calls
    ...; await ec2.settle()                               # every Node call made so far is done
    await ec2.aclose()

Modules: ``server`` (:class:`FakeEc2`: HTTP, auth, faults, observers, ticker), ``model`` (botocore's model: request
parsing, XML answers, checks), ``fleet`` (CreateFleet instant), ``actions`` (the other actions), ``engine``
(instance states over time), ``quotas`` (vCPU quotas), ``nodes`` (Nodes, user data, Node Termination Handler),
``state``, ``faults``, ``standalone`` (set-up from a pool file; ``serve`` for the CLI).

Faithful (what a provider may rely on)
--------------------------------------
- Wire: any aiobotocore/botocore EC2 client works unchanged with ``endpoint_url=ec2.url``; requests are read by the
  model's shapes (unknown members ``UnknownParameter``, missing required ``MissingParameter``, types/enums/ranges
  ``InvalidParameterValue``); answers are the model's XML; errors EC2's envelope; ``RequestLimitExceeded`` is 503.
- Actions: CreateFleet (instant), DescribeInstances, TerminateInstances, DescribeLaunchTemplates,
  DescribeLaunchTemplateVersions, DescribeSubnets, DescribeInstanceTypeOfferings, DescribeInstanceTypes,
  DescribeCapacityReservations; rules and sources in :mod:`.fleet` and :mod:`.actions`.
- Instances: ``pending`` → ``running`` → (``shutting-down`` → ``terminated``), listed for about an hour once
  terminated; private IPs from the subnet, private DNS names as EC2 forms them; Nodes as EKS registers them.

Simplified, and gaps (a provider must not rely on these)
--------------------------------------------------------
- Unverified against a live EC2 (each marked UNVERIFIED where it is made): the code and text for a minimum without
  Single* flags, which ``errorSet`` code an unmet minimum gives, replay answering the identical first answer, the
  ``IdempotentParameterMismatch``/``MaxSpotInstanceCountExceeded``/``ReservationCapacityExceeded`` texts, whether a
  missing launch template is a whole-call error (the fake's) or an ``errorSet`` item.
- No RunInstances, stop/start, fleets of type maintain/request, prices, weights, attribute-based selection,
  placement group capacity, Spot prices or rebalance recommendations; the drain NTH does after its taint; the
  signature is not verified; ClientTokens never expire; zone ids map ``a`` → ``az1``.
"""

from gangscale.sim.aws.faults import Ec2Faults, Exchange, Hold, InjectedError
from gangscale.sim.aws.server import OBSERVERS, FakeEc2

__all__ = ["OBSERVERS", "Ec2Faults", "Exchange", "FakeEc2", "Hold", "InjectedError"]
