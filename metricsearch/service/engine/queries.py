"""Queries: what a ranking compares candidates with, made from a stored item (its stored vectors and terms) or from
a text (the texts to encode, the query batcher under the request timeout, the per-field layout, the terms)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from metricsearch.core.errors import NotFoundError, TimedOutError
from metricsearch.core.lexical import LexicalFields, SparseVector
from metricsearch.core.rerank import FieldVectors
from metricsearch.core.spans import span
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.engine.layout import ANN_VECTOR, FieldLayout
from metricsearch.service.store.base import Store, StoredItem


@dataclass(frozen=True)
class TextQuery:
    """A free text (stands for every field), or a title with an optional description (compared field by field)."""

    text: str | None = None
    title: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Query:
    """One query of a ranking: per-field vectors and lexical vectors per field (empty without lexical vectors)."""

    vectors: FieldVectors
    terms: dict[str, SparseVector]
    ann: np.ndarray | None = None
    """The packed vector the ANN search takes, where it was read with the query (a stored item's): packing the
    per-field vectors again would redo the indexer's work; None: the ranker packs them."""


class QueryBuilder:
    def __init__(
        self,
        store: Store,
        layout: FieldLayout,
        lexical: LexicalFields | None,
        batcher: QueryBatcher | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """`batcher`: where text queries are encoded (None: an engine that answers by id alone)."""
        self.store = store
        self.layout = layout
        self.lexical = lexical
        self.batcher = batcher
        self.timeout_s = timeout_s

    def of_item(self, found: StoredItem) -> Query:
        """A stored item (read with its vectors) as a query: its per-field vectors and its lexical vectors."""
        vectors = self.layout.stored_one(found.vectors)
        ann = found.vectors[ANN_VECTOR]
        if self.lexical is None:
            return Query(vectors, {}, ann)
        if found.sparse:  # read back with it (the embedded store): its documents are its field queries
            return Query(vectors, self.lexical.item_queries(found.title, found.description, found.sparse), ann)
        return Query(vectors, self.lexical.queries(found.title, found.description), ann)

    def of_id(self, item_id: str) -> Query:
        found = self.store.get([item_id], with_vectors=True).get(item_id)
        if found is None:
            raise NotFoundError(f"no item with id {item_id!r}: index it first, or query by text")
        return self.of_item(found)

    def of_ids(self, ids: Sequence[str], role: str) -> list[Query]:
        """Stored items as queries; 404 naming the first id not stored."""
        if not ids:
            return []
        found = self.store.get(list(ids), with_vectors=True)
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"{role} {missing[0]!r} is not stored: index it first, or leave it out")
        return [self.of_item(found[i]) for i in ids]

    def texts(self, query: TextQuery) -> list[str]:
        """The texts to encode for a text query: one text, or a title and an optional description."""
        if query.text is not None:
            return [query.text]
        texts = [query.title or ""]
        if "description" in self.layout.fields and query.description and query.description.strip():
            texts.append(query.description)
        return texts

    def terms(self, query: TextQuery) -> dict[str, SparseVector]:
        """A text query's lexical vectors per field (none for a bundle without lexical vectors)."""
        if self.lexical is None:
            return {}
        return self.lexical.queries(query.title, query.description, free_text=query.text)

    async def of_texts(self, queries: Sequence[TextQuery]) -> list[Query]:
        """Text queries, all their texts in one batcher call (a batch of queries is one encoder call, shared with
        whatever else is waiting); 503 past the request timeout."""
        assert self.batcher is not None, "text queries need the query batcher"
        texts = [self.texts(q) for q in queries]
        try:
            with span("encode", texts=sum(map(len, texts))):
                encoded = await asyncio.wait_for(self.batcher.encode([t for ts in texts for t in ts]), self.timeout_s)
        except TimeoutError:
            raise TimedOutError(
                f"the query waited over {self.timeout_s:g} s (MS_REQUEST_TIMEOUT_S) for the encoder, which is "
                "overloaded: retry shortly"
            ) from None
        result, start = [], 0
        for query, own in zip(queries, texts, strict=True):
            vectors = self.layout.from_texts(encoded[start : start + len(own)], free_text=query.text is not None)
            result.append(Query(vectors, self.terms(query)))
            start += len(own)
        return result
