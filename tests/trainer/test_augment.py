"""Title variants (trainer.augment): part numbers survive every variant, the rest is perturbed reproducibly, and
the share of variant positives is what was asked."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.trainer.augment import is_part_number, positive_texts, title_variant
from metricsearch.trainer.config import TrainConfig

WORD = st.text(alphabet="abcXYZ019-", min_size=1, max_size=9)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(WORD, min_size=1, max_size=8), seed=st.integers(0, 2**31))
def test_a_variant_is_never_empty_and_keeps_every_part_number_up_to_hyphens(words, seed):
    title = " ".join(words)
    variant = title_variant(title, torch.Generator().manual_seed(seed))
    assert variant.strip()
    unhyphenated = sorted(w.replace("-", "") for w in variant.split())
    for word in title.split():
        if is_part_number(word):
            assert word.replace("-", "") in unhyphenated


def test_variants_vary_and_repeat_under_the_same_seed():
    title = "Sony Belt Drive Turntable Black PSLX350H"
    first = [title_variant(title, torch.Generator().manual_seed(s)) for s in range(40)]
    again = [title_variant(title, torch.Generator().manual_seed(s)) for s in range(40)]
    assert first == again
    assert len(set(first)) > 10
    assert any("-" in v for v in first)  # a hyphen was inserted into the part number
    assert any(len(v.split()) < len(title.split()) for v in first)  # a generic word was dropped


def test_hyphens_of_a_part_number_are_removed_in_some_variants():
    variants = {title_variant("PS-LX350H", torch.Generator().manual_seed(s)) for s in range(30)}
    assert variants == {"PS-LX350H", "PSLX350H"}


def test_share_zero_gives_the_descriptions_and_draws_nothing():
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    assert positive_texts(["a b", "c d"], ["desc a", "desc c"], 0.0, generator) == ["desc a", "desc c"]
    assert torch.equal(generator.get_state(), state)


def test_share_one_gives_title_variants_and_an_item_without_description_always_does():
    titles = [f"Acme Widget Model{i}00 Black" for i in range(200)]
    all_variants = positive_texts(titles, ["a description"] * 200, 1.0, torch.Generator().manual_seed(0))
    assert all(f"Model{i}00" in v.replace("-", "") for i, v in enumerate(all_variants))
    some = positive_texts(titles, ["a description", ""] * 100, 0.5, torch.Generator().manual_seed(0))
    described = [text for i, text in enumerate(some) if i % 2 == 0]
    assert all(text != "" for text in some[1::2])  # no description: a variant, never the empty text
    assert 0.35 < sum(text != "a description" for text in described) / len(described) < 0.65


def test_title_variants_are_a_metricbert_option():
    assert TrainConfig(out="o", objective="metricbert", catalog="c.csv").title_variants == 0.0
    with pytest.raises(ValueError, match="--title-variants applies to metricbert only"):
        TrainConfig(out="o", objective="recobert", catalog="c.csv", title_variants=0.5)
    with pytest.raises(ValueError):
        TrainConfig(out="o", objective="metricbert", catalog="c.csv", title_variants=1.5)
