"""`metricsearch snapshot create|restore` on the embedded store: a snapshot restored into a fresh data dir answers
the same /similar results, and neither command touches a store a running service holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metricsearch.service.process import ServiceProcess

ITEMS = [
    {"id": f"s{n}", "title": f"{word} item {n}", "description": f"a {word} thing, number {n}", "metadata": {"n": n}}
    for n, word in enumerate(["red shirt", "blue kettle", "green tea", "leather boots", "wool scarf", "desk fan"] * 5)
]
QUERIES = [{"id": "s0", "k": 5}, {"id": "s7", "k": 5, "filter": {"n": {"gte": 3}}}, {"text": "green tea", "k": 5}]


def snapshot(*args: str, bundle: Path, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MS_BUNDLE_DIR": str(bundle), "MS_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "snapshot", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def answers(service: ServiceProcess) -> list:
    with service.client() as client:
        results = [client.post("/similar", json=q).json()["results"] for q in QUERIES]
        return [client.get("/readyz").json()["items"], [[(r["id"], r["score"]) for r in res] for res in results]]


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_snapshot_restores_into_a_fresh_data_dir_with_the_same_answers(tiny_bundle, tmp_path):
    source, fresh, archive = tmp_path / "source", tmp_path / "fresh", tmp_path / "backup" / "items.tar.gz"
    service = ServiceProcess(tiny_bundle, source, {})
    service.start()
    try:
        with service.client() as client:
            assert client.post("/index", json={"items": ITEMS}).status_code == 200
        expected = answers(service)
        busy = snapshot("create", str(archive), bundle=tiny_bundle, data_dir=source)
        assert busy.returncode == 1 and "already open" in busy.stderr, busy.stderr
        assert not archive.exists()
        assert answers(service) == expected  # the refused snapshot left the running service alone
    finally:
        service.stop()

    made = snapshot("create", str(archive), bundle=tiny_bundle, data_dir=source)
    assert made.returncode == 0, made.stderr
    assert f"snapshot of {len(ITEMS)} items" in made.stdout
    again = snapshot("create", str(archive), bundle=tiny_bundle, data_dir=source)
    assert again.returncode == 1 and "exists" in again.stderr

    restored = snapshot("restore", str(archive), bundle=tiny_bundle, data_dir=fresh)
    assert restored.returncode == 0, restored.stderr
    # Sparse files stay sparse: the restored store takes about the disk space of the original.
    assert disk_bytes(fresh) < 2 * disk_bytes(source) + (1 << 20)

    service = ServiceProcess(tiny_bundle, fresh, {})
    service.start()
    try:
        assert answers(service) == expected
        with service.client() as client:
            assert client.get("/items/s3").json()["metadata"] == {"n": 3}
        held = snapshot("restore", str(archive), "--overwrite", bundle=tiny_bundle, data_dir=fresh)
        assert held.returncode == 1 and "stop the service" in held.stderr, held.stderr
        assert answers(service) == expected
    finally:
        service.stop()
    refused = snapshot("restore", str(archive), bundle=tiny_bundle, data_dir=fresh)
    assert refused.returncode == 1 and "--overwrite" in refused.stderr
    assert snapshot("restore", str(archive), "--overwrite", bundle=tiny_bundle, data_dir=fresh).returncode == 0


@pytest.mark.slow
def test_snapshot_of_another_bundle_or_not_a_snapshot_is_refused(tiny_bundle, tmp_path):
    other = Path(shutil.copytree(tiny_bundle, tmp_path / "other"))
    manifest = json.loads((other / "bundle.json").read_text())
    (other / "bundle.json").write_text(json.dumps(manifest | {"name": "other-bert"}))
    archive = tmp_path / "items.tar.gz"
    assert snapshot("create", str(archive), bundle=other, data_dir=tmp_path / "a").returncode == 0
    mismatch = snapshot("restore", str(archive), bundle=tiny_bundle, data_dir=tmp_path / "b")
    assert mismatch.returncode == 1 and "other-bert" in mismatch.stderr and "MS_BUNDLE_DIR" in mismatch.stderr
    assert not (tmp_path / "b" / "items").exists()
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    broken = snapshot("restore", str(junk), bundle=tiny_bundle, data_dir=tmp_path / "b")
    assert broken.returncode == 1 and "not a readable snapshot" in broken.stderr
