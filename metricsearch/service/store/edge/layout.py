"""The embedded store's files: `<path>/store.json` names the bundle that built the store, its format and the live
generation of its shard, `<path>/shard-<n>/`. A background build or a restore writes the next generation beside the
live one and makes it live by rewriting store.json (one atomic rename); the next open removes any other generation.

Format 2 keys each point by a 64-bit integer (`point_key`), format 1 by a UUID: qdrant-edge hands a search's hits back
with a UUID object built per hit, an integer as it is (in process at 100k items, the part of a by-id request outside
the engine's call fell by about 0.4 ms of 4 at k = 10, 0.6 of 7.5 at k = 100). A format-1 store is rewritten to
format 2 when it opens (`upgrade`)."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    HnswIndexConfig,
    Modifier,
    PayloadSchemaType,
    Point,
    ScalarQuantizationConfig,
    ScalarType,
    ScrollRequest,
    UpdateOperation,
)

from metricsearch.core.errors import MetricSearchError, StoreMismatchError, StoreUnavailableError
from metricsearch.core.records import ID_NAMESPACE
from metricsearch.service.store.atomic import fsync_tree, written_whole
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.payload import check_schema

logger = logging.getLogger(__name__)

SIDECAR = "store.json"
DEFAULT_INDEXING_THRESHOLD_KB = 10_000
"""The engine's default: below it (per vector name) optimize() builds no HNSW, so a build is not worth starting."""
FORMAT = 2
_NO_GRAPH = HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000)
"""For vectors only read back for reranking: no HNSW graph, a third less build time (20k x 2 x 384: 15 s, not 23)."""
ANN_INT8 = ScalarQuantizationConfig(ScalarType.Int8, quantile=0.99)
"""Int8 copies of the ANN vector, written at each HNSW build, for the walk to rank by (its hits are then rescored with
the floats: planner.RESCORED). At 100k synthetic points of 768 floats the walk for the 101 nearest took 0.46-0.54 ms
instead of 1.06-1.25, finding the same share of the exact nearest (BENCHMARKS.md, "Choices behind the defaults")."""
_SHARD_DIR = re.compile(r"^shard-(\d+)$")
_COPY_CHUNK = 1 << 20
_UPGRADE_PAGE = 1024


def point_key(item_id: str) -> int:
    """An item's point id in the embedded store: the upper 64 bits of its UUID (core.records.point_id), so it is
    spread over the id space like the UUID. Two ids of 100 million items share a key with a chance of about 3e-4;
    the store refuses the second rather than replace the first (EdgeStore.upsert)."""
    return uuid.uuid5(ID_NAMESPACE, item_id).int >> 64


def engine_config(schema: VectorSchema, indexing_threshold_kb: int | None) -> EdgeConfig:
    """Named cosine vectors (an HNSW graph and int8 copies on the ANN one only) and sparse vectors scored with the
    engine's idf."""
    optimizers = EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb) if indexing_threshold_kb else None
    return EdgeConfig(
        vectors={
            name: EdgeVectorParams(size, Distance.Cosine, hnsw_config=_NO_GRAPH)
            if name != schema.ann
            else EdgeVectorParams(size, Distance.Cosine, quantization_config=ANN_INT8)
            for name, size in schema.sizes.items()
        },
        sparse_vectors={name: EdgeSparseVectorParams(modifier=Modifier.Idf) for name in schema.sparse} or None,
        optimizers=optimizers,
    )


def shard_dir(path: Path, generation: int) -> Path:
    return path / f"shard-{generation}"


def shard_dirs(path: Path) -> dict[int, Path]:
    """Every generation's shard folder under the store at `path`."""
    return {int(m.group(1)): child for child in path.iterdir() if (m := _SHARD_DIR.match(child.name))}


def live_generation(path: Path, schema: VectorSchema) -> tuple[int, int]:
    """The live generation store.json names and the store's format, checked to be of `schema`'s bundle and a format
    this code reads; a new store's first generation (an empty or missing folder becomes one)."""
    sidecar = path / SIDECAR
    if sidecar.exists():
        try:
            state = json.loads(sidecar.read_text())
            identity, sizes, generation = state["identity"], state["sizes"], int(state["generation"])
            store_format = int(state.get("format", 1))
        except (ValueError, KeyError, TypeError) as e:
            raise StoreMismatchError(
                f"{sidecar} is damaged ({e!r}): restore a snapshot (`metricsearch snapshot restore`), "
                f"or move {path} away and re-index the catalog"
            ) from e
        check_schema(
            identity,
            sizes,
            schema,
            where=f"The store at {path}",
            fix=f"Point MS_DATA_DIR or MS_COLLECTION elsewhere to build a new store for this bundle, "
            f"or delete {path} and re-index the catalog with it.",
        )
        if store_format > FORMAT:
            raise StoreMismatchError(
                f"The store at {path} is of format {store_format}, written by a newer metricsearch; this one reads "
                f"formats up to {FORMAT}: run the newer version, or point MS_DATA_DIR elsewhere and re-index"
            )
        return generation, store_format
    if path.exists() and any(path.iterdir()):
        raise StoreMismatchError(
            f"{path} holds files but no {SIDECAR}, so it is not a metricsearch store: "
            "point MS_DATA_DIR or MS_COLLECTION elsewhere."
        )
    path.mkdir(parents=True, exist_ok=True)
    write_sidecar(path, schema, 1)
    return 1, FORMAT


def write_sidecar(path: Path, schema: VectorSchema, generation: int) -> None:
    """Atomic and durable (write, fsync, rename), since it also says which generation is live."""
    state = {"format": FORMAT, "identity": schema.identity, "sizes": dict(schema.sizes), "generation": generation}
    with written_whole(path / SIDECAR) as partial:
        partial.write_text(json.dumps(state, indent=2) + "\n")


def open_shard(path: Path, folder: Path, config: EdgeConfig) -> EdgeShard:
    """The shard in `folder` of the store at `path`, created when missing, with the payload index on item ids."""
    try:
        if folder.exists():
            return EdgeShard.load(str(folder), config)
        shard = EdgeShard.create(str(folder), config)
    except Exception as e:
        if "WouldBlock" in str(e):
            raise StoreUnavailableError(
                f"the embedded store at {path} is already open (one process owns it, its WAL is the lock); "
                "several workers need a Qdrant server (MS_QDRANT_URL)"
            ) from e
        if isinstance(e, OSError):
            raise
        raise StoreUnavailableError(
            f"the embedded store at {folder} cannot be opened ({e}): restore a snapshot "
            f"(`metricsearch snapshot restore`), or move {path} away and re-index the catalog"
        ) from e
    shard.update(UpdateOperation.create_field_index("id", PayloadSchemaType.Keyword))
    return shard


def upgrade(path: Path, generation: int, config: EdgeConfig, schema: VectorSchema) -> int:
    """Rewrite a format-1 store's live shard as the next generation with integer point keys, then make it live;
    returns that generation. The old one stays whole until store.json names the new, so a failure or a crash
    meanwhile leaves a format-1 store that the next open upgrades again. The points land unindexed: the store starts
    a background HNSW build once open (HnswBuild.start_if_unindexed)."""
    old_folder, new_folder = shard_dir(path, generation), shard_dir(path, generation + 1)
    shutil.rmtree(new_folder, ignore_errors=True)
    old = open_shard(path, old_folder, config)
    try:
        points = _rewritten(old, new_folder, config, [*schema.sizes, *schema.sparse])
        fsync_tree(new_folder)
    except Exception as e:
        shutil.rmtree(new_folder, ignore_errors=True)
        if isinstance(e, MetricSearchError):
            raise
        raise StoreUnavailableError(
            f"upgrading the embedded store at {path} to format {FORMAT} failed ({e}); the store is unchanged. The "
            "upgrade writes a copy of the store beside it: free as much disk, then start again"
        ) from e
    finally:
        old.close()
    write_sidecar(path, schema, generation + 1)
    shutil.rmtree(old_folder)
    logger.info("upgraded the embedded store at %s to format %d (%d points re-keyed)", path, FORMAT, points)
    return generation + 1


def _rewritten(old: EdgeShard, folder: Path, config: EdgeConfig, vectors: list[str]) -> int:
    """A new shard in `folder` with `old`'s payload indexes (the item id's and every metadata key's) and points."""
    new = EdgeShard.create(str(folder), config)
    try:
        for field, info in old.info().payload_schema.items():
            new.update(UpdateOperation.create_field_index(field, info.data_type))
        points = _copy_points(old, new, vectors)
        new.flush()
        return points
    finally:
        new.close()


def _copy_points(old: EdgeShard, new: EdgeShard, vectors: list[str]) -> int:
    """Every point of `old` written to `new` under its item's point_key, with its vectors and payload as stored; two
    items of one key stop it (the store cannot hold both)."""
    offset, owners = None, {}
    while True:
        records, offset = old.scroll(
            ScrollRequest(offset=offset, limit=_UPGRADE_PAGE, with_payload=True, with_vector=vectors)
        )
        points = []
        for record in records:
            payload = record.payload  # read once: each read converts it anew
            item_id = payload.get("id")
            if not isinstance(item_id, str):
                raise StoreMismatchError(
                    f"a point of the store holds no item id ({str(payload)[:200]}): it is damaged; restore a "
                    "snapshot (`metricsearch snapshot restore`), or move the store away and re-index the catalog"
                )
            key = point_key(item_id)
            if owners.setdefault(key, item_id) != item_id:
                raise StoreMismatchError(
                    f"items {owners[key]!r} and {item_id!r} share a point key, so format {FORMAT} cannot hold both: "
                    "rename one and re-index the catalog"
                )
            points.append(Point(key, dict(record.vector), payload))
        if points:
            new.update(UpdateOperation.upsert_points(points))
        if offset is None:
            return len(owners)


def remove_stale_generations(path: Path, live: int) -> None:
    """Copies left by a build that a crash interrupted; called once the live shard's WAL lock is ours."""
    for generation, folder in shard_dirs(path).items():
        if generation != live:
            logger.info("removing %s, left by an interrupted HNSW build", folder)
            shutil.rmtree(folder)


def index_type(data_type: PayloadSchemaType) -> str:
    """The engine's index type by the name MS_INDEXED_FIELDS gives it (`PayloadSchemaType.Float` is 'float')."""
    return str(data_type).rsplit(".", 1)[-1].lower()


def schema_type(kind: str) -> PayloadSchemaType:
    return getattr(PayloadSchemaType, kind.capitalize())


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, copy_function=_copy_sparse)


def _copy_sparse(source: str, target: str) -> None:
    """Copy only a file's data extents: the engine preallocates sparse 32 MiB files (WAL, vector chunks, payload
    pages) that a plain copy would write out in full (164 MB for a 2 MB shard)."""
    with open(source, "rb") as fin, open(target, "wb") as fout:
        src, dst = fin.fileno(), fout.fileno()
        size = os.fstat(src).st_size
        position = 0
        while position < size:
            try:
                data = os.lseek(src, position, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            hole = os.lseek(src, data, os.SEEK_HOLE)
            while data < hole:
                chunk = os.pread(src, min(_COPY_CHUNK, hole - data), data)
                if not chunk:
                    break
                os.pwrite(dst, chunk, data)
                data += len(chunk)
            position = hole
        os.ftruncate(dst, size)
