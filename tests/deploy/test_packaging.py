"""Packaging: one version, an SPDX license, and a constraints file that pins everything the image installs."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

from packaging.requirements import Requirement

import gangscale
from tests.deploy import manifests as m

PYPROJECT = tomllib.loads((m.REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CONSTRAINTS = m.REPO_ROOT / "constraints.txt"


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin"
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: list[str]) -> set[str]:
    """Every distribution the named ones need, transitively, as installed in this environment."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_the_version_has_one_source() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gangscale.__version__"}
    assert metadata.version("gangscale") == gangscale.__version__
    assert gangscale.__version__ not in (m.REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")


def test_the_license_is_an_spdx_expression() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in PYPROJECT["build-system"]["requires"])


def test_constraints_pin_every_package_the_image_installs() -> None:
    pins = _pins()
    runtime = [Requirement(r).name for r in PYPROJECT["project"]["dependencies"]]
    needed = _closure(runtime) | {"setuptools", "wheel"}
    assert not needed - set(pins), f"not pinned in constraints.txt: {sorted(needed - set(pins))}"
    for name in _closure(runtime):
        assert pins[name] == metadata.version(name), f"{name}: constraints.txt says {pins[name]}, tested with " \
                                                     f"{metadata.version(name)}"


def test_the_image_build_and_the_dev_install_use_the_constraints() -> None:
    build = m.stages(m.dockerfile_instructions((m.REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")))[0]
    assert m.env_of(build)["PIP_CONSTRAINT"] == "/src/constraints.txt"
    copied = [i.value for i in build if i.keyword == "COPY" and "constraints.txt" in i.value]
    assert copied and copied[0].split()[-1] == "./"
    assert "-c constraints.txt" in (m.REPO_ROOT / "dev.sh").read_text(encoding="utf-8")


def test_the_image_takes_the_ray_extra_on_request() -> None:
    build = m.stages(m.dockerfile_instructions((m.REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")))[0]
    assert [i.value for i in build if i.keyword == "ARG"] == ['EXTRAS=""']
    (install,) = [i.value for i in build if i.keyword == "RUN" and "pip install" in i.value]
    assert '"$(ls /wheels/*.whl)${EXTRAS:+[$EXTRAS]}"' in install
    assert "ray" in PYPROJECT["project"]["optional-dependencies"]
