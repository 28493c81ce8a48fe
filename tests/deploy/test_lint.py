"""Linters that stand in for `docker build` and `kubectl apply` here (no Docker engine, no cluster): hadolint on
every Dockerfile, yamllint on every YAML file of the deployment. Each is shown to catch a known defect too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.manifests import DOCKER, K8S, ROOT

BIN = Path(sys.executable).parent


def dockerfiles() -> list[Path]:
    """Every Dockerfile of the repository, not looking inside the venv, git, or var/ (which holds the Docker engine's
    state: tens of thousands of files)."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in {".venv", ".git", "var"}]
        found += [Path(folder, name) for name in files if name.startswith("Dockerfile")]
    return sorted(found)


DOCKERFILES = dockerfiles()


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "hadolint"), "--failure-threshold", "info", str(path)], capture_output=True, text=True, timeout=60
    )


def yamllint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "yamllint"), "--strict", "-c", str(ROOT / ".yamllint"), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_there_are_dockerfiles():
    assert DOCKER / "Dockerfile" in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_passes(dockerfile):
    done = hadolint(dockerfile)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nRUN pip install requests\n")
    done = hadolint(bad)
    assert done.returncode != 0
    assert {"DL3007", "DL3008", "DL3013"} <= set(done.stdout.replace(" ", "\n").split("\n"))


def test_yamllint_passes_on_every_deployment_file():
    files = [*K8S.rglob("*.yaml"), *DOCKER.glob("*.yaml"), ROOT / ".yamllint"]
    assert len(files) > 10
    done = yamllint(*files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_yamllint_catches_a_defect(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\nb:   [1,2]\n")
    done = yamllint(bad)
    assert done.returncode != 0 and "key-duplicates" in done.stdout
