"""Child process of the embedded store's background HNSW build: optimise one shard copy and report on stdout.

It runs apart from the service because `EdgeShard.optimize()` holds the GIL for seconds, which would stall every
request (QDRANT_EDGE.md). It imports only qdrant_edge so it starts fast, and lowers its priority so the serving
process keeps the CPU it needs. On Linux it dies with the service: left running after a `kill -9`, it went on
writing into its copy while the restarted service deleted that folder (start-up failed: "Directory not empty"),
and could have written into the next build's copy of the same name.

Usage: python optimize.py SHARD_DIR [PARENT_PID]  ->  one JSON line {"optimized", "indexed_vectors_count",
"seconds"}; with PARENT_PID it exits at once when that process is already gone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

from qdrant_edge import EdgeShard


def optimize(path: str) -> dict[str, object]:
    start = time.perf_counter()
    shard = EdgeShard.load(path)
    try:
        optimized = shard.optimize()
        shard.flush()
        indexed = shard.info().indexed_vectors_count
    finally:
        shard.close()
    return {"optimized": optimized, "indexed_vectors_count": indexed, "seconds": round(time.perf_counter() - start, 3)}


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None) -> bool:
    """Have the kernel kill this process when its parent thread ends (Linux; the service's build thread waits for
    this child, so it ends with the service). False when `parent` is already gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return parent is None or os.getppid() == parent


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        sys.stderr.write(__doc__ or "")
        return 2
    if not die_with_parent(int(argv[1]) if len(argv) == 2 else None):
        sys.stderr.write("the service that started this build is gone\n")
        return 3
    if hasattr(os, "nice"):
        os.nice(10)
    sys.stdout.write(json.dumps(optimize(argv[0])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
