"""`metricsearch snapshot` refuses what it must not do with exit code 1 and a message naming the path (its round trip
through the stores: tests/service/test_snapshot.py)."""

from __future__ import annotations


def test_a_missing_archive_or_an_existing_target_is_refused(run_cli, tiny_bundle, tmp_path):
    missing = run_cli("snapshot", "restore", tmp_path / "none.tar.gz", "--bundle", tiny_bundle, "--data-dir", tmp_path)
    assert missing.returncode == 1 and f"no snapshot at {tmp_path / 'none.tar.gz'}" in missing.stderr
    taken = tmp_path / "taken.tar.gz"
    taken.write_bytes(b"")
    refused = run_cli("snapshot", "create", taken, "--bundle", tiny_bundle, "--data-dir", tmp_path / "data")
    assert refused.returncode == 1 and "exists: choose a new path" in refused.stderr
    assert not (tmp_path / "data").exists()
