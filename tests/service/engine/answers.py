"""What the answer tests compare and count: two answers equal to float rounding, and how the cache answered."""

from __future__ import annotations

import math


def same_answer(answer, anew) -> bool:
    """The same items in the same order, with their titles and metadata, scores equal to float rounding: a rescored
    item's score comes from a product over other candidates than the ranking's, which BLAS may round differently."""
    return [(m.id, m.title, m.metadata) for m in answer] == [(m.id, m.title, m.metadata) for m in anew] and all(
        math.isclose(a.score, b.score, rel_tol=1e-9, abs_tol=1e-12)
        and a.field_scores.keys() == b.field_scores.keys()
        and all(
            (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
            for x, y in zip(a.field_scores.values(), b.field_scores.values(), strict=True)
        )
        for a, b in zip(answer, anew, strict=True)
    )


class Outcomes:
    """Counts how the answer cache answered: as cached, served once checked, or ranked anew."""

    def __init__(self, engine, monkeypatch) -> None:
        self.hits = self.checked = self.anew = 0
        lookup, rechecked = engine.answers.lookup, engine.answers.rechecked

        def looked_up(key):
            found = lookup(key)
            self.hits += found is not None and found.written == frozenset()
            return found

        def told(kept):
            self.checked += kept
            self.anew += not kept
            rechecked(kept)

        monkeypatch.setattr(engine.answers, "lookup", looked_up)
        monkeypatch.setattr(engine.answers, "rechecked", told)
