"""Lexical evidence: the analyzer and BM25 (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and
Beyond", 2009) that every item's title and description get beside their dense vectors.

A document's sparse vector holds BM25's saturated term frequency per term, tf (k1 + 1) / (tf + k1 (1 - b + b dl /
avgdl)); a query's holds 1 per distinct term; their dot product weighted by each query term's inverse document
frequency, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), is BM25. Qdrant applies that same idf to stored sparse vectors
(the `idf` modifier), so the embedded store, a Qdrant server and `bm25_scores` below rank alike by construction.

Written by hand: Qdrant's built-in BM25 analyzers lowercase and split words but do not join a part number's pieces
("PS-LX350H" vs "PSLX350H"), which is most of what a product catalog's lexical match is about; and term ids are a
stable hash, so no vocabulary is stored or shared between processes.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from metricsearch.core.bundle import Manifest

ANALYZER = "words+joined-part-numbers/v1"
_PIECES = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class SparseVector:
    """Term ids (uint32, ascending) and their weights."""

    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def empty(cls) -> SparseVector:
        return cls(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.float32))

    def __len__(self) -> int:
        return len(self.indices)


def analyze(text: str) -> list[str]:
    """Lower-cased alphanumeric pieces of each whitespace-separated word, plus, for a word of several pieces with a
    digit in it (a model or part number: "PS-LX350H", "EOS-5D"), the pieces joined ("pslx350h"), so that both
    spellings of a part number share a term."""
    terms: list[str] = []
    for word in unicodedata.normalize("NFKC", text).lower().split():
        pieces = _PIECES.findall(word)
        terms += pieces
        if len(pieces) > 1 and any(c.isdigit() for c in word):
            terms.append("".join(pieces))
    return terms


def term_id(term: str) -> int:
    """A stable 32-bit id: the same in every process and store, with no vocabulary to keep."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "little")


def _sparse(weights: dict[int, float]) -> SparseVector:
    indices = np.fromiter(sorted(weights), dtype=np.uint32, count=len(weights))
    return SparseVector(indices, np.array([weights[int(i)] for i in indices], dtype=np.float32))


@dataclass(frozen=True)
class Bm25:
    """BM25's document-side parameters. `avg_length` is a fixed expected field length in terms (as Qdrant's own
    BM25 takes one), so a document's vector never changes when other documents arrive."""

    k1: float = 1.2
    b: float = 0.75
    avg_length: float = 12.0

    def document(self, text: str) -> SparseVector:
        terms = analyze(text)
        if not terms:
            return SparseVector.empty()
        counts = Counter(term_id(t) for t in terms)
        norm = self.k1 * (1.0 - self.b + self.b * len(terms) / self.avg_length)
        return _sparse({i: tf * (self.k1 + 1.0) / (tf + norm) for i, tf in counts.items()})


def query_vector(text: str) -> SparseVector:
    """1 per distinct term of the query: BM25 ignores a query term's repetitions."""
    return _sparse(dict.fromkeys((term_id(t) for t in analyze(text)), 1.0))


def idf(document_frequency: np.ndarray, documents: int) -> np.ndarray:
    """ln(1 + (N - df + 0.5) / (df + 0.5)): Qdrant's idf modifier, always positive."""
    df = np.asarray(document_frequency, dtype=np.float64)
    return np.log1p((documents - df + 0.5) / (df + 0.5))


def document_frequencies(documents: Iterable[SparseVector]) -> tuple[Counter[int], int]:
    """How many of the documents hold each term id, and how many documents hold any term (Qdrant counts a point
    without the sparse vector as absent)."""
    frequencies: Counter[int] = Counter()
    count = 0
    for document in documents:
        if len(document):
            frequencies.update(document.indices.tolist())
            count += 1
    return frequencies, count


def bm25_scores(
    query: SparseVector, documents: Sequence[SparseVector], frequencies: Counter[int], n_documents: int
) -> np.ndarray:
    """BM25 of the query against each document, with the given catalog-wide document frequencies: the brute-force
    reference the stores' sparse search is checked against, and the evaluation's lexical score."""
    if not len(query) or not documents:
        return np.zeros(len(documents))
    weights = idf(np.array([frequencies.get(int(i), 0) for i in query.indices]), n_documents)
    position = dict(zip(query.indices.tolist(), weights.tolist(), strict=True))
    scores = np.zeros(len(documents))
    for n, doc in enumerate(documents):
        pairs = zip(doc.indices.tolist(), doc.values.tolist(), strict=True)
        scores[n] = math.fsum(position.get(t, 0.0) * v for t, v in pairs)
    return scores


class LexicalFields:
    """A bundle's lexical vectors per embedded field, named `lexical_<field>` as the stores and `scores` name them:
    an item's documents and a query's terms, field to field (a free text stands for every field)."""

    def __init__(self, fields: Sequence[str], k1: float, b: float, avg_length: dict[str, float]) -> None:
        self.names = {field: f"lexical_{field}" for field in fields}
        self._bm25 = {field: Bm25(k1, b, avg_length.get(field, Bm25.avg_length)) for field in fields}

    def documents(self, title: str, description: str) -> dict[str, SparseVector]:
        texts = {"title": title, "description": description}
        return {name: self._bm25[field].document(texts[field]) for field, name in self.names.items()}

    def queries(
        self, title: str | None, description: str | None, free_text: str | None = None
    ) -> dict[str, SparseVector]:
        """A field the query lacks gets no vector (its component is then unknown, not 0)."""
        texts = {"title": title, "description": description}
        return {
            name: query_vector(free_text if free_text is not None else texts[field])
            for field, name in self.names.items()
            if free_text is not None or (texts[field] or "").strip()
        }


def lexical_fields(manifest: Manifest) -> LexicalFields | None:
    """The bundle's lexical fields: the fields it embeds, with its BM25 parameters; None without lexical vectors."""
    spec = manifest.lexical
    if spec is None:
        return None
    return LexicalFields([f.name for f in manifest.fields if f.weight > 0], spec.k1, spec.b, spec.avg_length)
