"""The part of botocore's EC2 model the provider's client loads: the operations it calls and the shapes they use.

An EC2 client parses botocore's whole EC2 model (``botocore/data/ec2/2016-11-15/service-2.json.gz``: some 800
operations) into memory: 26 MiB of the controller's RSS, per region (docs/benchmarks.md, "The aws provider against the
fake EC2"). The provider calls six operations, so its client reads a model of those alone, shipped with gangscale
(``data/ec2/2016-11-15/service-2.json``) and put first on the session's data path; the endpoint rules and everything
else still come from botocore. The file is botocore's own model cut down by :func:`trimmed` (operations kept whole,
every shape they reach kept whole, only the ``documentation`` texts left out), so requests are serialised and answers
parsed exactly as with the full model. Measured: the first client, aiobotocore's import included, 15 MiB instead of
31; each further region's 8 instead of 35.

``tests/providers/aws/test_ec2model.py`` fails when the file is not what :func:`trimmed` makes of the installed
botocore's model; then write it again with ``python -m gangscale.providers.aws.ec2model``.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
API_VERSION = "2016-11-15"
#: Every EC2 operation the provider calls (deploy/aws/iam-policy.json grants exactly these and what a launch needs).
OPERATIONS = ("CreateFleet", "DescribeInstanceTypeOfferings", "DescribeInstances", "DescribeLaunchTemplates",
              "DescribeSubnets", "TerminateInstances")
#: The directory put first on botocore's data path: ``<DATA>/ec2/<API_VERSION>/service-2.json``.
DATA = Path(__file__).parent / "data"
SHIPPED = DATA / "ec2" / API_VERSION / "service-2.json"


def botocore_model() -> JSON:
    """The installed botocore's full EC2 model."""
    path = importlib.resources.files("botocore").joinpath("data", "ec2", API_VERSION, "service-2.json.gz")
    with path.open("rb") as raw:
        model: JSON = json.loads(gzip.decompress(raw.read()))
    return model


def trimmed(model: Mapping[str, Any], operations: tuple[str, ...] = OPERATIONS) -> JSON:
    """``model`` with only ``operations`` and the shapes they reach (inputs, outputs, errors, members, list and map
    members), each kept as it is."""
    shapes = model["shapes"]
    kept: dict[str, Any] = {}
    todo = [ref["shape"] for name in operations for key in ("input", "output")
            if (ref := model["operations"][name].get(key))]
    todo += [error["shape"] for name in operations for error in model["operations"][name].get("errors", [])]
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = shapes[name]
        todo.extend(_referenced(shapes[name]))
    out: JSON = _undocumented({**{k: v for k, v in model.items() if k not in ("operations", "shapes")},
                               "operations": {name: model["operations"][name] for name in operations},
                               "shapes": {name: kept[name] for name in sorted(kept)}})
    return out


def _undocumented(value: Any) -> Any:
    """``value`` without its ``documentation`` texts (API reference prose: no part of the wire format)."""
    if isinstance(value, dict):
        return {k: _undocumented(v) for k, v in value.items() if k != "documentation"}
    if isinstance(value, list):
        return [_undocumented(v) for v in value]
    return value


def _referenced(shape: Mapping[str, Any]) -> Iterator[str]:
    for member in (shape.get("members") or {}).values():
        yield member["shape"]
    for key in ("member", "key", "value"):
        if key in shape:
            yield shape[key]["shape"]


def use_trimmed_model(session: Any) -> None:
    """Make ``session``'s clients read :data:`SHIPPED` for EC2 (its data loader searches :data:`DATA` first)."""
    loader = session.get_component("data_loader")
    if str(DATA) not in loader.search_paths:
        loader.search_paths.insert(0, str(DATA))


def main() -> int:
    SHIPPED.parent.mkdir(parents=True, exist_ok=True)
    SHIPPED.write_text(json.dumps(trimmed(botocore_model()), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SHIPPED} ({SHIPPED.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
