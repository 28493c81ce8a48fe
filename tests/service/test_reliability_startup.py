"""Start-up faults: `metricsearch serve` on a bad bundle or data dir exits soon with one clear line saying what to
fix, never a traceback and never a hang."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metricsearch.service.process import ServiceProcess, free_port

PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2  # <linux/prctl.h>, <linux/capability.h>


def held_to_file_permissions() -> None:
    """Run in the child before exec: root without CAP_DAC_OVERRIDE (dropped from the bounding set, so the exec'd
    process never gains it) is held to file permissions like any other user. CI runs the tests as root."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def serve(bundle: Path, data_dir: Path, timeout_s: float = 60, as_user: bool = False) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MS_BUNDLE_DIR": str(bundle),
        "MS_DATA_DIR": str(data_dir),
        "MS_PORT": str(free_port()),
        "MS_INTRA_OP_THREADS": "1",
    }
    # A hang would raise TimeoutExpired here and fail the test.
    return subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=held_to_file_permissions if as_user and os.geteuid() == 0 else None,
    )


def assert_refused(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error, result.stderr
    for fragment in fragments:
        assert fragment in error[0], error[0]


@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_bundle, tmp_path / "bundle"))


def test_missing_bundle(tmp_path):
    assert_refused(serve(tmp_path / "nowhere", tmp_path / "data"), "no bundle.json", "metricsearch export")


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("bundle.json", b"{not json", "is not readable JSON"),
        ("bundle.json", b'{"schema_version": 1, "name": "x"}', "is invalid"),
        ("encoder.onnx", b"\x08\x07garbage", "cannot be loaded by ONNX Runtime"),
        ("tokenizer.json", b"[1, 2", "is not a tokenizer file"),
    ],
    ids=["manifest-not-json", "manifest-invalid", "encoder-corrupt", "tokenizer-corrupt"],
)
def test_corrupt_bundle(bundle_copy, tmp_path, file, content, message):
    target = bundle_copy / json.loads((bundle_copy / "bundle.json").read_text())["encoder"]["file"]
    (target if file == "encoder.onnx" else bundle_copy / file).write_bytes(content)
    assert_refused(serve(bundle_copy, tmp_path / "data"), message)


def test_data_dir_that_cannot_be_written(tiny_bundle, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_refused(serve(tiny_bundle, blocker / "data"), "MS_DATA_DIR", "cannot use")


@pytest.mark.parametrize("where", ["data-dir", "store-folder"])
def test_a_file_where_a_folder_must_be(tiny_bundle, tmp_path, where):
    data = tmp_path / "data"
    if where == "data-dir":
        data.write_text("not a folder")
    else:
        data.mkdir()
        (data / "items").write_text("not a folder")
    assert_refused(serve(tiny_bundle, data), "MS_DATA_DIR")


def test_read_only_data_dir(tiny_bundle, tmp_path):
    data = tmp_path / "ro"
    data.mkdir()
    data.chmod(0o500)
    try:
        assert_refused(serve(tiny_bundle, data, as_user=True), "MS_DATA_DIR")
    finally:
        data.chmod(0o700)
    assert not any(data.iterdir())


def test_damaged_store_record(tiny_bundle, tmp_path):
    store = tmp_path / "data" / "items"
    store.mkdir(parents=True)
    (store / "store.json").write_text("{")
    assert_refused(serve(tiny_bundle, tmp_path / "data"), "store.json is damaged", "snapshot restore")


@pytest.mark.slow
def test_store_built_by_another_bundle_and_store_in_use(tiny_bundle, bundle_copy, tmp_path):
    manifest = json.loads((bundle_copy / "bundle.json").read_text())
    manifest["name"] = "other-bert"
    (bundle_copy / "bundle.json").write_text(json.dumps(manifest))
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start()
    try:
        with service.client() as client:
            assert client.post("/index", json={"items": [{"id": "a", "title": "kept"}]}).status_code == 200
        assert_refused(serve(tiny_bundle, tmp_path / "data"), "already open", "MS_QDRANT_URL")
    finally:
        service.stop()
    assert_refused(serve(bundle_copy, tmp_path / "data"), "tiny-bert", "other-bert", "MS_DATA_DIR")
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start()  # neither refusal touched the store
    try:
        with service.client() as client:
            assert client.get("/items/a").json()["title"] == "kept"
    finally:
        service.stop()
