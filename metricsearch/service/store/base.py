"""The store interface: the service's only view of Qdrant, implemented by the embedded shard (edge/) and by a Qdrant
server or cluster (remote/). Congruence tests run the same operations on both."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

# The filter conditions live in the core (the HTTP schemas build them); stores have always taken them from here.
from metricsearch.core.filters import AnyOf as AnyOf
from metricsearch.core.filters import Condition as Condition
from metricsearch.core.filters import Equals as Equals
from metricsearch.core.filters import Range as Range
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import MetadataValue

if TYPE_CHECKING:
    from metricsearch.service.config import Settings

logger = logging.getLogger(__name__)


DELETE_PAGE = 1000
"""Points a delete by filter reads and removes per round: it bounds the memory and the write lock's hold."""


def lexical_limit(limit: int) -> int:
    """How many best matches each sparse prefetch of a search adds to its `limit` nearest: a quarter as many, since
    fewer candidates are the cheapest cut of a fused request, and a match found by its part number alone ranks near
    the top of the lexical ones. With it, the exact fused top 10 of 100k synthetic items is still all found
    (BENCHMARKS.md, "Choices behind the defaults") and both catalog pairs keep their served MRR (EVALUATION.md,
    "Catalog matching"); a k = 100 page holds 0.908 of the synthetic exact top 100 (the same section). As many
    lexical matches as dense ones held 0.735 against this quarter's 0.703, measured on an earlier synthetic catalog
    whose every word was a code."""
    return max(1, limit // 4)


@dataclass(frozen=True)
class VectorSchema:
    """Named dense vectors of every point (cosine distance), which one the ANN search uses, and the named sparse
    vectors (TF-IDF per field, scored with the engine's idf modifier).

    `identity` names the bundle that built the store; a store opened with another schema is refused
    with a message naming both."""

    sizes: Mapping[str, int]
    ann: str
    identity: str
    sparse: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredItem:
    id: str
    title: str
    description: str
    metadata: dict[str, MetadataValue]
    content_hash: str
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """1-D float32 arrays by vector name; empty when read without vectors. Cosine stores return them unit-norm."""
    sparse: dict[str, SparseVector] = field(default_factory=dict)
    """Sparse vectors by name, written with the item (an empty or absent one is not stored). Read back with the dense
    vectors only by the embedded store, whose term rows hold them; elsewhere empty when read: they derive from the
    texts."""


@dataclass(frozen=True)
class Listing:
    """What a search result shows of an item besides its scores."""

    id: str
    title: str
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class SearchResult:
    """ANN hits best first: listings, scores and `vectors[name]`, an (n_hits, size) float32 matrix aligned with
    `listings`. Each hit's listing and vectors are read together, so a reranked result shows the version of the
    item its score was computed from, never a newer title with an older text's score."""

    listings: list[Listing]
    scores: np.ndarray
    vectors: dict[str, np.ndarray]
    points: list[str] | list[int]
    """Each hit's point as its store keys it, what `lexical_scores` takes, so a search's hits are scored without
    hashing their ids again: the point id (core.records.point_id of its item id), or, in the embedded store, its
    64-bit point key (edge/layout.point_key)."""
    lexical: dict[str, np.ndarray] = field(default_factory=dict)
    """Each hit's score for each `scored` query of the search (as `lexical_scores` gives them): read with its listing
    and vectors by the embedded store, in a second call by a server store."""

    @property
    def ids(self) -> list[str]:
        return [listing.id for listing in self.listings]


@dataclass(frozen=True)
class SnapshotReport:
    """A snapshot written (`path` is the file) or restored (`path` is where it went), its items and its bytes."""

    path: Path
    items: int
    bytes: int


@dataclass(frozen=True)
class StoreTraits:
    """What the service must know of a store to call it well, asked of the store rather than of the settings."""

    cache_answers: bool
    """Whether an answer may be cached until this process writes: false where other processes write the store too."""
    call_threads: int | None
    """How many calls may wait on the store at once, each in a worker thread, where its calls wait on the network;
    None where they run inline on the event loop (the embedded engine holds the GIL for the whole call, so a thread
    would add a hop and no parallelism)."""
    where: str
    """The store as error messages name it."""
    one_process: bool = False
    """Whether one process owns the store (a second open is refused), so the service runs one worker process."""


class Store(Protocol):
    """An open store. Opening and snapshots are class-level, as in qdrant-client where snapshots are client calls
    that name a collection: a restore must work where no store opens (none yet, a damaged one, another bundle's)
    and must not create one, and the embedded store must not be held by the process restoring it."""

    traits: StoreTraits
    location: str
    """Where the store lives: its folder (embedded) or the collection it resolved on the server; what
    `Generations.drop` removes once the store is closed."""
    lexical_in_process: bool
    """Whether `lexical_scores` is computed in this process (the embedded store's term rows), where two calls cost
    about what one does, so a search scores every candidate on the components its ranking reads and only the rows
    it shows on the others; a server store's calls are round trips, so it scores everything in one."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        schema: VectorSchema,
        *,
        wait_for_server: bool = False,
        on_auto_index: Callable[[str], None] | None = None,
    ) -> Store:
        """The store the settings name. With `wait_for_server`, a server that does not answer yet is no error;
        `on_auto_index` gets each automatic index's outcome (auto_index.py), for the metrics."""

    @classmethod
    def create_snapshot(cls, settings: Settings, schema: VectorSchema, target: Path) -> SnapshotReport:
        """Write a consistent snapshot of the store the settings name to `target`, a path that does not exist.
        It is written under a temporary name and renamed when whole, so `target` never holds a partial file."""

    @classmethod
    def restore_snapshot(
        cls, settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool = False
    ) -> SnapshotReport:
        """Replace the store the settings name (an existing one only with `overwrite`) by the snapshot at `source`,
        refused before anything changes when it was made for another bundle than `schema`'s."""

    def upsert(self, items: Sequence[StoredItem]) -> None:
        """Insert or replace by id; every item carries all schema vectors. Queryable when this returns."""

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, StoredItem]:
        """Items by id; unknown ids are left out."""

    def delete(self, ids: Sequence[str]) -> int:
        """Remove by id; returns how many existed."""

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        """Remove every item that meets all `conditions` (at least one), a page of DELETE_PAGE at a time; returns how
        many were removed."""

    def search(
        self,
        vector: np.ndarray,
        limit: int,
        conditions: Sequence[Condition] = (),
        exclude_ids: Sequence[str] = (),
        lexical: Mapping[str, SparseVector] | None = None,
        scored: Mapping[str, SparseVector] | None = None,
        using: Mapping[str, str] | None = None,
    ) -> SearchResult:
        """Nearest neighbours of `vector` on the schema's ANN vector, with all their dense vectors; with `lexical`
        (sparse query vectors by name), the union of those and the `lexical_limit(limit)` best by each sparse vector, in
        one query, so an item that only shares a part number with the query is a candidate too. `exclude_ids` are
        never returned; a store may drop them from a search for as many more hits rather than filter them out, which
        can leave a union up to one hit more per excluded id and prefetch (the next nearest, the next best match).
        `scored` (and `using`, as for `lexical_scores`): queries whose scores of every hit come in `lexical`."""

    def sample(self, n: int) -> list[StoredItem]:
        """Up to n items with their vectors, the same ones while the store does not change: the first by point id,
        which is a hash of the item id, so they are spread over the catalog whatever order it was indexed in."""

    def scroll(self, offset: str | None, limit: int) -> tuple[list[StoredItem], str | None]:
        """Up to `limit` items without vectors, in point id order from `offset` (None: the first), and the offset of
        the next page (None after the last): how a model rollout reads every item's texts."""

    def points(self, ids: Sequence[str]) -> list[str] | list[int]:
        """The points of item ids as `SearchResult.points` holds them (whether stored or not)."""

    def lexical_scores(
        self,
        queries: Mapping[str, SparseVector],
        points: Sequence[str | int],
        using: Mapping[str, str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Each point's score (core.lexical's TF-IDF cosine with the store's idf) for each named sparse query,
        aligned with `points` (as `SearchResult.points` or `points` give them); 0 where a point shares no term with
        the query or has no such vector. A query is scored against the stored vector of its own name, or the one
        `using` names."""

    def listed(
        self, ids: Sequence[str], scored: Mapping[str, SparseVector], using: Mapping[str, str] | None = None
    ) -> SearchResult:
        """The stored items among `ids` as a search's hits (their listings, vectors and `scored` queries' lexical
        scores, `using` as for `lexical_scores`), in no particular order, their `scores` 0: what a cached answer's
        check rescores (engine/recheck.py)."""

    def term_idf(
        self, queries: Mapping[str, SparseVector], using: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray] | None:
        """Each named sparse query's idf of its terms now (aligned with its indices; `using` as for `lexical_scores`),
        what a cached answer's check compares with those it was ranked with; None where answers are not cached
        (`traits.cache_answers` false: other processes write the store)."""

    def metadata_kinds(self, key: str) -> set[str]:
        """The payload index types (payload.value_kinds) of the values stored under metadata `key`, read until a
        second one shows; empty when no item holds it: what an automatic index is typed from (auto_index.py)."""

    def create_index(self, key: str, kind: str) -> None:
        """Build a payload index of type `kind` (keyword, float or bool) on metadata `key`: a write, which a restart
        keeps while MS_AUTO_INDEX is on. Filters answer the same with it; they only stop checking every point."""

    def count(self) -> int: ...

    def readiness(self) -> str | None:
        """None when the store answers (ready), else why it does not, a message for /readyz."""

    def flush(self) -> None:
        """Make every acknowledged write durable on disk."""

    def optimize_now(self) -> None:
        """Build the ANN index over what is stored now, in the background, where the store leaves that to us (the
        embedded one, after a bulk load); the server store indexes by itself."""

    def close(self) -> None: ...


class Generations(Protocol):
    """The stores one collection has over model rollouts, and which one is served: what a rollout asks of the
    engine (where a new store lives, what a swap commits, what is removed after)."""

    def serving(self) -> Settings:
        """The settings as the last swapped rollout left them: its bundle and store (unchanged when none was)."""
        ...

    def remove_leftovers(self, served: Settings) -> None:
        """Remove the collection's stores that `served` does not use: a new store a crash or a stop interrupted, the
        store a swap retired. Called once the served store is open."""
        ...

    def next_name(self) -> str:
        """The collection name of the next rollout's new store."""
        ...

    def commit(self, new: Settings) -> None:
        """Serve the store `new` names from now on, also after a restart: the swap's commit point."""
        ...

    def drop(self, store: Store) -> None:
        """Remove a closed store (one a swap retired, or an aborted rollout's)."""
        ...


def warn_if_other_bundle(bundle_dir: Path, settings: Settings, where: str) -> None:
    """Say so when a rollout's record (`where`) makes the service serve another bundle than MS_BUNDLE_DIR."""
    if bundle_dir != settings.bundle_dir.resolve():
        logger.warning(
            "serving %s, which a model rollout swapped in (%s), not MS_BUNDLE_DIR %s",
            bundle_dir,
            where,
            settings.bundle_dir,
        )
