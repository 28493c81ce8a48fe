"""The service image's Python environment, without Docker: the wheel built from what docker/Dockerfile copies
(pyproject, README, metricsearch/ less the offline parts .dockerignore keeps out), installed with the `service`
extra only into a fresh venv (no system site-packages), serves a bundle without torch: it imports, loads the bundle
with ONNX Runtime, indexes and answers; its only top-level package is `metricsearch`.

Dependencies come from a wheelhouse in pytest's cache, filled from PyPI on the first run (about a minute) and
installed with --no-index afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.manifests import OFFLINE_PARTS, ROOT

CHECK = """
import importlib.util, json, os, sys
os.environ.update(MS_BUNDLE_DIR=sys.argv[1], MS_DATA_DIR=sys.argv[2])
from fastapi.testclient import TestClient
from metricsearch.service.api.app import app_from_environment
import metricsearch.cli

items = [{"id": "a", "title": "red cotton shirt", "description": "soft"}, {"id": "b", "title": "blue linen shirt"},
         {"id": "c", "title": "stainless kettle", "description": "1.7 l"}]
with TestClient(app_from_environment()) as client:
    assert client.post("/index", json={"items": items}).status_code == 200
    similar = client.post("/similar", json={"id": "a", "k": 2}).json()["results"]
heavy = [m for m in ("torch", "transformers", "sentence_transformers", "metricsearch.trainer", "metricsearch.export")
         if m in sys.modules or importlib.util.find_spec(m) is not None]
print(json.dumps({"similar": [r["id"] for r in similar], "heavy": heavy, "prefix": sys.prefix}))
"""


def run(*args: str | Path, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_wheel_with_the_service_extra_serves_without_torch(tmp_path, tiny_bundle, request):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "metricsearch", source / "metricsearch", ignore=shutil.ignore_patterns("__pycache__"))
    for offline in OFFLINE_PARTS:  # what .dockerignore keeps out of the image
        shutil.rmtree(source / "metricsearch" / offline)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, source)
    (wheel,) = tmp_path.glob("metricsearch-*.whl")
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"metricsearch"}

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # pytest's cache keeps the wheelhouse between runs; without it (-p no:cacheprovider) the run fills its own.
    cache = getattr(request.config, "cache", None)
    wheelhouse = cache.mkdir("deploy-wheelhouse") if cache is not None else tmp_path / "wheelhouse"
    spec = f"{wheel}[service]"
    offline = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse, spec]
    done = subprocess.run([str(a) for a in offline], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:  # first run, or a dependency moved on: fill the wheelhouse from PyPI
        run(python, "-m", "pip", "wheel", "-q", "--find-links", wheelhouse, "-w", wheelhouse, spec, timeout=600)
        run(*offline)

    # Run outside the checkout, so that only what the venv installed can be imported.
    checked = run(python, "-c", CHECK, tiny_bundle, tmp_path / "data", cwd=tmp_path)
    result = json.loads(checked.stdout.strip().splitlines()[-1])
    assert Path(result["prefix"]) == venv
    assert result["heavy"] == []
    assert len(result["similar"]) == 2 and "a" not in result["similar"]
