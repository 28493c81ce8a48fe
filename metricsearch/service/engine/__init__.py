"""The request path of one bundle over one store (text-embeddings-inference's "core"; named engine here so it is not
mistaken for `metricsearch.core`, the contract and math every part shares). Imports run engine -> store, never back.

- engine: `Engine.answer(request)`, the one path of /similar and every query of /similar/batch.
- queries: an id or a text as a query (the per-field layout, the query batcher, the lexical terms).
- ranker: candidates from the store, their exact fused rerank, the matches shown.
- indexer: writes behind the write gate, applied to a rollout's replica too.
- statistics: the catalog statistics a fused rerank normalises by, refreshed in the background.
- layout, lexical_scores, limits: the vector layout, the lexical components, the request size limits."""

from metricsearch.service.engine.engine import Answered, Engine, StoreCalls
from metricsearch.service.engine.indexer import Indexer, IndexResult, Replica
from metricsearch.service.engine.layout import ANN_VECTOR, FACTORS_VECTOR, content_hash, vector_schema
from metricsearch.service.engine.limits import Limits
from metricsearch.service.engine.queries import Query, TextQuery

__all__ = [
    "ANN_VECTOR",
    "FACTORS_VECTOR",
    "Answered",
    "Engine",
    "IndexResult",
    "Indexer",
    "Limits",
    "Query",
    "Replica",
    "StoreCalls",
    "TextQuery",
    "content_hash",
    "vector_schema",
]
