"""The child process that optimises a shard copy (store/edge/optimize.py) dies with the service."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from metricsearch.service.store.edge import build


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_optimizer_child_dies_with_the_service(tmp_path):
    """A build's child left running after `kill -9` of the service wrote on into a copy that the restarted service
    was deleting: it must die with its parent, and not start when the parent is already gone."""
    script = Path(build.__file__).with_name("optimize.py")
    # The parent starts a child that arms the death signal as the optimiser does, then waits forever.
    child_code = (
        f"import runpy, sys, time; ns = runpy.run_path({str(script)!r}); "
        "assert ns['die_with_parent'](int(sys.argv[1])); print('armed', flush=True); time.sleep(60)"
    )
    parent_code = (
        "import os, subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', {child_code!r}, str(os.getpid())]); "
        "print(child.pid, flush=True); child.wait()"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "armed"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.05)
    assert not _alive(child_pid)

    gone = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "1"], capture_output=True, text=True, timeout=60
    )  # pid 1 is never this test's process, so the parent counts as gone
    assert gone.returncode == 3 and "gone" in gone.stderr


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, killed but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
