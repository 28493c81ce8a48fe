"""MMR and per-group caps against brute force written as plainly as the definition reads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core import diversity, scoring
from metricsearch.core.rerank import FieldVectors


def brute_force(relevance, want, lam, sim, groups, group_size):
    """The definition, one candidate at a time: maximise (1 - lam) rel' - lam max_{picked} sim, rel' the min-max
    rescaled relevance; skip a candidate whose group is full; ties go to the more relevant, then the earlier."""
    n = len(relevance)
    span = max(relevance) - min(relevance) if n else 0
    scaled = [(r - min(relevance)) / span if span > 1e-12 else 0.0 for r in relevance]
    picked, counts = [], {}
    while len(picked) < want:
        best, best_key = None, None
        for i in range(n):
            if i in picked or counts.get(groups[i], 0) >= group_size:
                continue
            nearest = max((sim[i][j] for j in picked), default=0.0)
            value = (1 - lam) * scaled[i] - lam * nearest if lam > 0 else relevance[i]
            key = (value, relevance[i], -i)
            if best_key is None or key > best_key:
                best, best_key = i, key
        if best is None:
            break
        picked.append(best)
        counts[groups[best]] = counts.get(groups[best], 0) + 1
    return picked


@st.composite
def pools(draw):
    n = draw(st.integers(1, 12))
    relevance = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))  # integers: ties happen
    raw = draw(st.lists(st.integers(0, 4), min_size=n * n, max_size=n * n))
    sim = np.array(raw, dtype=np.float64).reshape(n, n) / 4
    sim = np.maximum(sim, sim.T)
    np.fill_diagonal(sim, 1.0)
    groups = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    return np.array(relevance, dtype=np.float64), sim, groups


@settings(max_examples=200, deadline=None)
@given(pool=pools(), want=st.integers(1, 12), lam=st.sampled_from([0.0, 0.3, 0.7, 1.0]), size=st.integers(1, 3))
def test_select_is_greedy_mmr_with_group_caps(pool, want, lam, size):
    relevance, sim, groups = pool
    picked = diversity.select(
        relevance, want, diversity=lam, similarity_to=lambda j: sim[j], groups=groups, group_size=size
    )
    expected = brute_force(list(relevance), want, lam, sim.tolist(), groups, size)
    assert picked == expected
    counts = {g: sum(groups[i] == g for i in picked) for g in set(groups)}
    assert max(counts.values()) <= size
    assert len(set(picked)) == len(picked)


@settings(max_examples=100, deadline=None)
@given(scores=st.lists(st.integers(-3, 3), min_size=1, max_size=30), k=st.integers(1, 30))
def test_diversity_zero_is_the_plain_ranking(scores, k):
    relevance = np.array(scores, dtype=np.float64)
    assert diversity.select(relevance, k) == scoring.top_k(relevance, k).tolist()


def test_full_diversity_picks_the_least_similar_next():
    relevance = np.array([1.0, 0.9, 0.1])
    sim = np.array([[1.0, 0.99, 0.0], [0.99, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert diversity.select(relevance, 2, diversity=0.0) == [0, 1]
    assert diversity.select(relevance, 2, diversity=0.7, similarity_to=lambda j: sim[j]) == [0, 2]


def test_fewer_than_wanted_when_the_groups_run_out():
    assert diversity.select(np.array([3.0, 2.0, 1.0]), 3, groups=["x", "x", "y"], group_size=1) == [0, 2]


def test_bad_diversity_is_refused():
    with pytest.raises(ValueError, match="diversity"):
        diversity.select(np.zeros(2), 1, diversity=1.5, similarity_to=lambda j: np.zeros(2))


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000), w=st.floats(0.1, 3.0))
def test_similarity_is_one_minus_the_weighted_mean_angular_distance(seed, w):
    rng = np.random.default_rng(seed)
    fields = _unit(rng.standard_normal((5, 2, 6))).astype(np.float32)
    present = np.ones((5, 2), dtype=bool)
    present[3, 1] = False
    fields[3, 1] = 0
    candidates = FieldVectors(fields, present)
    weights = [1.0, w]
    for j in range(5):
        sim = diversity.similarity_to(candidates, j, "angular", weights)
        assert sim[j] == pytest.approx(1.0, abs=1e-3)  # arccos near 1 in float32
        assert np.all((sim >= -1e-9) & (sim <= 1 + 1e-9))
        distances = scoring.per_field_distances(fields[j], present[j], fields, present)
        np.testing.assert_allclose(sim, 1 + scoring.per_field_score(distances, weights) / (1 + w), atol=1e-6)


def test_intra_list_distance_of_copies_is_zero_and_of_opposites_one():
    same = FieldVectors(np.ones((3, 1, 4), dtype=np.float32) / 2, np.ones((3, 1), dtype=bool))
    assert diversity.intra_list_distance(same, "angular", [1.0]) == pytest.approx(0.0, abs=1e-3)
    opposite = FieldVectors(np.array([[[1.0, 0]], [[-1.0, 0]]], dtype=np.float32), np.ones((2, 1), dtype=bool))
    assert diversity.intra_list_distance(opposite, "angular", [1.0]) == pytest.approx(1.0)
