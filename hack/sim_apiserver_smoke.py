"""Start the embedded API server, write a kubeconfig, and time a burst of writes and a watch.

Usage: .venv/bin/python hack/sim_apiserver_smoke.py [--objects N]

Prints how long N creates, one list and a watch that sees all N events take on this machine; a
sanity figure for the test fixture, not a benchmark of a real API server.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from gangscale.kube.client import make_http
from gangscale.kube.resources import NODES
from gangscale.sim.apiserver import EmbeddedAPIServer


async def main(objects: int) -> None:
    async with EmbeddedAPIServer() as server:
        path = server.write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
        http = await make_http(str(path))
        try:
            start_rv = (await http.request("GET", NODES.path()))["metadata"]["resourceVersion"]
            t0 = time.perf_counter()
            for i in range(objects):
                await http.request("POST", NODES.path(), body={"apiVersion": "v1", "kind": "Node",
                                                               "metadata": {"name": f"n{i}"}})
            t1 = time.perf_counter()
            listing = await http.request("GET", NODES.path())
            t2 = time.perf_counter()
            seen = 0
            async for _ in http.stream(NODES.path(), {"resourceVersion": start_rv}):
                seen += 1
                if seen == objects:
                    break
            t3 = time.perf_counter()
        finally:
            await http.api_client.close()
    print(f"{objects} creates: {t1 - t0:.3f}s ({objects / (t1 - t0):.0f}/s); "
          f"list of {len(listing['items'])}: {t2 - t1:.3f}s; watch of {seen} events: {t3 - t2:.3f}s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=1000)
    asyncio.run(main(parser.parse_args().objects))
