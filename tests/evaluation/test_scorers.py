"""In-process scoring of a second-order bundle: its first-order inferences read its mean vectors, which are the
mean-pooled export of the same model; its served rerank is the weighted mean of per-field S_F, as /similar's. A bundle
with character n-grams is scored on them as the service scores them."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.records import Item
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.scorers import BundleScorer
from tests.bundles import bundle_variant
from tests.core.test_lexical import brute_force_ngrams
from tests.tiny_model import CORPUS


def _data() -> EvalData:
    """Candidates with and without a description; queries by text (one without a description) and by id."""
    candidates = [
        Item(f"c{n}", " ".join(text.split()[:3]), "" if n % 4 == 0 else " ".join(text.split()[3:]))
        for n, text in enumerate(CORPUS[:12])
    ]
    queries = [Item("q0", "Leather boots", "brown, waterproof"), Item("q1", "green tea"), candidates[5]]
    return EvalData("annotated", "test", queries, candidates, [[1], [3], [6]], [None, None, 5], per="pair")


@pytest.mark.parametrize("inference", ["mean", "metric-two"])
def test_first_order_inference_of_a_second_order_bundle_is_the_mean_pooled_model(svd_bundle, tiny_bundle, inference):
    data = _data()
    got, expected = BundleScorer(svd_bundle, inference).scores(data), BundleScorer(tiny_bundle, inference).scores(data)
    assert got.shape == (3, 12)
    # Not the item against itself (left out of every ranking): arccos of a cosine within float noise of 1 is noise.
    got[2, 5] = expected[2, 5] = 0.0
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _explicit_similarity(encoder, a: str, b: str) -> float:
    """S_F from the d x d covariances D^T D of two texts' factors (the definition, no factor shortcut)."""
    x, y = (encoder.encode([t])[0, encoder.dim :].reshape(encoder.rank, encoder.dim).astype(np.float64) for t in (a, b))
    x, y = x.T @ x, y.T @ y
    return float((x * y).sum() / (np.linalg.norm(x) * np.linalg.norm(y)))


def test_served_second_order_score_is_the_mean_of_per_field_frobenius_similarities(svd_bundle):
    scorer = BundleScorer(svd_bundle)
    assert scorer.label == "tiny-svd2, served: per-field S_F of svd factors, k = 2 (1, 1)"
    data = _data()
    scores = scorer.scores(data)
    assert scores[2, 5] == pytest.approx(1.0, abs=1e-5)  # an item against itself (the harness leaves it out)
    for row in (0, 1, 2):  # by text with a description, by text without, by id
        query = data.queries[row]
        for col, candidate in enumerate(data.candidates):
            title = _explicit_similarity(scorer.encoder, query.title, candidate.title)
            both = query.description and candidate.description  # otherwise the title's S_F stands in
            description = (
                _explicit_similarity(scorer.encoder, query.description, candidate.description) if both else title
            )
            assert scores[row, col] == pytest.approx((title + description) / 2, abs=1e-4), (row, col)


def test_a_bundle_with_ngrams_is_scored_on_them_as_a_brute_force_tfidf(tiny_bundle, tmp_path):
    """What the service stores and scores, the evaluation computes too: each query's n-gram components per field,
    scikit-learn's TF-IDF of the same n-grams with the idf over the candidates, NaN where either lacks the field."""
    scorer = BundleScorer(bundle_variant(tiny_bundle, tmp_path / "bundle", ngrams=True))
    data = _data()
    queries, candidates, lexical = scorer.prepare(data)
    components = scorer.components(queries, candidates, lexical)
    for row, query in enumerate(data.queries):
        expected = {
            "ngrams_title": brute_force_ngrams(query.title, [c.title for c in data.candidates]),
            "ngrams_description": brute_force_ngrams(query.description, [c.description for c in data.candidates]),
            "ngrams_text": brute_force_ngrams(
                f"{query.title} {query.description}", [f"{c.title} {c.description}" for c in data.candidates]
            ),
        }
        for name, scores in expected.items():
            described = np.array([bool(c.description) and bool(query.description) for c in data.candidates])
            held = described if name == "ngrams_description" else np.ones(len(scores), dtype=bool)
            np.testing.assert_allclose(components[name][row][held], scores[held], rtol=1e-5, atol=1e-6)
            assert np.isnan(components[name][row][~held]).all()
