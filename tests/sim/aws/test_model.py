"""The model checks can fail: a misspelled member sent raw and an answer with an unknown element are caught; the
fake refuses what EC2 refuses (auth, unknown actions and members, missing members, bad enums)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.model import answer_problems, answer_xml, request_problems, validate_output
from tests.conftest import Ec2Traffic

AUTH = {"Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261127/us-east-1/ec2/aws4_request, "
                         "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
        "X-Amz-Date": "20261127T000000Z"}


async def raw(fake: FakeEc2, form: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, \
            session.post(fake.url + "/", data=form, headers=AUTH if headers is None else headers) as response:
        return response.status, await response.text()


async def test_a_misspelled_member_is_refused_and_fails_the_model_check(ec2: FakeEc2,
                                                                        ec2_traffic: Ec2Traffic) -> None:
    form = {"Action": "TerminateInstances", "Version": "2016-11-15", "InstanceIdd.1": "i-0123456789abcdef0"}
    status, body = await raw(ec2, form)
    assert status == 400 and "<Code>UnknownParameter</Code>" in body
    assert "The parameter InstanceIdd is not recognized" in body
    problems = request_problems("TerminateInstances", form)
    assert any("InstanceIdd" in p for p in problems) and any("MissingParameter" in p for p in problems)
    assert ec2_traffic.problems == []  # a refused test request may be wrong; the answer (an error) is fine


def test_an_answer_with_an_unknown_element_fails() -> None:
    good = answer_xml("TerminateInstances", {"TerminatingInstances": [
        {"InstanceId": "i-0123456789abcdef0", "CurrentState": {"Code": 32, "Name": "shutting-down"}}]}, "req-1")
    assert answer_problems("TerminateInstances", 200, good) == []
    bad = good.replace("<instanceId>", "<instanceIdd>x</instanceIdd><instanceId>")
    assert any("instanceIdd" in p for p in answer_problems("TerminateInstances", 200, bad))
    wrong_enum = good.replace("<name>shutting-down</name>", "<name>stopping-ish</name>")
    assert any("stopping-ish" in p for p in answer_problems("TerminateInstances", 200, wrong_enum))
    assert validate_output("TerminateInstances", {"TerminatingInstances": [{"InstanceIdd": "x"}]}) != []
    assert validate_output("TerminateInstances", {"TerminatingInstances": [{"CurrentState": {"Code": "32"}}]}) != []


def test_a_wrong_answer_from_the_fake_fails_the_test(ec2_traffic: Ec2Traffic) -> None:
    from gangscale.sim.aws import Exchange  # noqa: PLC0415

    ec2_traffic(Exchange(0.0, "DescribeSubnets", {"Action": "DescribeSubnets", "Version": "2016-11-15"}, {}, 200,
                         {"Subnets": [{"SubnetIdd": "x"}]}, answer_xml("DescribeSubnets", {}, "r"), "test"))
    assert any("SubnetIdd" in p for p in ec2_traffic.problems)
    ec2_traffic.expect_problems = True


@pytest.mark.parametrize(("form", "headers", "status", "code"), [
    ({"Action": "DescribeSubnets", "Version": "2016-11-15"}, {}, 401, "AuthFailure"),
    ({"Action": "RunInstancez", "Version": "2016-11-15"}, None, 400, "InvalidAction"),
    ({"Action": "DescribeInstances", "Version": "2016-11-15", "MaxResults": "ten"}, None, 400,
     "InvalidParameterValue"),
    ({"Action": "DescribeInstanceTypeOfferings", "Version": "2016-11-15", "LocationType": "planet"}, None, 400,
     "InvalidParameterValue"),
    ({"Action": "TerminateInstances", "Version": "2016-11-15"}, None, 400, "MissingParameter"),
    ({"Action": "DescribeSubnets", "Version": "2016-11-15", "DryRun": "true"}, None, 412, "DryRunOperation"),
    ({"Action": "DescribeInstances", "Version": "2016-11-15", "Filter.1.Name": "colour",
      "Filter.1.Value.1": "red"}, None, 400, "InvalidParameterValue"),
])
async def test_refusals(ec2: FakeEc2, form: dict[str, str], headers: dict[str, str] | None, status: int,
                        code: str) -> None:
    got_status, body = await raw(ec2, form, headers)
    assert (got_status, f"<Code>{code}</Code>" in body) == (status, True), body


async def test_user_agents_are_recorded(ec2: FakeEc2, client: Any) -> None:
    await client.describe_subnets()
    assert ec2.user_agents()[-1].startswith("test-client/1.0")
