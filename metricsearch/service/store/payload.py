"""What both store implementations share, so they store and answer alike: point ids, the payload layout, the
metadata paths filters use, the result matrices and the schema check that refuses another bundle's store."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import orjson

from metricsearch.core.errors import InvalidInputError, StoreMismatchError
from metricsearch.core.lexical import SparseVector
from metricsearch.service.store.base import Listing, SearchResult, StoredItem, VectorSchema

logger = logging.getLogger(__name__)

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_METADATA = "metadata."


class Hit(Protocol):
    """A scored point as both qdrant-edge and qdrant-client return it."""

    @property
    def score(self) -> float: ...

    @property
    def payload(self) -> Any: ...

    @property
    def vector(self) -> Any: ...


def same_metadata(stored: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """Equal as JSON, types included: 1 and true, 2 and 2.0 differ (Python's == says they are equal, and an update
    that only changed a type was answered `unchanged` and kept the old value). Key order does not matter."""
    return orjson.dumps(stored, option=orjson.OPT_SORT_KEYS) == orjson.dumps(given, option=orjson.OPT_SORT_KEYS)


def to_payload(item: StoredItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "title": item.title,
        "description": item.description,
        "metadata": item.metadata,
        "content_hash": item.content_hash,
    }


def from_payload(
    payload: Mapping[str, Any],
    vectors: Mapping[str, Any] | None = None,
    sizes: Mapping[str, int] | None = None,
    sparse: Mapping[str, SparseVector] | None = None,
) -> StoredItem:
    """The item of a point; `vectors` as the engine returned them, of which the dense ones named in `sizes` are kept
    (the engine's sparse vectors are never read back); `sparse`: the point's sparse vectors where a store holds them
    in process (the embedded store's term rows)."""
    dense = {name: v for name, v in (vectors or {}).items() if sizes is None or name in sizes}
    return StoredItem(
        id=payload["id"],
        title=payload["title"],
        description=payload["description"],
        metadata=dict(payload.get("metadata") or {}),
        content_hash=payload["content_hash"],
        vectors={name: np.asarray(v, dtype=np.float32) for name, v in dense.items()},
        sparse=dict(sparse or {}),
    )


def listing(payload: Mapping[str, Any]) -> Listing:
    return Listing(payload["id"], payload["title"], dict(payload.get("metadata") or {}))


def vector_lists(item: StoredItem, sizes: Mapping[str, int]) -> dict[str, list[float]]:
    """The item's vectors as the engines take them; a missing or misshapen one is a caller bug, named here rather
    than as the engine's bare error."""
    out = {}
    for name, size in sizes.items():
        vector = item.vectors.get(name)
        if vector is None or np.shape(vector) != (size,):
            shape = None if vector is None else np.shape(vector)
            raise ValueError(f"item {item.id!r}: vector {name!r} must have shape ({size},), got {shape}")
        out[name] = np.asarray(vector, dtype=np.float32).tolist()
    return out


def sparse_lists(item: StoredItem, names: Sequence[str]) -> dict[str, tuple[list[int], list[float]]]:
    """The item's non-empty sparse vectors as (indices, values) lists, the form both engines' constructors take."""
    return {
        name: (vector.indices.tolist(), vector.values.tolist())
        for name in names
        if (vector := item.sparse.get(name)) is not None and len(vector)
    }


def aligned_scores(hits: Sequence[Any], points: Sequence[str]) -> np.ndarray:
    """Scores of `hits` laid out along point ids `points`, 0 where a point was not hit."""
    by_point = {str(hit.id): hit.score for hit in hits}
    return np.fromiter((by_point.get(p, 0.0) for p in points), dtype=np.float64, count=len(points))


def metadata_path(key: str) -> str:
    """The payload path of a metadata key; keys with path syntax ('.', '[', quotes) would address something else."""
    if not _PLAIN_KEY.match(key):
        raise InvalidInputError(f"metadata key {key!r} cannot be filtered on: use letters, digits, '_' and '-' only")
    return f"metadata.{key}"


def metadata_indexes(indexes: Mapping[str, str]) -> dict[str, str]:
    """The metadata keys among payload indexes {path: type}, as {key: type}."""
    return {path.removeprefix(_METADATA): kind for path, kind in indexes.items() if path.startswith(_METADATA)}


def sync_indexes(
    existing: Mapping[str, str],
    declared: Mapping[str, str],
    *,
    create: Callable[[str, str], None],
    drop: Callable[[str], None],
    where: str,
    keep_undeclared: bool = False,
) -> dict[str, str]:
    """Make the payload indexes on metadata paths the declared ones ({key: type}, MS_INDEXED_FIELDS): `existing` is
    every payload index as {path: type}. An index already there with its type is kept (a restart costs nothing); one
    of another type is dropped and built again; one no longer declared is dropped, since it costs memory and each
    write's time, unless `keep_undeclared` (MS_AUTO_INDEX: it was learned from filters). Indexes outside the metadata
    (the `id` index) are left alone. Returns the metadata indexes now there, {key: type}."""
    wanted = {metadata_path(key): kind for key, kind in declared.items()}
    kept = {}
    for path, kind in existing.items():
        if not path.startswith(_METADATA):
            continue
        if wanted.get(path, kind if keep_undeclared else None) == kind:
            kept[path.removeprefix(_METADATA)] = kind
            continue
        drop(path)
        retyped = f"declared {wanted[path]!r}" if path in wanted else "no longer declared"
        logger.warning("%s: dropped the %r payload index on %s (%s)", where, kind, path, retyped)
    for path, kind in wanted.items():
        if existing.get(path) != kind:
            started = time.perf_counter()
            create(path, kind)
            took_ms = (time.perf_counter() - started) * 1e3
            logger.info("%s: built a %r payload index on %s in %.0f ms", where, kind, path, took_ms)
        kept[path.removeprefix(_METADATA)] = kind
    return kept


def value_kinds(value: object) -> set[str]:
    """The payload index types that would hold a stored metadata value (each element of a list): `keyword`, `float`
    (every number), `bool`, or `other` (an object) that no index type holds. A null is none: no filter matches it."""
    if value is None:
        return set()
    if isinstance(value, list):
        return set().union(*map(value_kinds, value)) if value else set()
    if isinstance(value, bool):
        return {"bool"}
    if is_number(value):
        return {"float"}
    return {"keyword"} if isinstance(value, str) else {"other"}


def stored_kinds(key: str, read_page: Callable[[Any], tuple[Sequence[Mapping | None], Any]]) -> set[str]:
    """value_kinds of every value stored under metadata `key`, read a page of payloads at a time (`read_page(offset)`
    gives the payloads and the next offset, None after the last) until a second kind shows or none is left."""
    kinds: set[str] = set()
    offset = None
    while True:
        payloads, offset = read_page(offset)
        for payload in payloads:
            kinds |= value_kinds((payload or {}).get("metadata", {}).get(key))
        if len(kinds) >= 2 or offset is None:
            return kinds


def is_number(value: object) -> bool:
    """Numbers compare by value in filters (2 equals 2.0); a bool is not one (true is not 1)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def search_result(hits: Sequence[Hit], sizes: Mapping[str, int]) -> SearchResult:
    """Listings, scores and one matrix per vector name from hits read with their payload's id, title and metadata;
    each hit's `.vector` is read once since the engines rebuild it on every access."""
    rows = [hit.vector for hit in hits]
    return SearchResult(
        listings=[listing(hit.payload) for hit in hits],
        scores=np.fromiter((hit.score for hit in hits), dtype=np.float32, count=len(hits)),
        vectors={
            name: np.array([row[name] for row in rows], dtype=np.float32).reshape(len(rows), size)
            for name, size in sizes.items()
        },
        points=[str(hit.id) for hit in hits],
    )


def check_schema(
    built_identity: str, built_sizes: Mapping[str, int], schema: VectorSchema, *, where: str, fix: str
) -> None:
    """Refuse a store built by another bundle: vectors of another model (or of other sizes) are meaningless to
    this one, even when their sizes happen to agree."""
    if built_identity == schema.identity and dict(built_sizes) == dict(schema.sizes):
        return
    raise StoreMismatchError(
        f"{where} was built by bundle {built_identity!r} with vectors {dict(built_sizes)}, but the loaded bundle "
        f"{schema.identity!r} has vectors {dict(schema.sizes)}. {fix}"
    )
