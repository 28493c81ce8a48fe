"""What restoring a server's collection snapshot checks before the server is asked anything
(store/remote/snapshot.py): the snapshot's own config.json must fit the bundle, and a file that is not a whole
Qdrant collection snapshot is the user's mistake (InvalidInputError, naming the file), not an outage. The server here
does not answer: a snapshot the check lets through fails as an outage instead, so the error tells which step refused
it. The transfers themselves (download, upload, --overwrite, the API key) are tested against a fake server in
tests/service/test_snapshot_server.py."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from metricsearch.core.errors import InvalidInputError, StoreMismatchError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.process import free_port
from metricsearch.service.store.remote import METADATA_KEY, snapshot
from tests.service.store.conftest import SCHEMA

RECORD = {METADATA_KEY: {"identity": SCHEMA.identity, "sizes": dict(SCHEMA.sizes)}}
FITS = {
    "params": {"vectors": {n: {"size": s, "distance": "Cosine"} for n, s in SCHEMA.sizes.items()}},
    "metadata": RECORD,
}
"""The config.json of a collection the test bundle built, as a server's snapshot holds it (the fields read)."""


def archive(path: Path, members: dict[str, bytes | None]) -> Path:
    """A plain tar of `members` ({name: bytes}; None: a folder)."""
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def settings() -> Settings:
    """A server that does not answer: nothing listens on its port."""
    return Settings(qdrant_url=f"http://127.0.0.1:{free_port()}", qdrant_timeout_s=1)


@pytest.mark.parametrize("name", ["./config.json", "config.json"])
@pytest.mark.parametrize("record", [True, False], ids=["recorded", "no-record"])
def test_a_snapshot_that_fits_the_bundle_goes_to_the_server(settings, tmp_path, name, record):
    config = FITS if record else {"params": FITS["params"]}
    source = archive(
        tmp_path / "items.snapshot", {"./0": None, "./0/segment": b"x" * 100, name: json.dumps(config).encode()}
    )
    with pytest.raises(StoreUnavailableError, match="restore of 'items'"):
        snapshot.restore(settings, SCHEMA, source, overwrite=True)


def test_a_snapshot_of_one_unnamed_vector_is_refused_with_its_sizes(settings, tmp_path):
    """A collection created elsewhere with a single vector: our collections name each of theirs."""
    config = {"params": {"vectors": {"size": 8, "distance": "Cosine"}}}
    source = archive(tmp_path / "items.snapshot", {"./config.json": json.dumps(config).encode()})
    with pytest.raises(StoreMismatchError, match="MS_BUNDLE_DIR") as refused:
        snapshot.restore(settings, SCHEMA, source, overwrite=True)
    assert "{'': 8}" in str(refused.value) and str(source) in str(refused.value)


DAMAGED = {
    "config-not-json": {"./config.json": b"{not json"},
    "config-not-an-object": {"./config.json": b"[1, 2]"},
    "config-without-vectors": {"./config.json": json.dumps({"params": {}}).encode()},
    "sizes-not-numbers": {"./config.json": json.dumps({"params": {"vectors": {"title": {"size": "big"}}}}).encode()},
    "config-a-folder": {"./config.json": None},
    "config-of-a-shard-only": {"./0/config.json": json.dumps(FITS).encode()},
}


@pytest.mark.parametrize("members", DAMAGED.values(), ids=DAMAGED)
def test_what_is_not_a_whole_collection_snapshot_is_refused_as_the_users_mistake(settings, tmp_path, members):
    source = archive(tmp_path / "items.snapshot", members)
    with pytest.raises(InvalidInputError) as refused:
        snapshot.restore(settings, SCHEMA, source, overwrite=True)
    assert str(source) in str(refused.value)


@pytest.mark.parametrize("damage", ["truncated", "gzipped"])
def test_a_truncated_or_compressed_snapshot_is_refused_as_the_users_mistake(settings, tmp_path, damage):
    """A server writes plain tar; a copy cut short, or compressed on its way, is not restored."""
    config = json.dumps(FITS).encode()
    data = archive(tmp_path / "whole.snapshot", {"./config.json": config, "./0/segment": b"x" * 4096}).read_bytes()
    source = tmp_path / "items.snapshot"
    source.write_bytes(data[: 512 + len(config) // 2] if damage == "truncated" else gzip.compress(data))
    with pytest.raises(InvalidInputError, match="not a readable Qdrant collection snapshot") as refused:
        snapshot.restore(settings, SCHEMA, source, overwrite=True)
    assert str(source) in str(refused.value)
