"""Reading the deployment files: Kubernetes manifests rendered as `kubectl apply -k` would, and the MS_ variables
the deployment files set.

Rendering uses `kubectl kustomize` (or a `kustomize` binary) when one is on PATH. Without either, `render` falls
back to a small merge that covers what our kustomizations use, and no more: `resources` (files and folders),
`components` (their resources added, their patches applied to everything so far), `labels` pairs (metadata only),
`images` (newName/newTag by image name) and `patches` given by path, merged as a strategic merge patch would merge
ours (maps recursively, lists of maps by their `name`, new items first as kustomize puts them). A test compares the
fallback with kubectl's output wherever kubectl exists."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
DOCKER = ROOT / "docker"
# The parts of the metricsearch package the service images leave out (.dockerignore): they need torch.
OFFLINE_PARTS = ("trainer", "export", "evaluation")
KUSTOMIZATIONS = [
    K8S / "overlays" / "cpu",
    K8S / "overlays" / "gpu",
    K8S / "overlays" / "cpu-monitoring",
    K8S / "loadtest",
]
MS_VARIABLE = re.compile(r"\bMS_[A-Z0-9_]+\b")


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def renderer() -> list[str] | None:
    """The command that renders a kustomization folder, or None when neither kubectl nor kustomize is here."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def render(folder: Path) -> list[dict]:
    command = renderer()
    if command is None:
        return merge_render(folder)
    done = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def merge_render(folder: Path, patched: list[dict] = ()) -> list[dict]:
    """A kustomization's resources; `patched`: for a component, the resources its patches may change as well."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    resources: list[dict] = []
    for entry in kustomization.get("resources", []):
        path = folder / entry
        resources += merge_render(path) if path.is_dir() else load_all(path)
    for component in kustomization.get("components", []):
        resources += merge_render(folder / component, resources)
    for patch_entry in kustomization.get("patches", []):
        for patch in load_all(folder / patch_entry["path"]):
            target = next(
                r
                for r in (*resources, *patched)
                if (r["kind"], r["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])
            )
            _merge(target, patch)
    for pairs in (entry["pairs"] for entry in kustomization.get("labels", [])):
        for resource in resources:
            resource["metadata"].setdefault("labels", {}).update(pairs)
    images = {i["name"]: i for i in kustomization.get("images", [])}
    for container in (c for r in resources for c in containers(r)):
        name, _, tag = container["image"].partition(":")
        if name in images:
            new = images[name]
            container["image"] = f"{new.get('newName', name)}:{new.get('newTag', tag or 'latest')}"
    return resources


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif isinstance(value, list) and isinstance(target.get(key), list) and all("name" in v for v in value):
            by_name = {item.get("name"): item for item in target[key]}
            new = []
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    new.append(copy.deepcopy(item))
            target[key][:0] = new
        else:
            target[key] = copy.deepcopy(value)


def pod_spec(resource: dict) -> dict | None:
    spec = resource.get("spec", {})
    if resource["kind"] in ("Deployment", "StatefulSet", "Job"):
        return spec["template"]["spec"]
    return None


def containers(resource: dict) -> list[dict]:
    pod = pod_spec(resource)
    return [] if pod is None else pod.get("initContainers", []) + pod.get("containers", [])


def deployment_files() -> list[Path]:
    """Every file of docker/ and k8s/ that can set or name a service setting."""
    files = [*DOCKER.glob("*"), *K8S.rglob("*.yaml"), *DOCKER.glob(".env*")]
    return sorted(p for p in set(files) if p.is_file() and p.suffix != ".md")


def ms_variables(path: Path) -> set[str]:
    return set(MS_VARIABLE.findall(path.read_text()))
