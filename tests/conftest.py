"""Session fixtures: a tiny BERT bundle built from a config (fast), the real packaged model's bundle (slow
tests only), and services run as real subprocesses on 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metricsearch.service.process import ServiceProcess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory) -> Path:
    from metricsearch.export.onnx_export import export_bundle
    from tests.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("tiny")
    model = build_tiny_model(root / "model")
    return export_bundle(model, root / "bundle", name="tiny-bert")


@pytest.fixture(scope="session")
def real_bundle(tmp_path_factory) -> Path:
    from metricsearch.export.onnx_export import export_bundle

    return export_bundle(None, tmp_path_factory.mktemp("real") / "bundle", int8=False)  # int8: tests/export


@pytest.fixture
def start_service(tmp_path):
    """Start services (subprocesses) and stop them all at the end of the test."""
    started: list[ServiceProcess] = []

    def start(bundle: Path, data_dir: Path | None = None, **env: str) -> ServiceProcess:
        service = ServiceProcess(bundle, data_dir or tmp_path / "data", env)
        service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
