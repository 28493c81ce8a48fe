"""A collection on the server as the server store makes and checks it: named cosine vectors (an HNSW graph on the ANN
one only), sparse vectors scored with the engine's idf, the metadata that records the bundle which built it, and the
cluster layout it was created with."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from metricsearch.core.errors import StoreMismatchError
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.payload import check_schema

logger = logging.getLogger(__name__)

METADATA_KEY = "metricsearch"
"""Key of the collection metadata that records the bundle which built the collection."""


def collection_layout(shards: int | None, replication: int | None) -> dict[str, Any]:
    """create_collection's cluster arguments that are set: Qdrant's defaults stand for the others."""
    layout = {"shard_number": shards, "replication_factor": replication}
    return {k: v for k, v in layout.items() if v is not None}


def bundle_record(schema: VectorSchema, bundle_dir: Path | None) -> dict[str, Any]:
    """What a collection records of the bundle that built it: a restart after a model rollout serves it with that
    bundle (store.generations)."""
    record: dict[str, Any] = {"identity": schema.identity, "sizes": dict(schema.sizes)}
    return record | ({"bundle_dir": str(bundle_dir)} if bundle_dir else {})


def create(
    client: QdrantClient, collection: str, schema: VectorSchema, layout: Mapping[str, Any], record: Mapping[str, Any]
) -> None:
    client.create_collection(
        collection,
        vectors_config={
            # Vectors only read back for the rerank (second-order factors) need no HNSW graph.
            name: qm.VectorParams(
                size=size,
                distance=qm.Distance.COSINE,
                hnsw_config=None if name == schema.ann else qm.HnswConfigDiff(m=0),
            )
            for name, size in schema.sizes.items()
        },
        sparse_vectors_config={name: qm.SparseVectorParams(modifier=qm.Modifier.IDF) for name in schema.sparse} or None,
        metadata={METADATA_KEY: dict(record)},
        **layout,
    )
    with warnings.catch_warnings():
        # qdrant-client's local mode (tests) warns that it ignores payload indexes.
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        client.create_payload_index(collection, "id", qm.PayloadSchemaType.KEYWORD, wait=True)


def check_existing(
    info: qm.CollectionInfo, schema: VectorSchema, layout: Mapping[str, Any], *, where: str, fix: str
) -> dict[str, str]:
    """Refuse a collection of other distances or another bundle (`where` names it, `fix` says what to do); returns
    its payload indexes, {path: type}."""
    params = info.config
    vectors = params.params.vectors
    named = vectors if isinstance(vectors, Mapping) else {"": vectors} if vectors is not None else {}
    not_cosine = {name: p.distance for name, p in named.items() if p.distance != qm.Distance.COSINE}
    if not_cosine:
        raise StoreMismatchError(
            f"{where} uses distances {not_cosine}; metricsearch needs Cosine. Set MS_COLLECTION to another name."
        )
    _warn_on_other_layout(params.params, layout, where)
    check_collection(
        (params.metadata or {}).get(METADATA_KEY),
        {name: p.size for name, p in named.items()},
        schema,
        where=where,
        fix=fix,
    )
    return {path: index.data_type.value for path, index in (info.payload_schema or {}).items() if index.data_type}


def check_collection(
    record: Mapping[str, Any] | None, built_sizes: Mapping[str, int], schema: VectorSchema, *, where: str, fix: str
) -> None:
    """Refuse a collection (or a snapshot of one) that records another bundle, from its `METADATA_KEY` metadata
    record and vector sizes. One that records none (created elsewhere, or by a server without collection metadata)
    is accepted when its sizes fit."""
    if record is None and dict(built_sizes) == dict(schema.sizes):
        logger.warning("%s records no bundle; its vector sizes fit, so it is used as is", where)
        return
    check_schema((record or {}).get("identity", "(none recorded)"), built_sizes, schema, where=where, fix=fix)


def _warn_on_other_layout(params: qm.CollectionParams, layout: Mapping[str, Any], where: str) -> None:
    """The service never reshards an existing collection; say so when the settings ask for another layout."""
    built = {"shard_number": params.shard_number, "replication_factor": params.replication_factor}
    differ = {k: (built[k], v) for k, v in layout.items() if built[k] is not None and built[k] != v}
    if differ:
        logger.warning(
            "%s keeps its layout %s (built, asked); MS_QDRANT_SHARDS and MS_QDRANT_REPLICATION apply only when the "
            "service creates the collection (Qdrant's API changes replication of a live one)",
            where,
            differ,
        )
