"""The lexical candidates of several queries come from their whole texts' terms summed, in one sparse prefetch."""

from __future__ import annotations

import numpy as np

from metricsearch.core.lexical import WHOLE_TEXT


def test_the_prefetch_of_several_queries_sums_their_whole_text_terms(engine):
    lexical = engine.ranker.lexical
    whole = lexical.lexical.names[WHOLE_TEXT]
    red = lexical.lexical.queries("red shirt", None)
    blue = lexical.lexical.queries("blue shirt", None)
    assert lexical.prefetch([red]) == {whole: red[whole]}
    [(name, summed)] = lexical.prefetch([red, blue]).items()
    assert name == whole
    expected: dict[int, float] = {}
    for terms in (red, blue):
        for index, value in zip(terms[whole].indices.tolist(), terms[whole].values.tolist(), strict=True):
            expected[index] = expected.get(index, 0.0) + value
    assert dict(zip(summed.indices.tolist(), summed.values.tolist(), strict=True)) == expected
    assert np.all(np.diff(summed.indices) > 0)
    assert lexical.prefetch([{}]) is None
