"""The `cpu` image, built and run on a real Docker engine: what a platform team relies on when it deploys it.

The engine is the repository's own (docker/engine.sh: Debian's docker.io, its state under var/docker/); the image
is built offline by docker/build.sh, or reused when one from the same inputs exists. Containers use the host's
network on random free 127.0.0.1 ports, each has a unique name, and each test removes the containers and volumes it
made (and no other). Skipped, with the reason, only where no engine can be started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metricsearch.service.process import ServiceProcess, free_port, wait_ready
from metricsearch.service.store.edge.writes import MIN_FREE_BYTES
from tests.deploy.manifests import ROOT

# A first build (the base image, the wheelhouse, the venv) takes minutes: more than the suite's 300 s per test.
pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

DOCKER = "/usr/bin/docker"
BUNDLE = ROOT / "bundles" / "all-minilm-l6-v2"
KEY = "container-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
STOP_GRACE_S = 20


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout, env=ENGINE_ENV)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


ENGINE_ENV: dict[str, str] = {}


@pytest.fixture(scope="module")
def image() -> str:
    """The cpu image's name: the engine started (skip if it cannot be), the image built or reused."""
    if not Path(DOCKER).exists() or shutil.which("dockerd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("no Docker engine here (/usr/bin/docker, dockerd): `docker/engine.sh install` installs docker.io")
    started = subprocess.run([str(ROOT / "docker" / "engine.sh"), "start"], capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        pytest.skip(f"the Docker engine does not start here: {started.stderr.strip()[-1000:]}")
    host = subprocess.run(
        [str(ROOT / "docker" / "engine.sh"), "host"], capture_output=True, text=True, check=True
    ).stdout.strip()
    ENGINE_ENV.update({**os.environ, "DOCKER_HOST": host})
    if not (BUNDLE / "bundle.json").exists():
        pytest.skip(f"no bundle at {BUNDLE.relative_to(ROOT)} to bake in: run `make bundle`")
    built = subprocess.run(
        [str(ROOT / "docker" / "build.sh")], capture_output=True, text=True, timeout=1800, env=ENGINE_ENV
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return built.stdout.split()[0]


class Containers:
    """Runs containers of the image on the host's network and removes them, with their volumes, at the end."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.names: list[str] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"ms-test-{uuid.uuid4().hex[:10]}"
        docker("volume", "create", name)
        self.volumes.append(name)
        return name

    def run(self, *options: str, env: dict[str, str] | None = None) -> Container:
        port = free_port()
        name = f"ms-test-{uuid.uuid4().hex[:10]}"
        environment = {"MS_PORT": str(port), "MS_HOST": "127.0.0.1", "MS_API_KEY": KEY, **(env or {})}
        flags = [f"--env={k}={v}" for k, v in environment.items()]
        docker(
            "run",
            "--detach",
            f"--name={name}",
            "--network=host",
            "--read-only",
            "--tmpfs=/tmp",
            *flags,
            *options,
            self.image,
        )
        self.names.append(name)
        return Container(name, port)

    def remove_all(self) -> None:
        for name in self.names:
            docker("rm", "--force", "--volumes", name, check=False)
        for volume in self.volumes:
            docker("volume", "rm", "--force", volume, check=False)


class Container:
    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def inspect(self) -> dict:
        return json.loads(docker("inspect", self.name).stdout)[0]

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return (done.stdout + done.stderr)[-6000:]

    def wait(self, path: str = "/readyz", timeout_s: float = 90) -> float:
        """Seconds until `path` answers 200; fails with the container's log when it does not."""
        return wait_ready(f"{self.url}{path}", exited=self.stopped, log=self.logs, timeout_s=timeout_s)

    def stopped(self) -> str | None:
        return None if self.inspect()["State"]["Running"] else f"{self.name} exited"

    def exited(self, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.inspect()["State"]
            if not state["Running"]:
                return state
            time.sleep(0.2)
        raise AssertionError(f"{self.name} still running after {timeout_s} s")


@pytest.fixture
def containers(image: str) -> Iterator[Containers]:
    made = Containers(image)
    yield made
    made.remove_all()


def items(prefix: str, n: int, description: str = "") -> list[dict]:
    return [
        {"id": f"{prefix}-{i}", "title": f"{prefix} item {i} cotton shirt", "description": description}
        for i in range(n)
    ]


def count(container: Container) -> int:
    """Items in the store (distinct ids: /index upserts by id)."""
    with container.client() as client:
        return client.get("/readyz").json()["items"]


def test_starts_read_only_as_non_root_with_a_volume_and_turns_healthy(containers):
    container = containers.run(f"--volume={containers.volume()}:/data", "--health-interval=1s")
    container.wait()
    config = container.inspect()
    assert config["HostConfig"]["ReadonlyRootfs"] is True
    assert "/tmp" in config["HostConfig"]["Tmpfs"]
    assert [m["Destination"] for m in config["Mounts"]] == ["/data"]
    assert docker("exec", container.name, "id", "-u").stdout.strip() == "10001"
    refused = docker("exec", container.name, "touch", "/opt/venv/x", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    deadline = time.monotonic() + 30
    while container.inspect()["State"]["Health"]["Status"] != "healthy":
        assert time.monotonic() < deadline, container.inspect()["State"]["Health"]
        time.sleep(0.5)
    # Only the service: no torch, no offline parts of metricsearch in the image.
    heavy = "('torch', 'sentence_transformers', 'transformers', 'metricsearch.trainer')"
    check = f"import importlib.util as u; print([m for m in {heavy} if u.find_spec(m)])"
    assert docker("exec", container.name, "python", "-c", check).stdout.strip() == "[]"


def test_index_then_similar_through_the_port_with_the_baked_bundle(containers):
    container = containers.run(f"--volume={containers.volume()}:/data")
    container.wait()
    with container.client() as client:
        indexed = client.post("/index", json={"items": items("shirt", 3)}, headers=AUTH)
        assert indexed.status_code == 200 and indexed.json()["indexed"] == 3, indexed.text
        similar = client.post("/similar", json={"id": "shirt-0", "k": 2})
        assert similar.status_code == 200, similar.text
        assert {r["id"] for r in similar.json()["results"]} == {"shirt-1", "shirt-2"}
        model = client.get("/model").json()
    baked = json.loads((BUNDLE / "bundle.json").read_text())
    assert model["name"] == baked["name"] == similar.json()["model"]


def write_until_stopped(url: str, prefix: str, acknowledged: list[str], stop: threading.Event) -> None:
    """Posts 5 new items at a time; records the ids of each write the service acknowledged (a 200)."""
    batch = 0
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            chunk = [{"id": f"{prefix}-{batch}-{i}", "title": f"kettle {batch} {i}"} for i in range(5)]
            try:
                response = client.post("/index", json={"items": chunk}, headers=AUTH)
            except httpx.HTTPError:
                return  # the container is gone: this write was never acknowledged
            if response.status_code == 200:
                acknowledged.extend(item["id"] for item in chunk)
            batch += 1


# make test tries twice; CONTAINER_KILL_TRIES=5 for the 5-of-5 run docs/deploy.md reports.
@pytest.mark.parametrize("attempt", range(int(os.environ.get("CONTAINER_KILL_TRIES", "2"))))
def test_kill_9_during_acknowledged_writes_then_restart_loses_none(containers, attempt):
    volume = containers.volume()
    first = containers.run(f"--volume={volume}:/data")
    first.wait()
    acknowledged: list[str] = []
    stop = threading.Event()
    writer = threading.Thread(target=write_until_stopped, args=(first.url, "k", acknowledged, stop))
    writer.start()
    time.sleep(4 + attempt % 3)
    docker("kill", "--signal=KILL", first.name)
    stop.set()
    writer.join(timeout=30)
    assert len(acknowledged) > 50, "too few writes to prove anything"
    assert first.exited()["ExitCode"] == 137

    second = containers.run(f"--volume={volume}:/data")
    second.wait()
    with second.client() as client:
        stored = count(second)
        # Every acknowledged write is back; at most the one batch in flight at the kill is there too, and no id twice
        # (the count is of distinct ids: /index upserts by id).
        assert len(acknowledged) <= stored <= len(acknowledged) + 5, (stored, len(acknowledged))
        for item_id in (acknowledged[0], acknowledged[len(acknowledged) // 2], acknowledged[-1]):
            assert client.get(f"/items/{item_id}").status_code == 200, item_id


def test_docker_stop_answers_the_requests_in_flight_and_exits_cleanly(containers):
    container = containers.run(f"--volume={containers.volume()}:/data", f"--stop-timeout={STOP_GRACE_S}")
    container.wait()
    with container.client() as client:
        assert client.post("/index", json={"items": items("lamp", 20)}, headers=AUTH).status_code == 200
    statuses: list[int] = []
    refused: list[str] = []

    def query() -> None:
        with container.client() as client:
            for i in range(200):
                try:
                    statuses.append(client.post("/similar", json={"text": f"portable lamp {i}", "k": 5}).status_code)
                except httpx.HTTPError as e:  # after the listener closed: not in flight, so not answered
                    refused.append(type(e).__name__)
                    return

    clients = [threading.Thread(target=query) for _ in range(4)]
    for thread in clients:
        thread.start()
    time.sleep(1.5)
    start = time.monotonic()
    docker("stop", container.name, timeout=STOP_GRACE_S + 30)
    took = time.monotonic() - start
    for thread in clients:
        thread.join(timeout=30)
    state = container.exited()
    assert took < STOP_GRACE_S, f"docker stop took {took:.1f} s: the service did not end on SIGTERM"
    assert state["ExitCode"] == 0 and not state["OOMKilled"], (state, container.logs())
    assert statuses and set(statuses) == {200}, statuses
    # The same volume opens again at once: the store was closed, its lock released.
    again = containers.run(f"--volume={container.inspect()['Mounts'][0]['Name']}:/data")
    again.wait()
    assert count(again) == 20


def test_a_second_container_on_the_same_volume_is_refused_with_a_clear_message(containers):
    volume = containers.volume()
    first = containers.run(f"--volume={volume}:/data")
    first.wait()
    second = containers.run(f"--volume={volume}:/data")
    state = second.exited()
    assert state["ExitCode"] != 0
    assert "already open" in second.logs() and "MS_QDRANT_URL" in second.logs(), second.logs()
    assert httpx.get(f"{first.url}/readyz").status_code == 200


def test_with_an_unreachable_qdrant_it_starts_live_and_says_why_it_is_not_ready(containers):
    nowhere = f"http://127.0.0.1:{free_port()}"
    container = containers.run(env={"MS_QDRANT_URL": nowhere})
    container.wait("/livez")
    ready = httpx.get(f"{container.url}/readyz", timeout=30)
    assert ready.status_code == 503
    assert f"127.0.0.1:{nowhere.rsplit(':', 1)[1]}" in ready.json()["detail"], ready.text


def test_a_full_disk_keeps_every_acknowledged_write_refuses_clearly_and_recovers(containers):
    """The store on a 64 MB tmpfs, filled by a ballast file until a few MiB more than a write needs free are left
    (MIN_FREE_BYTES: the store refuses writes below it, since a WAL page the disk cannot back kills the process with
    SIGBUS), so that freeing space is deleting the ballast. No restart is needed to write again. (Docker 20.10
    ignores `tmpfs-mode` in `--mount type=tmpfs`, which leaves /data to root: --tmpfs sets its owner.)"""
    container = containers.run("--tmpfs=/data:size=64m,uid=10001,gid=10001")
    container.wait()
    free_kib = int(docker("exec", container.name, "df", "-k", "/data").stdout.splitlines()[1].split()[3])
    ballast = free_kib * 1024 - MIN_FREE_BYTES - 4 * 2**20
    docker("exec", container.name, "sh", "-c", f"head -c {ballast} /dev/zero > /data/ballast")
    acknowledged: list[str] = []
    refusal = None
    with container.client() as client:
        for batch in range(200):
            chunk = items(f"full-{batch}", 20, "heavy duty stainless steel")
            try:
                response = client.post("/index", json={"items": chunk}, headers=AUTH)
            except httpx.HTTPError as e:
                state = container.inspect()["State"]
                pytest.fail(
                    f"no answer to a write on a full disk ({e!r}); the container: {state['Status']}, "
                    f"exit code {state['ExitCode']}"
                )
            if response.status_code != 200:
                refusal = response
                break
            acknowledged.extend(item["id"] for item in chunk)
        assert refusal is not None, "the disk never filled"
        assert refusal.status_code != 500 and 400 <= refusal.status_code < 600, refusal.text
        assert "space" in refusal.json()["detail"].lower(), refusal.text
        # Reads keep answering while the disk is full, and every acknowledged write is there.
        assert client.post("/similar", json={"id": acknowledged[0], "k": 3}).status_code == 200
        assert client.get(f"/items/{acknowledged[-1]}").status_code == 200
        assert count(container) == len(acknowledged)

        docker("exec", container.name, "rm", "/data/ballast")
        again = client.post("/index", json={"items": items("after", 5)}, headers=AUTH)
        assert again.status_code == 200, again.text
        assert count(container) == len(acknowledged) + 5


BAD_REQUESTS = [
    ("POST", "/similar", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
    ("POST", "/similar", {"json": {"id": "x", "k": 0}}),
    ("POST", "/similar", {"json": {"id": "no-such-item", "k": 3}}),
    ("POST", "/similar", {"content": b"id=x", "headers": {"Content-Type": "text/plain"}}),
    ("POST", "/index", {"json": {"items": [{"id": "a", "title": "x"}]}}),
    ("POST", "/index", {"json": {"items": [{"id": "a", "title": "x"}]}, "headers": {"Authorization": "Bearer wrong"}}),
    ("GET", "/no-such-route", {}),
    ("DELETE", "/similar", {}),
]


def test_bad_requests_get_the_same_4xx_through_the_container_as_on_the_host(containers, tmp_path):
    container = containers.run(f"--volume={containers.volume()}:/data")
    host = ServiceProcess(BUNDLE, tmp_path / "data", {"MS_API_KEY": KEY})
    host.start()
    try:
        container.wait()
        answers = {}
        for url in (container.url, host.url):
            with httpx.Client(base_url=url, timeout=30) as client:
                answers[url] = [
                    (r.status_code, r.json().get("code"))
                    for method, path, options in BAD_REQUESTS
                    for r in [client.request(method, path, **options)]
                ]
    finally:
        host.stop()
    assert answers[container.url] == answers[host.url]
    assert all(400 <= status < 500 for status, _ in answers[container.url]), answers[container.url]
