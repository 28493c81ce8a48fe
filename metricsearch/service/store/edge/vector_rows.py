"""An in-memory copy of every point's vectors and one entry (the embedded store keeps there what a search result
shows: id, title, metadata), so a search reads its candidates as one numpy gather instead of asking the engine for
vectors and payloads. A write replaces a point's row and entry together, so one read of both sees one version.

qdrant-edge hands vectors back as Python lists: for 100 candidates x 768 floats that conversion took 3.7 ms of a
4.5 ms search (measured at 50k points, HNSW), more than the search itself. The embedded store is owned by one
process, through which every write passes, so this copy cannot go stale. Costs 4 bytes x size a point in RAM, plus
its entry (docs/operations.md, "Memory").

Rows live in blocks that double in size (1024, 1024, 2048, 4096, ... rows), so growing adds a block and never
copies: there is no moment with two copies of the vectors alive, and a block's rows take memory only once written
(np.zeros maps untouched pages lazily). A gather touches at most log2(n / 1024) + 1 blocks.
Written by hand: a growable id -> row store is a few lines of numpy.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import repeat
from typing import Generic, TypeVar

import numpy as np

from metricsearch.core.scoring import top_k

Entry = TypeVar("Entry")


FIRST_BLOCK = 1024


def _blocks_of(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(block, offset in it) of each row: block 0 holds rows [0, B), block k >= 1 rows [B * 2^(k-1), B * 2^k). The
    block is the bit length of rows // B (frexp's exponent, exact for any row count), in a few calls of numpy: every
    search reads its hits' rows through it."""
    block = np.frexp(rows // FIRST_BLOCK)[1].astype(rows.dtype)
    start = (FIRST_BLOCK >> 1) << block
    start[block == 0] = 0
    return block, rows - start


class VectorRows(Generic[Entry]):
    def __init__(self, sizes: Mapping[str, int]) -> None:
        self._rows: dict[Hashable, int] = {}
        self._points: list[Hashable | None] = []
        self._free: list[int] = []
        self._entries: list[Entry | None] = []
        self._sizes = dict(sizes)
        self._blocks: dict[str, list[np.ndarray]] = {name: [] for name in sizes}
        self._capacity = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, point: Hashable) -> bool:
        return point in self._rows

    @property
    def nbytes(self) -> int:
        """Bytes of the rows in use (a block's unwritten rows take no memory)."""
        return len(self._entries) * 4 * sum(self._sizes.values())

    def put(self, ids: Sequence[Hashable], entries: Sequence[Entry], vectors: Mapping[str, np.ndarray]) -> None:
        """Insert or replace the (n, size) vectors of point `ids`, one row each, unit-norm as a cosine store keeps
        them, with one entry each."""
        rows = [self._row_for(i) for i in ids]
        for row, entry in zip(rows, entries, strict=True):
            self._entries[row] = entry
        block, offset = _blocks_of(np.asarray(rows, dtype=np.int64))
        for name, blocks in self._blocks.items():
            given = np.asarray(vectors[name], dtype=np.float32)
            norms = np.linalg.norm(given, axis=1, keepdims=True)
            unit = np.divide(given, norms, out=np.zeros_like(given), where=norms > 0)
            for b in np.unique(block):
                here = block == b
                blocks[b][offset[here]] = unit[here]

    def remove(self, ids: Sequence[Hashable]) -> None:
        for point in ids:
            row = self._rows.pop(point, None)
            if row is not None:
                self._entries[row] = None  # an entry may be large (metadata): do not keep it alive
                self._points[row] = None
                self._free.append(row)

    def entries(self, ids: Sequence[Hashable]) -> list[Entry]:
        """The entries of those of `ids` that are held, without their vectors."""
        rows = self._rows
        return [self._entries[rows[i]] for i in ids if i in rows]

    def take(self, rows: np.ndarray) -> tuple[list[Entry], dict[str, np.ndarray]]:
        """The entries and (len(rows), size) vector copies at `rows` (held points' rows, as `row_of` gives them)."""
        block, offset = _blocks_of(rows)
        entries = self._entries
        return [entries[r] for r in rows.tolist()], {name: self._gather(name, block, offset) for name in self._blocks}

    def row_of(self, ids: Sequence[Hashable]) -> np.ndarray:
        """The row of each of `ids`, -1 for one not held: what `take`, the metadata index and the term rows read by."""
        return np.fromiter(map(self._rows.get, ids, repeat(-1)), dtype=np.int64, count=len(ids))

    def rows(self, ids: Sequence[Hashable]) -> list[int]:
        """The rows of those of `ids` that are held (the metadata index keeps each item's metadata at its row)."""
        rows = self.row_of(ids)
        return rows[rows >= 0].tolist()

    def points_at(self, rows: np.ndarray) -> list[Hashable]:
        points = self._points
        return [points[row] for row in rows.tolist()]

    def nearest(self, name: str, vector: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k of `rows` nearest to `vector` by cosine, best first, with their cosines: an exact search. Over a
        quarter of the rows, every row is scored in place rather than the rows gathered first: of 100k rows of 768
        floats, gathering 25k / 84k and scoring them took 46 / 201 ms, scoring all in place 26 ms."""
        query = np.asarray(vector, dtype=np.float32)
        norm = np.linalg.norm(query)
        query = query / norm if norm > 0 else query
        if len(rows) * 4 > len(self._entries):
            scores = np.concatenate([block @ query for block in self._blocks[name]])[rows]
        else:
            scores = self._gather(name, *_blocks_of(rows)) @ query
        best = top_k(scores, k)
        return rows[best], scores[best]

    def _gather(self, name: str, block: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """The rows at (block, offset) of vector `name`, copied."""
        blocks = self._blocks[name]
        if len(block) == 1:  # one item's row (a query by id): one copy, without the per-block masks
            return blocks[int(block[0])][offset]
        out = np.empty((len(block), self._sizes[name]), dtype=np.float32)
        for b in np.unique(block).tolist():
            here = np.flatnonzero(block == b)
            out[here] = blocks[b][offset[here]]
        return out

    def _row_for(self, point: Hashable) -> int:
        row = self._rows.get(point)
        if row is not None:
            return row
        if self._free:
            row = self._free.pop()
        else:
            row = len(self._entries)
            self._entries.append(None)
            self._points.append(None)
            if row >= self._capacity:
                self._add_block()
        self._rows[point] = row
        self._points[row] = point
        return row

    def _add_block(self) -> None:
        rows = FIRST_BLOCK if self._capacity == 0 else self._capacity
        for name, blocks in self._blocks.items():
            blocks.append(np.zeros((rows, self._sizes[name]), dtype=np.float32))
        self._capacity += rows
