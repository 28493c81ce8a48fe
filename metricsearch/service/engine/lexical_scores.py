"""The lexical parts of a ranking (TF-IDF per field, the whole text, codes, and each field's character n-grams where
the bundle stores them) of a bundle with lexical vectors: which of a query's sparse vectors the store scores, the
whole-text vector that prefetches lexical candidates, and the store's scores turned into components, NaN where either
side lacks the field. The store computes the scores, so the idf is the live catalog's."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from metricsearch.core.lexical import WHOLE_TEXT, LexicalFields, SparseVector
from metricsearch.service.store.base import Store


class LexicalScores:
    def __init__(self, lexical: LexicalFields, fields: Sequence[str], store: Store) -> None:
        self.lexical = lexical
        self.fields = list(fields)
        self.store = store
        self.using = lexical.using

    def queries(self, terms: dict[str, SparseVector], names: Collection[str] | None) -> dict[str, SparseVector]:
        """The query's vectors of the lexical components in `names` (else of all) that the store scores."""
        components = self.lexical.components
        return {n: v for n, v in terms.items() if n in components and (names is None or n in names)}

    def components(
        self,
        scores: Mapping[str, np.ndarray],
        terms: dict[str, SparseVector],
        present: np.ndarray,
        names: Collection[str] | None,
    ) -> dict[str, np.ndarray]:
        """The components in `names` (else all) from the store's `scores`; NaN where the query has no term in the
        field or the candidate lacks it (the whole text is never missing)."""
        held = self.lexical.present(self.fields, present, names)
        return {
            name: np.where(here & (name in terms), scores.get(name, np.zeros(len(present))), np.nan)
            for name, here in held.items()
        }

    def score(
        self,
        terms: dict[str, SparseVector],
        present: np.ndarray,
        points: Sequence[str | int],
        names: Collection[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Each candidate's components in `names` (else all), scored by the store in a call of its own."""
        scores = self.store.lexical_scores(self.queries(terms, names), points, self.using)
        return self.components(scores, terms, present, names)

    def prefetch(self, terms: Sequence[dict[str, SparseVector]]) -> dict[str, SparseVector] | None:
        """The whole-text vector that prefetches lexical candidates, for one query or several (their terms summed).
        The whole text alone: it holds every field's terms, and one sparse prefetch costs a third of three."""
        whole_name = self.lexical.names[WHOLE_TEXT]
        whole = [{whole_name: t[whole_name]} for t in terms if whole_name in t]
        if not whole:
            return None
        if len(whole) == 1:
            return whole[0]
        indices = np.concatenate([w[whole_name].indices for w in whole])
        values = np.concatenate([w[whole_name].values for w in whole])
        merged, inverse = np.unique(indices, return_inverse=True)
        return {whole_name: SparseVector(merged, np.bincount(inverse, weights=values).astype(np.float32))}
