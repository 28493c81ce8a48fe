"""The storefront mix against the deployed container and against the host service, in one run: BENCHMARKS.md's
"Container vs host" section (p50, p99, requests/s, failures per side, the image's size, the time from `docker run`
to ready).

    .venv/bin/python -m loadtests.container_compare [--users 8] [--duration 45s]

Needs `make image` (the `cpu` and `loadtest` images on the repository's engine, docker/engine.sh). Each side runs
alone on a fresh store, on the same bundle and settings: the container (`metricsearch:cpu`, read-only, host network)
and `metricsearch serve` on the host as `make serve` runs it. The same `loadtest` container drives both, so the
client is the same; Locust runs headless and bounded (--duration plus a 10 s stop timeout)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from bench.report import table, write_section

ROOT = Path(__file__).resolve().parents[1]
DOCKER = "/usr/bin/docker"
TITLE = "Container vs host: the storefront mix through the deployed image"
SETTINGS = {"MS_INTRA_OP_THREADS": "1", "MALLOC_ARENA_MAX": "2"}


def docker(*args: str, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout_s: float = 120) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url}/readyz not 200 after {timeout_s} s")


def locust(url: str, args: argparse.Namespace, reports: Path, name: str, env: dict[str, str]) -> dict[str, float]:
    """Run the loadtest image at `url`; the aggregated row of its stats."""
    docker(
        "run", "--rm", "--network=host", "--read-only", "--tmpfs=/tmp", f"--volume={reports}:/reports",
        f"--name=ms-compare-locust-{uuid.uuid4().hex[:8]}", args.loadtest_image,
        f"--host={url}", f"--users={args.users}", f"--spawn-rate={args.users}", f"--run-time={args.duration}",
        "--stop-timeout=10", f"--csv=/reports/{name}", "--only-summary",
        env=env,
    )  # fmt: skip
    with (reports / f"{name}_stats.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    return {
        "p50": float(row["50%"]),
        "p99": float(row["99%"]),
        "rps": float(row["Requests/s"]),
        "requests": int(row["Request Count"]),
        "failures": int(row["Failure Count"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8, help="Locust users (requests in flight) per side")
    parser.add_argument("--duration", default="45s", help="Locust run time per side, e.g. 45s or 2m")
    parser.add_argument("--image", default="metricsearch:cpu", help="the service image (make image builds it)")
    parser.add_argument("--loadtest-image", default="metricsearch:loadtest", help="the Locust image")
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "all-minilm-l6-v2", help="the host's bundle")
    args = parser.parse_args()
    host_of_engine = subprocess.run(
        [str(ROOT / "docker" / "engine.sh"), "host"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "DOCKER_HOST": host_of_engine}
    image_bytes = int(docker("image", "inspect", "--format", "{{.Size}}", args.image, env=env))
    baked = docker("run", "--rm", "--network=none", "--entrypoint=cat", args.image, "/bundle/bundle.json", env=env)
    assert json.loads(baked)["name"] == json.loads((args.bundle / "bundle.json").read_text())["name"]

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="container-compare-") as scratch:
        reports = Path(scratch) / "reports"
        reports.mkdir()
        os.chown(reports, 10001, 10001)  # the loadtest image's user writes its CSV there

        port = free_port()
        name = f"ms-compare-{uuid.uuid4().hex[:8]}"
        flags = [f"--env={k}={v}" for k, v in {**SETTINGS, "MS_PORT": str(port), "MS_HOST": "127.0.0.1"}.items()]
        start = time.monotonic()
        docker("run", "--detach", f"--name={name}", "--network=host", "--read-only", "--tmpfs=/tmp", *flags,
               args.image, env=env)  # fmt: skip
        try:
            wait_ready(f"http://127.0.0.1:{port}")
            run_to_ready = time.monotonic() - start
            results["container"] = locust(f"http://127.0.0.1:{port}", args, reports, "container", env)
        finally:
            subprocess.run([DOCKER, "rm", "--force", "--volumes", name], capture_output=True, env=env, check=False)

        # `make serve`'s command; this part imports none of metricsearch: it runs it.
        port = free_port()
        environment = {**os.environ, **SETTINGS, "MS_PORT": str(port), "MS_HOST": "127.0.0.1",
                       "MS_BUNDLE_DIR": str(args.bundle), "MS_DATA_DIR": str(Path(scratch) / "data")}  # fmt: skip
        with (Path(scratch) / "host.log").open("w") as log:
            host = subprocess.Popen([str(Path(sys.executable).parent / "metricsearch"), "serve"], env=environment,
                                    stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
            try:
                host_to_ready = wait_ready(f"http://127.0.0.1:{port}")
                results["host"] = locust(f"http://127.0.0.1:{port}", args, reports, "host", env)
            finally:
                host.terminate()
                host.wait(timeout=30)

    rows = [[side, r["p50"], r["p99"], round(r["rps"], 1), r["requests"], r["failures"]] for side, r in results.items()]
    body = "\n\n".join(
        [
            f"The Locust storefront mix (loadtests/locustfile.py: 90% `/similar` by id, 8% by text, 2% `/index`; 500 "
            f"seeded items) from the `loadtest` image, {args.users} users for {args.duration} per side, one side at a "
            f"time on a fresh store: the `cpu` image run read-only with `--network host`, and `metricsearch serve` on "
            f"the host as `make serve` runs it (both with {', '.join(f'{k}={v}' for k, v in SETTINGS.items())}).",
            table(["side", "p50 ms", "p99 ms", "req/s", "requests", "failures"], rows),
            f"Image `{args.image}`: {image_bytes / 1e6:.0f} MB. From `docker run` to `/readyz` 200: "
            f"{run_to_ready:.1f} s (the host service from its start: {host_to_ready:.1f} s).",
            "Command: `.venv/bin/python -m loadtests.container_compare "
            f"--users {args.users} --duration {args.duration}` (after `make image`).",
        ]
    )
    write_section(ROOT / "BENCHMARKS.md", TITLE, body)
    print(body)


if __name__ == "__main__":
    main()
