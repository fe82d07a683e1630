"""The EC2 calls the ``aws`` provider makes, through aiobotocore (AWS's own request serialisation, SigV4 signing,
retry modes and credential chain, on asyncio), one client per region.

The client is created in :meth:`Ec2.start` and closed in :meth:`Ec2.aclose`; aiobotocore is imported there, not when
the provider's modules are, so importing :mod:`gangscale.providers.aws` stays cheap. Its configuration:
``retries={"mode": "standard", "total_max_attempts": …}`` (botocore retries throttles, 5xx and connection errors,
honouring ``x-amz-retry-after``; a repeated ``CreateFleet`` carries the same ``ClientToken``, so it is one call to
EC2), ``user_agent`` (the fakes and CloudTrail tell replicas apart), connect and read timeouts. The endpoint is
``endpoint_url`` when given, else botocore's own resolution, which reads ``AWS_ENDPOINT_URL_EC2`` (botocore's
service-specific endpoint variables) before the regional endpoint.

Credentials: botocore's default chain, unless the caller passes keys (the tests do): environment variables, the
shared config and credentials files, IRSA (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``: web identity), EKS
Pod Identity (``AWS_CONTAINER_CREDENTIALS_FULL_URI`` + ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``: container
credentials) and the instance profile (IMDS).

The fence is asked before every call that changes EC2 (``CreateFleet``, ``TerminateInstances``): see
``gangscale.providers.base.Fence``. Reads (``Describe*``) need no lease.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from gangscale.providers.aws.ec2model import use_trimmed_model
from gangscale.providers.aws.fleet import instances_of
from gangscale.providers.base import Fence, not_leader, unfenced

JSON = dict[str, Any]
#: Per call. CreateFleet of type instant answers when the launch is decided, in seconds; a minute is ample.
CONNECT_TIMEOUT, READ_TIMEOUT = 10.0, 60.0
MUTATING = frozenset({"CreateFleet", "TerminateInstances"})
#: Connections per client: the controller's provider calls at once (``Settings.concurrency``).
MAX_CONNECTIONS = 32
#: Values per DescribeInstances filter the provider sends at once: a conservative batch (EC2's limit on values per
#: filter was not verified; 100 keeps each request small either way).
FILTER_BATCH = 100


class Ec2:
    """One region's EC2 client: the calls by name, each recorded in :attr:`calls`. ``max_attempts``: the attempts
    botocore makes of each call, the first included (3: botocore's default in standard mode)."""

    def __init__(self, region: str, *, endpoint_url: str | None = None, fence: Fence = unfenced,
                 user_agent: str = "gangscale", max_attempts: int = 3,
                 credentials: tuple[str, str] | None = None) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.fence = fence
        self.user_agent = user_agent
        self.max_attempts = max_attempts
        self.credentials = credentials
        #: Calls made, by operation name, for benchmarks and tests.
        self.calls: list[str] = []
        self._client: Any = None
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        if self._client is not None:
            return
        from aiobotocore.config import AioConfig  # noqa: PLC0415 (lazy: importing the provider stays cheap)
        from aiobotocore.session import get_session  # noqa: PLC0415

        # total_max_attempts counts the first call too (botocore's max_attempts counts only the retries). The pool
        # holds as many connections as the controller makes provider calls at once (Settings.concurrency), not
        # aiobotocore's 10: CreateFleet answers take seconds on EC2, and ten would bound the scale-ups in flight.
        config = AioConfig(retries={"mode": "standard", "total_max_attempts": self.max_attempts},
                           user_agent=self.user_agent, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                           max_pool_connections=MAX_CONNECTIONS)
        keys: dict[str, str] = {}
        if self.credentials is not None:
            keys = {"aws_access_key_id": self.credentials[0], "aws_secret_access_key": self.credentials[1]}
        session = get_session()
        use_trimmed_model(session)  # 26 MiB less a region (ec2model)
        context = session.create_client("ec2", region_name=self.region, endpoint_url=self.endpoint_url,
                                        config=config, **keys)
        self._client = await self._stack.enter_async_context(context)

    async def aclose(self) -> None:
        self._client = None
        await self._stack.aclose()

    async def call(self, operation: str, **params: Any) -> JSON:
        """``operation`` (``CreateFleet``, ``DescribeInstances``, …) with botocore's parameter names; botocore's
        failures propagate (``gangscale.providers.aws.errors`` classifies them)."""
        if operation in MUTATING and not self.fence():
            raise not_leader("")
        if self._client is None:
            raise RuntimeError("the EC2 client is not started")
        self.calls.append(operation)
        method = getattr(self._client, _snake(operation))
        answer: JSON = await method(**params)
        return answer

    async def describe_instances(self, filters: Sequence[Mapping[str, Any]]) -> list[JSON]:
        """Every instance matching ``filters`` (all pages). Filters, not ``InstanceIds``: an id EC2 does not know
        (yet, or any more) is left out rather than failing the whole call with ``InvalidInstanceID.NotFound``."""
        found: list[JSON] = []
        params: JSON = {"Filters": [dict(f) for f in filters]}
        while True:
            page = await self.call("DescribeInstances", **params)
            found += instances_of(page.get("Reservations") or [])
            token = page.get("NextToken")
            if not token:
                return found
            params["NextToken"] = token


def _snake(operation: str) -> str:
    """``CreateFleet`` -> ``create_fleet``: botocore's method names (its ``xform_name``, for these names)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
