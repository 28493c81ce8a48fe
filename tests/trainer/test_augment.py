"""MetricBERT's positives (trainer.augment): title variants drawn from the run's torch generator repeat under the
same seed, and the share of variant positives is what was asked. The variants themselves: tests/core/test_augment.py."""

from __future__ import annotations

import torch

from metricsearch.trainer.augment import positive_texts, title_variant


def test_variants_vary_and_repeat_under_the_same_seed():
    title = "Sony Belt Drive Turntable Black PSLX350H"
    first = [title_variant(title, torch.Generator().manual_seed(s)) for s in range(40)]
    again = [title_variant(title, torch.Generator().manual_seed(s)) for s in range(40)]
    assert first == again
    assert len(set(first)) > 10
    assert any("-" in v for v in first)  # a hyphen was inserted into the part number
    assert any(len(v.split()) < len(title.split()) for v in first)  # a generic word was dropped


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
