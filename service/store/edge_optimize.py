"""Child process of the embedded store's background HNSW build: optimise one shard copy and report on stdout.

It runs apart from the service because `EdgeShard.optimize()` holds the GIL for seconds, which would stall every
request (QDRANT_EDGE.md). It imports only qdrant_edge so it starts fast, and lowers its priority so the serving
process keeps the CPU it needs.

Usage: python edge_optimize.py SHARD_DIR  ->  one JSON line {"optimized", "indexed_vectors_count", "seconds"}
"""

from __future__ import annotations

import json
import os
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write(__doc__ or "")
        return 2
    if hasattr(os, "nice"):
        os.nice(10)
    sys.stdout.write(json.dumps(optimize(argv[0])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
