"""The service pods' init container holds the first pod back until every Qdrant node has joined the cluster, so the
collection it creates spreads its shards over all of them. The script is run here as the manifest holds it, against
a small HTTP server that answers /cluster and /collections/{name}/exists in Qdrant's schema (the responses are
built with qdrant-client's own models); no Qdrant server binary can be had here."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from qdrant_client.http import models as m

from tests.deploy.manifests import K8S, pod_spec, render

WAIT = "wait-for-qdrant-peers"


def _init_container(resources: list[dict]) -> dict:
    deployment = next(r for r in resources if (r["kind"], r["metadata"]["name"]) == ("Deployment", "metricsearch"))
    return next(c for c in pod_spec(deployment)["initContainers"] if c["name"] == WAIT)


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_init_container_waits_for_every_statefulset_node(overlay):
    resources = render(K8S / "overlays" / overlay)
    wait = _init_container(resources)
    qdrant = next(r for r in resources if (r["kind"], r["metadata"]["name"]) == ("StatefulSet", "qdrant"))
    peers = {e["name"]: e["value"] for e in wait["env"]}["QDRANT_PEERS"]
    assert int(peers) == qdrant["spec"]["replicas"], "QDRANT_PEERS must follow the Qdrant StatefulSet's replicas"
    sources = {next(iter(s.values()))["name"] for s in wait["envFrom"]}
    assert sources == {"metricsearch-settings", "metricsearch-keys"}, "it needs MS_QDRANT_URL and the Qdrant key"
    assert wait["image"] == f"registry.example.com/metricsearch:{overlay}"
    assert wait["securityContext"]["readOnlyRootFilesystem"] is True
    assert wait["securityContext"]["allowPrivilegeEscalation"] is False


class FakeQdrant(ThreadingHTTPServer):
    """Answers the two calls the script makes; `/cluster` reports the next entry of `peer_counts` each time (the
    last one for ever), and every request is recorded with its api-key header."""

    def __init__(self, peer_counts: list[int], exists: bool = False) -> None:
        self.peer_counts, self.exists = peer_counts, exists
        self.requests: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def cluster(self) -> bytes:
        count = self.peer_counts.pop(0) if len(self.peer_counts) > 1 else self.peer_counts[0]
        status = m.ClusterStatusOneOf1(
            status="enabled",
            peer_id=1,
            peers={str(n + 1): m.PeerInfo(uri=f"http://qdrant-{n}.qdrant-headless:6335/") for n in range(count)},
            raft_info=m.RaftInfo(term=1, commit=count, pending_operations=0, leader=1, role="Leader", is_voter=True),
            consensus_thread_status=m.ConsensusThreadStatusOneOf(
                consensus_thread_status="working", last_update=datetime.now(UTC)
            ),
            message_send_failures={},
        )
        return m.InlineResponse2003(status="ok", time=0.0, result=status).model_dump_json().encode()

    def existence(self) -> bytes:
        existence = m.CollectionExistence(exists=self.exists)
        return m.InlineResponse2009(status="ok", time=0.0, result=existence).model_dump_json().encode()


class _Handler(BaseHTTPRequestHandler):
    server: FakeQdrant

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("api-key")))
        body = {"/cluster": self.server.cluster, "/collections/items/exists": self.server.existence}[self.path]()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def _run_wait(server: FakeQdrant, timeout: float) -> subprocess.CompletedProcess:
    wait = _init_container(render(K8S / "overlays" / "cpu"))
    python, flag, script = wait["command"]
    assert (python, flag) == ("python", "-c")
    env = {
        "MS_QDRANT_URL": f"http://127.0.0.1:{server.server_port}/",
        "MS_QDRANT_API_KEY": "qdrant-key",
        "MS_COLLECTION": "items",
        "QDRANT_PEERS": "3",
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        server.shutdown()
        server.server_close()


def test_waits_until_every_peer_has_joined():
    server = FakeQdrant(peer_counts=[1, 2, 3])
    done = _run_wait(server, timeout=30)
    assert done.returncode == 0, done.stderr
    cluster_calls = [key for path, key in server.requests if path == "/cluster"]
    assert len(cluster_calls) == 3, "it must not go on before the third peer joined"
    assert set(cluster_calls) == {"qdrant-key"}
    assert "1 of 3 Qdrant peers" in done.stdout and "2 of 3 Qdrant peers" in done.stdout


def test_does_not_wait_when_the_collection_exists():
    server = FakeQdrant(peer_counts=[1], exists=True)
    done = _run_wait(server, timeout=30)
    assert done.returncode == 0, done.stderr
    assert [path for path, _ in server.requests] == ["/collections/items/exists"]


def test_keeps_waiting_while_a_peer_is_missing():
    server = FakeQdrant(peer_counts=[2])
    with pytest.raises(subprocess.TimeoutExpired) as waited:
        _run_wait(server, timeout=3)
    output = waited.value.stdout or b""
    assert "2 of 3 Qdrant peers" in (output.decode() if isinstance(output, bytes) else output)
    assert sum(path == "/cluster" for path, _ in server.requests) >= 2
