"""The EC2 model the provider's client loads (gangscale.providers.aws.ec2model): botocore's own, cut down to the
operations the provider calls, and the client really reads it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from gangscale.providers.aws import ec2model
from gangscale.providers.aws.client import Ec2

PROVIDER = Path(ec2model.__file__).parent


def test_the_shipped_model_is_botocores_cut_down_to_the_operations() -> None:
    """Fails when botocore changes its model or the operations change: write the file again (module docstring)."""
    shipped = json.loads(ec2model.SHIPPED.read_text(encoding="utf-8"))
    assert shipped == ec2model.trimmed(ec2model.botocore_model())
    assert sorted(shipped["operations"]) == sorted(ec2model.OPERATIONS)


def test_every_operation_the_provider_calls_is_in_the_model() -> None:
    """An operation missing from the cut-down model would fail only when first called: every ``call("…")`` of the
    provider's modules names one of :data:`ec2model.OPERATIONS`."""
    called = set()
    for path in PROVIDER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "call" and node.args and \
                    isinstance(node.args[0], ast.Constant):
                called.add(node.args[0].value)
    assert called and called <= set(ec2model.OPERATIONS), called - set(ec2model.OPERATIONS)


def test_a_shape_reached_only_through_a_nested_list_is_kept() -> None:
    model = {"metadata": {}, "operations": {"Op": {"input": {"shape": "In"}}},
             "shapes": {"In": {"type": "structure", "members": {"L": {"shape": "List"}}},
                        "List": {"type": "list", "member": {"shape": "Item"}},
                        "Item": {"type": "structure", "members": {"M": {"shape": "Map"}}, "documentation": "x"},
                        "Map": {"type": "map", "key": {"shape": "S"}, "value": {"shape": "S"}},
                        "S": {"type": "string"}, "Unused": {"type": "string"}}}
    cut = ec2model.trimmed(model, ("Op",))
    assert sorted(cut["shapes"]) == ["In", "Item", "List", "Map", "S"]
    assert "documentation" not in cut["shapes"]["Item"]


async def test_the_client_reads_the_cut_down_model() -> None:
    ec2 = Ec2("us-east-1", endpoint_url="http://127.0.0.1:9", credentials=("AKIDEXAMPLE", "secret"))
    await ec2.start()
    try:
        assert sorted(ec2._client.meta.service_model.operation_names) == sorted(ec2model.OPERATIONS)
    finally:
        await ec2.aclose()
