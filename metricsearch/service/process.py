"""The service as a real subprocess (`metricsearch serve`) on a free 127.0.0.1 port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


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
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"service exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}{until}", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{until} not 200 after {timeout_s} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
