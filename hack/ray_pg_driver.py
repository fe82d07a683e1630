"""A tiny Ray driver for the live GCS test (tests/ray/test_gcs_live.py); run it with the Ray venv's python.

    python ray_pg_driver.py ADDRESS create '[{"name": "a", "strategy": "STRICT_SPREAD", "bundles": [{"GPU": 1}]}]'
        creates each placement group detached (so it outlives this driver) and prints {"<name>": "<pg id hex>"}
    python ray_pg_driver.py ADDRESS remove
        removes every placement group that is not removed yet and prints the ids it removed

It imports ``ray``, which gangscale itself never does; it is not part of the package.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] not in ("create", "remove"):
        print(__doc__, file=sys.stderr)
        return 2
    import ray  # noqa: PLC0415 - only the Ray venv has it
    from ray.util.placement_group import PlacementGroup  # noqa: PLC0415

    ray.init(address=argv[1], namespace="gangscale-live-test", log_to_driver=False, logging_level="ERROR")
    try:
        if argv[2] == "create":
            created = {}
            for spec in json.loads(argv[3]):
                group = ray.util.placement_group(spec["bundles"], strategy=spec["strategy"], name=spec["name"],
                                                 lifetime="detached")
                created[spec["name"]] = group.id.hex()
            print(json.dumps(created))
        else:
            removed = []
            for pg_id, info in ray.util.placement_group_table().items():
                if info.get("state") != "REMOVED":
                    ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
                    removed.append(pg_id)
            print(json.dumps(removed))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
