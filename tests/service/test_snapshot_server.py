"""`metricsearch snapshot create|restore` with MS_QDRANT_URL, against a fake Qdrant server.

No Qdrant server runs on the test machine, so `FakeQdrant` answers the REST calls RemoteStore's snapshots make (the
ones through qdrant-client are parsed by its own response models, so a wrong shape fails) and writes snapshots
as a server does: a plain tar holding the collection's `config.json`. What this cannot show is that a real server
restores its data from an upload: that is Qdrant's part. It does show what is ours: the download is the server's
snapshot and is deleted from the server afterwards, the upload sends that file with the API key, an existing
collection is replaced only with --overwrite, and a snapshot of another bundle's collection (or not a snapshot)
is refused before the server is touched.
"""

from __future__ import annotations

import email.parser
import io
import json
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import InvalidInputError, StoreMismatchError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.engine import vector_schema
from metricsearch.service.process import free_port
from metricsearch.service.snapshot import create, restore
from metricsearch.service.store.remote import METADATA_KEY

API_KEY = "qdrant-key-for-tests"
pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")


def collection_config(sizes: dict[str, int], identity: str | None) -> dict:
    """A collection's config.json as a Qdrant server keeps it (the fields read here)."""
    config: dict = {
        "params": {"vectors": {name: {"size": size, "distance": "Cosine"} for name, size in sizes.items()}},
        "hnsw_config": {"m": 16, "ef_construct": 100},
    }
    if identity is not None:
        config["metadata"] = {METADATA_KEY: {"identity": identity, "sizes": sizes}}
    return config


def server_snapshot(config: dict, points: int) -> bytes:
    """A collection snapshot laid out as a server writes one (`./config.json`, a shard folder), uncompressed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in (("./0/points.json", json.dumps({"points": points})), ("./config.json", json.dumps(config))):
            info = tarfile.TarInfo(name)
            info.size = len(data.encode())
            archive.addfile(info, io.BytesIO(data.encode()))
    return buffer.getvalue()


class FakeQdrant(ThreadingHTTPServer):
    """Collections as {name: (config, point count)}; snapshots on the server as {name: bytes}; every request and
    the API key it carried are recorded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.collections: dict[str, tuple[dict, int]] = {}
        self.snapshots: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.uploads: list[bytes] = []
        self.downloads_break = False
        """Send half of a snapshot, then drop the connection (a network failure midway through the download)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeQdrant

    def log_message(self, *args: object) -> None:
        """Quiet: the test reads `server.requests`."""

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append((method, path, self.headers.get("api-key")))
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("api-key") != API_KEY:
            return self._json(403, {"status": {"error": "Invalid api-key"}, "time": 0})
        collections, snapshots = self.server.collections, self.server.snapshots
        if match := re.fullmatch(r"/collections/(\w+)/exists", path):
            return self._ok({"exists": match[1] in collections})
        if method == "POST" and (match := re.fullmatch(r"/collections/(\w+)/points/count", path)):
            return self._ok({"count": collections[match[1]][1]})
        if method == "POST" and (match := re.fullmatch(r"/collections/(\w+)/snapshots/upload", path)):
            upload = self._multipart_file(body)
            self.server.uploads.append(upload)
            with tarfile.open(fileobj=io.BytesIO(upload)) as archive:
                config = json.loads(archive.extractfile("./config.json").read())
                points = json.loads(archive.extractfile("./0/points.json").read())["points"]
            collections[match[1]] = (config, points)
            return self._ok(True)
        if method == "POST" and (match := re.fullmatch(r"/collections/(\w+)/snapshots", path)):
            config, points = collections[match[1]]
            name = f"{match[1]}-{len(self.server.requests)}.snapshot"
            snapshots[name] = server_snapshot(config, points)
            size = len(snapshots[name])
            return self._ok({"name": name, "creation_time": "2026-11-23T10:00:00", "size": size, "checksum": "0"})
        if match := re.fullmatch(r"/collections/(\w+)/snapshots/([\w.-]+)", path):
            if method == "GET":
                if self.server.downloads_break:
                    return self._half(snapshots[match[2]])
                return self._bytes(snapshots[match[2]])
            del snapshots[match[2]]
            return self._ok(True)
        return self._json(404, {"status": {"error": f"no route {method} {path}"}, "time": 0})

    def _multipart_file(self, body: bytes) -> bytes:
        header = f"Content-Type: {self.headers['content-type']}\r\n\r\n".encode()
        message = email.parser.BytesParser().parsebytes(header + body)
        (part,) = [p for p in message.get_payload() if p.get_param("name", header="content-disposition") == "snapshot"]
        return part.get_payload(decode=True)

    def _ok(self, result: object) -> None:
        self._json(200, {"result": result, "status": "ok", "time": 0.001})

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _bytes(self, data: bytes) -> None:
        self._send(200, data, "application/octet-stream")

    def _half(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.close_connection = True

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def qdrant():
    server = FakeQdrant()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def settings(tiny_bundle, qdrant) -> Settings:
    return Settings(bundle_dir=tiny_bundle, qdrant_url=qdrant.url, qdrant_api_key=API_KEY)


@pytest.fixture
def ours(tiny_bundle) -> dict:
    """The config.json of a collection built by the tiny bundle."""
    schema = vector_schema(load_bundle(tiny_bundle))
    return collection_config(dict(schema.sizes), schema.identity)


def test_create_downloads_the_server_snapshot_and_deletes_it_there(qdrant, settings, ours, tmp_path):
    qdrant.collections["items"] = (ours, 42)
    report = create(settings, tmp_path / "backup" / "items.snapshot")
    assert report.items == 42 and report.bytes == report.path.stat().st_size
    assert report.path.read_bytes() == server_snapshot(ours, 42)
    assert qdrant.snapshots == {}, "the snapshot must not be left on the server"
    assert all(key == API_KEY for *_, key in qdrant.requests), qdrant.requests  # the download carried it too
    assert any(method == "GET" and "/snapshots/" in path for method, path, _ in qdrant.requests)
    with pytest.raises(InvalidInputError, match="exists"):
        create(settings, report.path)


def test_a_download_failing_midway_leaves_no_file_under_the_snapshots_name(qdrant, settings, ours, tmp_path):
    qdrant.collections["items"] = (ours, 42)
    qdrant.downloads_break = True
    target = tmp_path / "backup" / "items.snapshot"
    with pytest.raises(StoreUnavailableError, match="snapshot of 'items'"):
        create(settings, target)
    assert list(target.parent.iterdir()) == [], "neither the snapshot's name nor a partial file is left"
    assert qdrant.snapshots == {}, "the snapshot must not be left on the server"
    qdrant.downloads_break = False
    assert create(settings, target).path.read_bytes() == server_snapshot(ours, 42)  # a retry writes it whole


def test_restore_uploads_and_replaces_only_with_overwrite(qdrant, settings, ours, tmp_path):
    source = tmp_path / "items.snapshot"
    source.write_bytes(server_snapshot(ours, 7))
    report = restore(settings, source)  # no collection yet
    assert report.items == 7 and qdrant.uploads == [source.read_bytes()]
    assert qdrant.collections["items"] == (ours, 7)

    qdrant.collections["items"] = (ours, 99)
    with pytest.raises(InvalidInputError, match="--overwrite"):
        restore(settings, source)
    assert qdrant.collections["items"] == (ours, 99) and len(qdrant.uploads) == 1
    assert restore(settings, source, overwrite=True).items == 7
    assert len(qdrant.uploads) == 2


def test_restore_of_a_collection_that_records_no_bundle_but_fits(qdrant, settings, tiny_bundle, tmp_path):
    """As the service itself does with such a collection (service/store/remote.py)."""
    sizes = dict(vector_schema(load_bundle(tiny_bundle)).sizes)
    source = tmp_path / "items.snapshot"
    source.write_bytes(server_snapshot(collection_config(sizes, None), 3))
    assert restore(settings, source).items == 3


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (lambda sizes: collection_config(sizes, "other-bert@1"), "other-bert@1"),
        (lambda sizes: collection_config({name: size * 2 for name, size in sizes.items()}, None), "(none recorded)"),
    ],
    ids=["other-bundle", "no-record-other-sizes"],
)
def test_restore_of_another_bundles_snapshot_is_refused_before_the_server_changes(
    qdrant, settings, ours, tiny_bundle, tmp_path, config, needle
):
    qdrant.collections["items"] = (ours, 5)
    source = tmp_path / "items.snapshot"
    source.write_bytes(server_snapshot(config(dict(vector_schema(load_bundle(tiny_bundle)).sizes)), 1))
    with pytest.raises(StoreMismatchError, match="MS_BUNDLE_DIR") as error:
        restore(settings, source, overwrite=True)
    assert needle in str(error.value)
    # Reads only (which bundle built the served collection, service/rollout.py): nothing on the server changed.
    assert {method for method, *_ in qdrant.requests} <= {"GET"} and qdrant.collections["items"] == (ours, 5)


def test_restore_of_what_is_not_a_server_snapshot_is_refused(qdrant, settings, tmp_path):
    junk = tmp_path / "junk.snapshot"
    junk.write_bytes(b"not a tar")
    with pytest.raises(InvalidInputError, match="not a readable Qdrant collection snapshot"):
        restore(settings, junk, overwrite=True)
    embedded = tmp_path / "embedded.tar"
    with tarfile.open(embedded, "w") as archive:
        archive.add(Path(__file__), arcname="store.json")
    with pytest.raises(InvalidInputError, match=r"holds no config\.json"):
        restore(settings, embedded, overwrite=True)
    assert {method for method, *_ in qdrant.requests} <= {"GET"}  # reads only: which bundle built the collection


def test_server_down_is_a_clear_error(tiny_bundle, tmp_path, ours):
    settings = Settings(bundle_dir=tiny_bundle, qdrant_url=f"http://127.0.0.1:{free_port()}", qdrant_api_key=API_KEY)
    with pytest.raises(StoreUnavailableError, match="snapshot of 'items'"):
        create(settings, tmp_path / "items.snapshot")
    assert not (tmp_path / "items.snapshot").exists()
    source = tmp_path / "ours.snapshot"
    source.write_bytes(server_snapshot(ours, 1))
    with pytest.raises(StoreUnavailableError, match="restore of 'items'"):
        restore(settings, source, overwrite=True)
