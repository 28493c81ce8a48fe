"""Title variants: part numbers survive every variant (their hyphens aside), other words are dropped or reordered,
never all of them, and the same random draws make the same variant."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core.augment import is_part_number, title_variant

WORD = st.text(alphabet="abcXYZ019-", min_size=1, max_size=9)


def draws(seed: int):
    stream = random.Random(seed)
    return lambda n: [stream.random() for _ in range(n)]


def test_a_part_number_is_a_longer_word_with_a_digit():
    assert [is_part_number(w) for w in ("PSLX350H", "PS-LX350H", "a1b2", "X10", "turntable")] == [
        True,
        True,
        True,
        False,
        False,
    ]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(WORD, min_size=1, max_size=8), seed=st.integers(0, 2**31))
def test_a_variant_is_never_empty_and_keeps_every_part_number_up_to_hyphens(words, seed):
    title = " ".join(words)
    variant = title_variant(title, draws(seed))
    assert variant.strip()
    unhyphenated = sorted(w.replace("-", "") for w in variant.split())
    for word in title.split():
        if is_part_number(word):
            assert word.replace("-", "") in unhyphenated


def test_the_same_draws_make_the_same_variant_and_others_vary_it():
    title = "Sony Belt Drive Turntable Black PSLX350H"
    first = [title_variant(title, draws(seed)) for seed in range(40)]
    assert first == [title_variant(title, draws(seed)) for seed in range(40)]
    assert len(set(first)) > 10
    assert any("-" in v for v in first)  # a hyphen was inserted into the part number
    assert any(len(v.split()) < len(title.split()) for v in first)  # a generic word was dropped


def test_hyphens_of_a_part_number_are_removed_in_some_variants():
    assert {title_variant("PS-LX350H", draws(seed)) for seed in range(30)} == {"PS-LX350H", "PSLX350H"}


def test_a_title_whose_every_word_is_dropped_comes_back_unchanged():
    assert title_variant("red cotton shirt", lambda n: [0.0] * n) == "red cotton shirt"
