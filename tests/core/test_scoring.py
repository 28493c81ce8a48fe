"""Scoring against brute force: the per-field angular sum computed one pair at a time in plain Python."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core import scoring


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _brute_force_score(q_fields, q_present, c_fields, c_present, weights) -> float:
    """MetricBERT inference pair by pair: -sum_f w_f arccos(cos(q_f, c_f)) / pi; the title stands in when missing."""
    total = 0.0
    for f, w in enumerate(weights):
        use = f if (q_present[f] and c_present[f]) else 0
        cos = float(np.dot(_unit(q_fields[use]), _unit(c_fields[use])))
        total += w * math.acos(max(-1.0, min(1.0, cos))) / math.pi
    return -total


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 12),
    w_desc=st.floats(0.1, 3.0),
    missing=st.lists(st.booleans(), min_size=12, max_size=12),
    query_missing=st.booleans(),
)
def test_packed_rerank_equals_brute_force(seed, n, w_desc, missing, query_missing):
    rng = np.random.default_rng(seed)
    dim, weights = 8, [1.0, w_desc]
    fields = rng.standard_normal((n, 2, dim)).astype(np.float32)
    present = np.ones((n, 2), dtype=bool)
    present[:, 1] = ~np.array(missing[:n])
    fields[~present] = 0.0
    query = rng.standard_normal((2, dim)).astype(np.float32)
    query_present = np.array([True, not query_missing])

    packed = scoring.pack(fields, weights)
    assert np.allclose(np.linalg.norm(packed, axis=1), 1.0, atol=1e-5)
    units, recovered_present = scoring.unpack(packed, 2)
    assert (recovered_present == present).all()

    q_units = scoring.normalize_rows(query)
    distances = scoring.per_field_distances(q_units, query_present, units, recovered_present)
    scores = scoring.per_field_score(distances, weights)
    expected = [_brute_force_score(query, query_present, fields[i], present[i], weights) for i in range(n)]
    assert np.allclose(scores, expected, atol=1e-4)


def test_identical_item_has_distance_zero_and_opposite_has_one():
    v = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    cands = np.stack([v, -v])
    d = scoring.per_field_distances(v, np.array([True, True]), cands, np.ones((2, 2), dtype=bool))
    assert np.allclose(d[0], 0.0, atol=1e-3)
    assert np.allclose(d[1], 1.0, atol=1e-3)


def test_angular_distance_never_nan_on_rounding():
    assert not np.isnan(scoring.angular_distance(np.array([1.0000001, -1.0000001]))).any()


def test_top_k_orders_best_first_and_keeps_ann_order_on_ties():
    assert scoring.top_k(np.array([-0.5, -0.1, -0.5, -0.9]), 3).tolist() == [1, 0, 2]


def _brute_force_recobert(seed, seed_present, cands, cands_present, lambdas):
    """recobert.txt eq. 3 candidate by candidate, then z-normalised by hand."""

    def cos(a, b):
        return float(np.dot(_unit(a), _unit(b)))

    t_s = seed[0]
    d_s = seed[1] if seed_present[1] else seed[0]
    rows = []
    for fields, present in zip(cands, cands_present, strict=True):
        t_m = fields[0]
        d_m = fields[1] if present[1] else fields[0]
        rows.append([cos(d_m, d_s), cos(t_m, t_s), (1 + cos(t_m, d_s)) / 2, (1 + cos(t_s, d_m)) / 2])
    columns = list(zip(*rows, strict=True))
    total = [0.0] * len(rows)
    for weight, column in zip(lambdas, columns, strict=True):
        mean = sum(column) / len(column)
        std = math.sqrt(sum((c - mean) ** 2 for c in column) / len(column))
        for i, c in enumerate(column):
            total[i] += weight * ((c - mean) / std if std > 1e-12 else 0.0)
    return total


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 15), missing=st.lists(st.booleans(), min_size=15, max_size=15))
def test_recobert_fusion_equals_brute_force(seed, n, missing):
    rng = np.random.default_rng(seed)
    fields = rng.standard_normal((n, 2, 6)).astype(np.float32)
    present = np.ones((n, 2), dtype=bool)
    present[:, 1] = ~np.array(missing[:n])
    fields[~present] = 0.0
    query = rng.standard_normal((2, 6)).astype(np.float32)
    query_present = np.array([True, bool(seed % 2)])
    lambdas = (1.0, 0.5, 2.0, 1.0)
    units, recovered = scoring.unpack(scoring.pack(fields, [1.0, 1.0]), 2)
    got = scoring.recobert_score(scoring.normalize_rows(query), query_present, units, recovered, lambdas)
    assert np.allclose(got, _brute_force_recobert(query, query_present, fields, present, lambdas), atol=1e-4)


def test_top_k_breaks_ties_by_id_whatever_the_input_order():
    scores = np.array([0.5, 0.9, 0.5, 0.9, 0.1])
    ids = ["d", "b", "a", "c", "e"]
    assert [ids[i] for i in scoring.top_k(scores, 4, ids)] == ["b", "c", "a", "d"]
    order = [4, 2, 0, 3, 1]
    shuffled_ids = [ids[j] for j in order]
    assert [shuffled_ids[i] for i in scoring.top_k(scores[order], 4, shuffled_ids)] == ["b", "c", "a", "d"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, -1.0, -0.5, 0.0, 0.25, 0.5, np.nan]), min_size=1, max_size=40),
    st.integers(1, 45),
    st.randoms(use_true_random=False),
)
def test_top_k_by_id_is_the_first_k_of_the_whole_sort(scores, k, rnd):
    """The shortlist of scores tied with the k-th or better gives the k a sort of every candidate gives, ties (many
    here), -inf and NaN included."""
    ids = [f"id{n:03d}" for n in range(len(scores))]
    rnd.shuffle(ids)
    nan = [math.isnan(s) for s in scores]
    whole = sorted(range(len(scores)), key=lambda i: (nan[i], 0.0 if nan[i] else -scores[i], ids[i]))[:k]
    assert scoring.top_k(np.array(scores), k, ids).tolist() == whole


def test_unpack_gives_unit_fields_and_zero_rows_for_missing_fields():
    fields = np.random.default_rng(0).standard_normal((5, 2, 8)).astype(np.float32)
    fields[[1, 3], 1] = 0.0
    units, present = scoring.unpack(scoring.pack(fields, [1.0, 0.5]), 2)
    assert units.dtype == np.float32 and present.tolist() == [[True, True], [True, False]] * 2 + [[True, True]]
    np.testing.assert_allclose(units[present], scoring.normalize_rows(fields[present]), atol=1e-6)
    assert np.array_equal(units[~present], np.zeros((2, 8)))
