"""What the ``aws`` provider checks of every pool before its first call, with the reason for each refusal.

- the launch template exists (``DescribeLaunchTemplates`` by id or by name): a fleet of a missing template fails
  every obtain with ``InvalidLaunchTemplateId.NotFound``/``InvalidLaunchTemplateName.NotFoundException``;
- the subnet exists and lies in the pool's zone (``DescribeSubnets``): an instant fleet launches into the one subnet
  of its override, and the zone of a subnet is fixed;
- the instance type is offered in the zone (``DescribeInstanceTypeOfferings`` with ``LocationType
  availability-zone``): EC2 tells static availability only, never whether capacity is there now.

Each answer is kept per (region, what was asked), so pools sharing a template or subnet cost one call. Failures
the checks do not expect propagate as botocore errors, classified by the caller.
"""

from __future__ import annotations

from typing import Any

from gangscale.providers.aws.client import Ec2
from gangscale.providers.aws.pools import AwsPool
from gangscale.providers.base import ErrorClass, ProviderError

TEMPLATE_NOT_FOUND = ("InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.Malformed",
                      "InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateName.MalformedException")
SUBNET_NOT_FOUND = ("InvalidSubnetID.NotFound", "InvalidSubnetID.Malformed")


def refused(ap: AwsPool, code: str, message: str) -> ProviderError:
    return ProviderError(ErrorClass.PERMANENT, code, message, pool=ap.name)


class Checks:
    def __init__(self) -> None:
        self._answers: dict[tuple[str, str, str], Any] = {}

    async def pool(self, ec2: Ec2, ap: AwsPool) -> None:
        await self.launch_template(ec2, ap)
        await self.subnet(ec2, ap)
        await self.offered(ec2, ap)

    async def launch_template(self, ec2: Ec2, ap: AwsPool) -> None:
        key = "LaunchTemplateIds" if ap.template_is_id else "LaunchTemplateNames"
        found = await self._once(ec2, "DescribeLaunchTemplates", ap.launch_template, TEMPLATE_NOT_FOUND,
                                 **{key: [ap.launch_template]})
        if not (found or {}).get("LaunchTemplates"):
            raise refused(ap, "LAUNCH_TEMPLATE_NOT_FOUND", f"aws.launchTemplate: launch template {ap.launch_template} "
                                                           f"does not exist in {ap.region}")

    async def subnet(self, ec2: Ec2, ap: AwsPool) -> None:
        found = await self._once(ec2, "DescribeSubnets", ap.subnet, SUBNET_NOT_FOUND, SubnetIds=[ap.subnet])
        subnets = (found or {}).get("Subnets") or []
        if not subnets:
            raise refused(ap, "SUBNET_NOT_FOUND", f"aws.subnet: subnet {ap.subnet} does not exist in {ap.region}")
        zone = str(subnets[0].get("AvailabilityZone") or "")
        if zone != ap.zone:
            raise refused(ap, "SUBNET_NOT_IN_ZONE", f"aws.subnet: subnet {ap.subnet} lies in {zone or '?'}, not in the "
                                                    f"pool's zone {ap.zone}: an instant fleet launches into the "
                                                    "subnet's zone")

    async def offered(self, ec2: Ec2, ap: AwsPool) -> None:
        found = await self._once(ec2, "DescribeInstanceTypeOfferings", f"{ap.instance_type}@{ap.zone}", (),
                                 LocationType="availability-zone",
                                 Filters=[{"Name": "instance-type", "Values": [ap.instance_type]},
                                          {"Name": "location", "Values": [ap.zone]}])
        if not (found or {}).get("InstanceTypeOfferings"):
            raise refused(ap, "INSTANCE_TYPE_NOT_OFFERED", f"machineType: EC2 does not offer {ap.instance_type} in "
                                                           f"{ap.zone} (DescribeInstanceTypeOfferings)")

    async def _once(self, ec2: Ec2, operation: str, what: str, not_found: tuple[str, ...],
                    **params: Any) -> dict[str, Any] | None:
        """The answer of one describe call, asked once per region; None when EC2 answers with a not-found code."""
        key = (ec2.region, operation, what)
        if key not in self._answers:
            from botocore.exceptions import ClientError  # noqa: PLC0415

            try:
                self._answers[key] = await ec2.call(operation, **params)
            except ClientError as exc:
                if str((exc.response.get("Error") or {}).get("Code")) not in not_found:
                    raise
                self._answers[key] = None
        answer: dict[str, Any] | None = self._answers[key]
        return answer
