"""Helpers for the deployment manifest tests: loading and rendering ``deploy/``, RBAC rule sets, flags,
the Dockerfile and ``.dockerignore``.

``render`` is a deliberately small kustomize: it follows ``resources`` (files and directories) and applies
RFC 6902 JSON patches listed under ``patches`` with a ``target``, and refuses any other kustomization
feature, so that it can never silently render something other than ``kubectl kustomize`` does (the kubectl
tests compare the two where a kubectl binary exists).

``granted_rules`` and ``rules_from_requests`` turn ClusterRoles and the embedded API server's request log
into the same ``(api group, resource[/subresource], verb)`` triples, so that what the controller did can
be compared with what it is allowed to do (``missing_rules``). ``role_rules``, ``request_rule`` and
``allows`` do the same with the object name, for rules restricted by ``resourceNames``.

``selects`` evaluates a label selector, ``disruptions_allowed`` a PodDisruptionBudget (the disruption
controller's arithmetic), and ``unknown_fields`` checks an object against the Kubernetes API types.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes_asyncio.client import models

JSON = dict[str, Any]
Rule = tuple[str, str, str]  # (api group, resource or resource/subresource, verb)
NamedRule = tuple[str, str, str, str]  # a Rule and an object name ("": any name, or a request naming none)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
BASE = DEPLOY / "base"
OVERLAY = DEPLOY / "overlays" / "simulated-cloud"
GKE_OVERLAY = DEPLOY / "overlays" / "gke"
RAY_GCS_OVERLAY = DEPLOY / "overlays" / "ray-gcs"
KUEUE_EXAMPLES = DEPLOY / "examples" / "kueue"
OBSERVABILITY = DEPLOY / "observability"
HELM = DEPLOY / "helm"  # Go templates, not YAML: tests/deploy/helm.py renders them
KUSTOMIZATION = "kustomization.yaml"
KUSTOMIZE_DIRS = (BASE, OVERLAY, GKE_OVERLAY, RAY_GCS_OVERLAY, KUEUE_EXAMPLES, OBSERVABILITY)

# --- loading -------------------------------------------------------------------------------------------


def load_documents(path: Path) -> list[Any]:
    """Every YAML document of a file, empty documents (``---`` with nothing after it) left out."""
    with path.open(encoding="utf-8") as fh:
        # libyaml's loader when PyYAML has it: the upstream CRDs are megabytes of YAML.
        return [doc for doc in yaml.load_all(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                if doc is not None]


def yaml_files(root: Path = DEPLOY) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file() and HELM not in p.parents)


def kustomization_dirs(root: Path = DEPLOY) -> list[Path]:
    return sorted(p.parent for p in root.rglob(KUSTOMIZATION))


def load_kustomization(directory: Path) -> JSON:
    docs = load_documents(directory / KUSTOMIZATION)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(f"{directory / KUSTOMIZATION}: expected one mapping")
    out: JSON = docs[0]
    return out


def references(directory: Path) -> list[Path]:
    """The paths a kustomization names (``resources`` entries and ``patches[].path``), resolved."""
    kust = load_kustomization(directory)
    paths = [directory / entry for entry in kust.get("resources", [])]
    paths += [directory / patch["path"] for patch in kust.get("patches", []) if "path" in patch]
    return [Path(os.path.normpath(p)) for p in paths]


def patch_files(root: Path = DEPLOY) -> set[Path]:
    """Files referenced as ``patches[].path`` by some kustomization (they are patches, not objects)."""
    out: set[Path] = set()
    for directory in kustomization_dirs(root):
        kust = load_kustomization(directory)
        out.update(Path(os.path.normpath(directory / p["path"])) for p in kust.get("patches", []) if "path" in p)
    return out


# --- rendering -----------------------------------------------------------------------------------------

_SUPPORTED_KEYS = {"apiVersion", "kind", "resources", "patches"}


def render(directory: Path) -> list[JSON]:
    """The objects ``kubectl kustomize directory`` produces, for the features these manifests use."""
    kust = load_kustomization(directory)
    unsupported = set(kust) - _SUPPORTED_KEYS
    if unsupported:
        raise NotImplementedError(f"{directory}: kustomization keys not handled by tests/deploy: {unsupported}")
    objects: list[JSON] = []
    for entry in kust.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects.extend(render(path))
        else:
            for doc in load_documents(path):
                if not isinstance(doc, dict):
                    raise ValueError(f"{path}: a resource document must be a mapping")
                objects.append(doc)
    for patch in kust.get("patches", []):
        if "path" not in patch or "target" not in patch:
            raise NotImplementedError(f"{directory}: only `patches` with a path and a target are handled")
        ops = load_documents(directory / patch["path"])
        if len(ops) != 1 or not isinstance(ops[0], list):
            raise NotImplementedError(f"{directory / patch['path']}: only RFC 6902 JSON patches are handled")
        hits = [i for i, obj in enumerate(objects) if matches_target(obj, patch["target"])]
        if not hits:
            raise ValueError(f"{directory}: patch {patch['path']} matches no object")
        for i in hits:
            objects[i] = apply_json_patch(objects[i], ops[0])
    return objects


def matches_target(obj: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata", {})
    wanted = {"group": group, "version": version, "kind": obj.get("kind"), "name": meta.get("name"),
              "namespace": meta.get("namespace")}
    return all(wanted.get(key) == value for key, value in target.items())


def apply_json_patch(obj: JSON, ops: Sequence[Mapping[str, Any]]) -> JSON:
    """RFC 6902 ``test``, ``remove``, ``add`` and ``replace``; a failed test raises ``ValueError``."""
    doc = copy.deepcopy(obj)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        key: int | str = (len(parent) if last == "-" else int(last)) if isinstance(parent, list) else last
        kind = op["op"]
        if kind == "test":
            if parent[key] != op["value"]:
                raise ValueError(f"JSON patch test failed at {op['path']}: {parent[key]!r} != {op['value']!r}")
        elif kind == "remove":
            del parent[key]
        elif kind == "add":
            if isinstance(parent, list):
                assert isinstance(key, int)
                parent.insert(key, copy.deepcopy(op["value"]))
            else:
                parent[key] = copy.deepcopy(op["value"])
        elif kind == "replace":
            parent[key] = copy.deepcopy(op["value"])
        else:
            raise NotImplementedError(f"JSON patch op {kind!r}")
    return doc


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata", {})
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name")))


def one(objects: Iterable[JSON], kind: str, name: str | None = None) -> JSON:
    found = [o for o in objects if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


# --- RBAC ----------------------------------------------------------------------------------------------


class RequestLike(Protocol):
    """The fields of ``gangscale.sim.apiserver.LoggedRequest`` that authorization looks at."""

    @property
    def verb(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def subresource(self) -> str | None: ...


def granted_rules(objects: Iterable[Mapping[str, Any]]) -> set[Rule]:
    """Every (api group, resource, verb) the ClusterRoles among ``objects`` grant; wildcards kept as ``*``.

    ``resourceNames`` would narrow a rule to some objects; these triples cannot express that, so a rule that
    has them raises rather than being counted as a full grant. ``nonResourceURLs`` rules grant no resource.
    """
    out: set[Rule] = set()
    for obj in objects:
        if obj.get("kind") != "ClusterRole":
            continue
        if obj.get("aggregationRule"):
            raise ValueError(f"ClusterRole {obj['metadata']['name']}: aggregated roles are not expanded here")
        for rule in obj.get("rules") or []:
            if rule.get("resourceNames"):
                raise ValueError(f"ClusterRole {obj['metadata']['name']}: resourceNames are not modelled")
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((group, resource, verb))
    return out


class NamedRequestLike(RequestLike, Protocol):
    """A logged request with the object it named ("" for list, watch, create and deletecollection)."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


def role_rules(role: Mapping[str, Any]) -> set[NamedRule]:
    """What one Role or ClusterRole grants, name by name: a rule with ``resourceNames`` gives one entry per
    name, a rule without them the name "" (every object). ``nonResourceURLs`` rules grant no resource."""
    if role.get("aggregationRule"):
        raise ValueError(f"{role['metadata']['name']}: aggregated roles are not expanded here")
    out: set[NamedRule] = set()
    for rule in role.get("rules") or []:
        names = rule.get("resourceNames") or [""]
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    out.update((group, resource, verb, name) for name in names)
    return out


def request_rule(req: NamedRequestLike) -> NamedRule:
    """The (group, resource, verb, name) a logged request was authorized as."""
    resource = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    return (req.group, resource, req.verb, req.name)


def allows(granted: Iterable[NamedRule], needed: NamedRule) -> bool:
    """Whether RBAC rules allow a request, as the RBAC authorizer decides: ``*`` matches anything, and a rule
    restricted to names matches only a request that names one of them (never a create or a list, which name no
    object at authorization time)."""
    group, resource, verb, name = needed
    return any(g in (group, "*") and r in (resource, "*") and v in (verb, "*") and n in ("", name)
               for g, r, v, n in granted)


def rules_from_requests(requests: Iterable[RequestLike]) -> set[Rule]:
    """The rules the logged requests needed. Requests that name no resource (discovery, ``/version``,
    ``/openapi``) are left out: the default ``system:discovery`` role allows them to every client."""
    out: set[Rule] = set()
    for req in requests:
        if not req.verb or not req.resource:
            continue
        resource = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
        out.add((req.group, resource, req.verb))
    return out


def missing_rules(needed: Iterable[Rule], granted: set[Rule]) -> set[Rule]:
    """The needed rules that ``granted`` does not allow, honouring ``*`` as Kubernetes RBAC does."""
    def allowed(rule: Rule) -> bool:
        group, resource, verb = rule
        return any(g in (group, "*") and r in (resource, "*") and v in (verb, "*") for g, r, v in granted)
    return {rule for rule in needed if not allowed(rule)}


def has_wildcards(rules: Iterable[Rule]) -> bool:
    return any("*" in part for rule in rules for part in rule)


# --- selectors, disruption budgets, API types -------------------------------------------------------------


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` matches ``labels`` (an empty selector matches everything)."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector operator {op!r}")
    return True


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString of a budget against ``total`` pods: percentages round up, as the disruption controller
    rounds them (``intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)``)."""
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ValueError(f"budget {value!r}: an integer or a percentage")
        return -(-int(value[:-1]) * total // 100)
    return value


def disruptions_allowed(spec: Mapping[str, Any], expected: int, healthy: int) -> int:
    """``status.disruptionsAllowed`` of a PodDisruptionBudget ``spec`` over pods of a workload of ``expected``
    replicas, ``healthy`` of them Ready: how many the eviction API may evict now."""
    if ("minAvailable" in spec) == ("maxUnavailable" in spec):
        raise ValueError("a PodDisruptionBudget sets exactly one of minAvailable and maxUnavailable")
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    return max(0, healthy - desired)


def unknown_fields(obj: Any, model: str) -> list[str]:
    """Paths of the fields of ``obj`` that the Kubernetes API type ``model`` (a kubernetes_asyncio model name,
    e.g. ``V1Deployment``) does not have: what strict field validation (``kubectl apply``'s default) refuses."""
    out: list[str] = []

    def walk(value: Any, type_name: str, path: str) -> None:
        if type_name.startswith("list[") and isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, type_name[5:-1], f"{path}[{i}]")
        elif type_name.startswith("dict(") and isinstance(value, dict):
            inner = type_name[5:-1].partition(", ")[2]
            for key, item in value.items():
                walk(item, inner, f"{path}.{key}")
        elif hasattr(models, type_name) and isinstance(value, dict):
            cls = getattr(models, type_name)
            by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
            for key, item in value.items():
                if key not in by_json:
                    out.append(f"{path}.{key}".lstrip("."))
                else:
                    walk(item, cls.openapi_types[by_json[key]], f"{path}.{key}")
        elif hasattr(models, type_name) or type_name.startswith(("list[", "dict(")):
            out.append(f"{path} (not a {type_name})".lstrip("."))

    walk(obj, model, "")
    return out


# --- container args ------------------------------------------------------------------------------------


def flags(args: Sequence[str]) -> dict[str, str | None]:
    """``--name=value`` / ``--name value`` / ``--switch`` arguments by name (after any leading subcommands)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args) and not args[i].startswith("-"):
        i += 1
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r}")
        name, eq, value = arg[2:].partition("=")
        if name in out:
            raise ValueError(f"flag --{name} given twice")
        if eq:
            out[name] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            out[name] = args[i + 1]
            i += 1
        else:
            out[name] = None
        i += 1
    return out


def effective_security(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> JSON:
    """The container's security settings, pod-level values filling in what the container does not set."""
    pod = pod_spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    inherited = {k: pod[k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile") if k in pod}
    return {**inherited, **own}


# --- Dockerfile and .dockerignore ------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str


def dockerfile_instructions(text: str) -> list[Instruction]:
    """Instructions with line continuations joined; comment lines (also inside continuations) dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, value = full.partition(" ")
        out.append(Instruction(keyword.upper(), value.strip()))
    if pending:
        raise ValueError("Dockerfile ends inside a line continuation")
    return out


def stages(instructions: Sequence[Instruction]) -> list[list[Instruction]]:
    """Instructions split at each ``FROM`` (each stage starts with its ``FROM``)."""
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def env_of(stage: Sequence[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "ENV":
            for item in shlex.split(ins.value):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i:end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def dockerignore_excludes(text: str, path: str) -> bool:
    """Whether the build context leaves ``path`` out, as Docker reads ``.dockerignore``: the last pattern
    that matches the path or one of its parent directories decides, ``!`` patterns re-include."""
    excluded = False
    parts = path.split("/")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negate else line).lstrip("/")
        regex = _pattern_regex(pattern)
        if any(regex.fullmatch("/".join(parts[:n])) for n in range(len(parts), 0, -1)):
            excluded = not negate
    return excluded


# --- kubectl -------------------------------------------------------------------------------------------


def find_kubectl() -> str | None:
    """As ``tests/cli/test_kubectl.py`` finds it: ``$GANGSCALE_KUBECTL``, the virtualenv's, then ``$PATH``."""
    explicit = os.environ.get("GANGSCALE_KUBECTL")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    return shutil.which("kubectl")


def kubectl_kustomize(kubectl: str, directory: Path) -> list[JSON]:
    proc = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60,
                          check=False)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None]


# --- upstream CRDs -------------------------------------------------------------------------------------


#: Vendored upstream CRDs: the one gangscale needs (deploy/crds) and the Kueue and KubeRay ones the tests use.
PROVREQ_CRD = REPO_ROOT / "deploy" / "crds" / "autoscaling.x-k8s.io_provisioningrequests.yaml"
TEST_CRDS = REPO_ROOT / "tests" / "crds"


def upstream_crds_dir() -> Path:
    """The upstream Kueue and KubeRay CRDs (``tests/crds``; see its README for versions)."""
    return TEST_CRDS
