"""The service as a real subprocess (`metricsearch serve`) on a free 127.0.0.1 port, and the wait until a server
started as one answers (the benchmarks' peers and the container tests wait the same way)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def wait_ready(
    url: str,
    *,
    exited: Callable[[], str | None],
    log: Callable[[], str],
    timeout_s: float,
    body: dict | None = None,
) -> float:
    """Seconds until `url` answers 200: a GET, or a POST of `body` for a server ready only once it answers a query.
    `exited()` says why the server stopped, or None while it runs. Its stop, or `timeout_s` passing, is a RuntimeError
    ending with `log()`, so a failed start says why."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if (why := exited()) is not None:
            raise RuntimeError(f"{why}: {log()}")
        try:
            answer = httpx.get(url, timeout=5) if body is None else httpx.post(url, json=body, timeout=5)
            if answer.status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not 200 after {timeout_s:.0f} s: {log()}")


def exit_of(process: subprocess.Popen, name: str) -> Callable[[], str | None]:
    """`wait_ready`'s `exited` for a subprocess."""
    return lambda: None if process.poll() is None else f"{name} exited with {process.returncode}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, bundle: Path, data_dir: Path, env: dict[str, str]) -> None:
        self.bundle = bundle
        self.data_dir = data_dir
        self.env = env
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"service-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, headers=headers)

    def start(self, timeout_s: float = 90, until: str = "/readyz") -> None:
        """Start and wait until `until` answers 200 (`/healthz` for a service expected to start unready)."""
        env = {
            **os.environ,
            "MS_BUNDLE_DIR": str(self.bundle),
            "MS_DATA_DIR": str(self.data_dir),
            "MS_PORT": str(self.port),
            "MS_HOST": "127.0.0.1",
            "MS_INTRA_OP_THREADS": "1",
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "metricsearch.cli", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(f"{self.url}{until}", exited=exit_of(self.process, "service"), log=self.log, timeout_s=timeout_s)
        except RuntimeError:
            self.stop()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def thread_stacks(self, wait_s: float = 1.0) -> str:
        """Every thread's stack, as `serve` writes them to its log on SIGUSR1 (the end of the log if it is gone)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(wait_s)
        return self.log_path.read_text(errors="replace")[-16000:] if self.log_path.exists() else ""

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
