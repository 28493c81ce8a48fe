"""Second-order factors and S_F from factors, against explicit d x d covariances in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core import second_order


def explicit_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """S_F(A^T A, B^T B) from the d x d covariances themselves (the definition, eq. 1 of the paper)."""
    x, y = a.T @ a, b.T @ b
    return float((x * y).sum() / (np.linalg.norm(x) * np.linalg.norm(y)))


def truncated_covariance(a: np.ndarray, k: int) -> np.ndarray:
    _, s, vt = np.linalg.svd(a, full_matrices=False)
    return (vt[:k].T * s[:k] ** 2) @ vt[:k]


@settings(max_examples=40, deadline=None)
@given(
    n_a=st.integers(1, 40),
    n_b=st.integers(1, 40),
    d=st.sampled_from([8, 24]),
    seed=st.integers(0, 2**31 - 1),
)
def test_full_rank_similarity_from_factors_equals_explicit_covariances(n_a, n_b, d, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n_a, d)), rng.standard_normal((n_b, d))
    rank = max(n_a, n_b, d)  # nothing truncated: both n < d (Gram path) and n >= d (SVD path) are drawn
    fa, fb = second_order.factors(a, rank), second_order.factors(b, rank)
    got = second_order.frobenius_similarity(fa, fb[None])[0]
    assert got == pytest.approx(explicit_similarity(a, b), abs=2e-5)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_rank_k_factors_reproduce_the_truncated_covariance(k):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((12, 10))
    d = second_order.factors(a, k).astype(np.float64)
    np.testing.assert_allclose(d.T @ d, truncated_covariance(a, k), atol=1e-4)
    b = rng.standard_normal((30, 10))
    x, y = truncated_covariance(a, k), truncated_covariance(b, k)
    expected = (x * y).sum() / (np.linalg.norm(x) * np.linalg.norm(y))
    got = second_order.frobenius_similarity(d, second_order.factors(b, k)[None])[0]
    assert got == pytest.approx(expected, abs=1e-5)


def test_batched_scores_match_one_by_one_and_the_pairwise_form():
    rng = np.random.default_rng(0)
    texts = [rng.standard_normal((n, 16)) for n in (1, 3, 7, 20, 40)]
    _, stacked = second_order.represent(texts, 4)
    batched = second_order.frobenius_similarity(stacked[0], stacked)
    single = [second_order.frobenius_similarity(stacked[0], stacked[i : i + 1])[0] for i in range(len(texts))]
    np.testing.assert_allclose(batched, single, rtol=1e-6)
    np.testing.assert_allclose(second_order.pairwise_frobenius_similarity(stacked[:2], stacked)[0], batched)


@pytest.mark.parametrize(
    "tokens",
    [
        np.ones((1, 12)),  # one token
        np.tile(np.arange(12.0), (6, 1)),  # six identical tokens: rank 1
        np.vstack([np.eye(12)[:2]] * 3),  # rank 2 with repeated singular values
        np.zeros((4, 12)),  # all zeros (nothing to compare)
        np.zeros((0, 12)),  # no tokens
    ],
    ids=["one-token", "rank-1", "repeated-singular-values", "zeros", "empty"],
)
def test_degenerate_texts_have_finite_factors_and_scores(tokens):
    d = second_order.factors(tokens, 5)
    assert d.shape == (5, 12) and np.isfinite(d).all()
    mean = second_order.mean_vector(tokens)
    assert mean.shape == (12,) and np.isfinite(mean).all()
    other = second_order.factors(np.random.default_rng(1).standard_normal((9, 12)), 5)
    scores = second_order.frobenius_similarity(d, np.stack([d, other]))
    assert np.isfinite(scores).all() and ((scores >= 0) & (scores <= 1)).all()
    if np.abs(tokens).sum() > 0:  # a text with any signal is its own best match
        assert scores[0] == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_allclose(d.T.astype(np.float64) @ d, tokens.T @ tokens, atol=1e-5)
    else:
        assert (scores == 0).all()


def test_similarity_ignores_scale_and_row_signs():
    """S_F is a cosine of covariances: a store that rescales factors (cosine vectors) or an SVD that flips a
    singular vector's sign changes nothing."""
    rng = np.random.default_rng(3)
    a, b = second_order.factors(rng.standard_normal((10, 8)), 3), second_order.factors(rng.standard_normal((6, 8)), 3)
    base = second_order.frobenius_similarity(a, b[None])[0]
    flipped = a * np.array([[-1.0], [1.0], [-1.0]], dtype=np.float32)
    assert second_order.frobenius_similarity(7.5 * flipped, b[None])[0] == pytest.approx(base, rel=1e-5)


def test_serving_rank():
    assert second_order.serving_rank("svd", 5) == 5
    assert second_order.serving_rank("cov", 3) == 3  # truncated after training
    assert second_order.serving_rank("cov", None) == second_order.FULL_RANK_CAP
    with pytest.raises(ValueError):
        second_order.serving_rank("mean", None)


# --- served end to end: a second-order bundle exported from a tiny BERT, the embedded store, the HTTP service


@pytest.fixture(scope="module")
def svd_bundle(tmp_path_factory):
    from metricsearch.export.onnx_export import export_bundle
    from tests.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("second-order")
    return export_bundle(build_tiny_model(root / "model"), root / "bundle", name="tiny-svd", pooling="svd", rank_k=3)


def _engine(bundle, path, *, remote: bool = False, **options):
    """An Engine on the embedded store, or on qdrant-client's local mode (the server store's code path); `options`:
    the engine's own (candidates_min, ...)."""
    from qdrant_client import QdrantClient

    from metricsearch.core.bundle import load_bundle
    from metricsearch.encoder import Encoder
    from metricsearch.service.engine import Engine, vector_schema
    from metricsearch.service.store import EdgeStore, RemoteStore

    loaded = load_bundle(bundle)
    schema = vector_schema(loaded)
    if remote:
        store = RemoteStore(QdrantClient(path=str(path)), "items", schema)
    else:
        store = EdgeStore(path, schema, optimize_after_writes=0)
    options = {"candidates_min": 100, "candidates_factor": 10} | options
    return Engine(loaded.manifest, Encoder(loaded), store, **options), store


def test_export_options_for_second_order_pooling(svd_bundle, tmp_path):
    """Post-hoc truncation is `--pooling cov --rank-k K`; a metric or rank that does not fit is refused before any
    work, with what to change."""
    from metricsearch.core.bundle import load_bundle
    from metricsearch.export.onnx_export import ExportError, export_bundle

    model = svd_bundle.parent / "model"
    manifest = load_bundle(export_bundle(model, tmp_path / "cov2", pooling="cov", rank_k=2)).manifest
    assert (manifest.pooling, manifest.rank_k, manifest.metric) == ("cov", 2, "frobenius")
    assert (manifest.encoder.output_kind, manifest.encoder.output) == ("tokens", "token_embeddings")
    with pytest.raises(ExportError, match="frobenius"):
        export_bundle(model, tmp_path / "x", pooling="cov", metric="angular")
    with pytest.raises(ExportError, match="rank-k"):
        export_bundle(model, tmp_path / "y", pooling="mean", rank_k=3)
    with pytest.raises(ExportError, match="rank_k"):
        export_bundle(model, tmp_path / "z", pooling="svd")


def test_embedded_and_server_stores_rerank_alike(svd_bundle, tmp_path):
    """Congruence: the factors stored as a named vector read back the same from qdrant-edge and qdrant-client."""
    from metricsearch.core.records import Item
    from tests.service.api.test_api import ITEMS

    answers = []
    for remote in (False, True):
        engine, store = _engine(svd_bundle, tmp_path / f"store-{remote}", remote=remote)
        try:
            engine.indexer.index([Item(i["id"], i["title"], i["description"], i["metadata"]) for i in ITEMS])
            answers.append([(m.id, m.score) for m in engine.similar_to_item("p2", k=4)])
        finally:
            store.close()
    assert [i for i, _ in answers[0]] == [i for i, _ in answers[1]]
    np.testing.assert_allclose([s for _, s in answers[0]], [s for _, s in answers[1]], atol=1e-5)


def test_token_bundle_encodes_what_the_trained_model_gives(svd_bundle):
    """The exported token graph + the service's factors agree with the PyTorch model's token embeddings + the
    same factor code (what trainer validation scores)."""
    from sentence_transformers import SentenceTransformer

    from metricsearch.core.bundle import load_bundle
    from metricsearch.encoder import Encoder
    from metricsearch.trainer.validation import token_matrices
    from tests.tiny_model import CORPUS

    encoder = Encoder(load_bundle(svd_bundle))
    texts = [*CORPUS[:6], "ok", CORPUS[7] * 6]  # a 3-token text and one past max_seq_length
    encoded = encoder.encode(texts, batch_size=3)  # batches of mixed lengths: padding must not matter
    assert encoded.shape == (len(texts), encoder.dim * 4) and encoder.rank == 3
    model = SentenceTransformer(str(svd_bundle.parent / "model"), device="cpu", local_files_only=True)
    means, expected = second_order.represent(token_matrices(model, texts), 3)
    served = encoded[:, encoder.dim :].reshape(len(texts), 3, encoder.dim)
    np.testing.assert_allclose(
        second_order.pairwise_frobenius_similarity(served, served),
        second_order.pairwise_frobenius_similarity(expected, expected),
        atol=1e-4,
    )
    unit = means / np.linalg.norm(means, axis=1, keepdims=True)
    assert (np.sum(unit * encoded[:, : encoder.dim], axis=1) > 0.9999).all()


def test_engine_reranks_by_frobenius_similarity_and_an_item_scores_1_against_itself(svd_bundle, tmp_path):
    from metricsearch.core.records import Item
    from metricsearch.service.engine import FACTORS_VECTOR, Query
    from tests.service.api.test_api import ITEMS

    engine, store = _engine(svd_bundle, tmp_path / "store")
    try:
        items = [Item(i["id"], i["title"], i["description"], i["metadata"]) for i in ITEMS]
        assert engine.indexer.index(items).indexed == len(items)
        stored = store.get(["p1"], with_vectors=True)["p1"]
        assert stored.vectors[FACTORS_VECTOR].shape == (2 * 3 * engine.encoder.dim,)

        # The item's own texts as a query (without terms): it comes first, scoring 1, with S_F 1 on both fields.
        encoded = engine.encoder.encode([ITEMS[0]["title"], ITEMS[0]["description"]])
        best = engine.ranker.rank([Query(engine.layout.from_texts(encoded, free_text=False), {})], k=3)[0]
        assert best.id == "p1"
        assert best.score == pytest.approx(1.0, abs=1e-5)
        metric = {name: best.field_scores[name] for name in ("title", "description")}
        assert metric == pytest.approx({"title": 1.0, "description": 1.0}, abs=1e-5)

        # By id: every other item, scored as the weighted mean of per-field S_F (p4 has no description: title's).
        results = engine.similar_to_item("p1", k=10)
        assert "p1" not in [r.id for r in results] and len(results) == len(ITEMS) - 1
        fields = {i["id"]: _field_factors(engine.encoder, i) for i in ITEMS}
        for match in results:
            title = second_order.frobenius_similarity(fields["p1"][0], fields[match.id][0][None])[0]
            description = (
                second_order.frobenius_similarity(fields["p1"][1], fields[match.id][1][None])[0]
                if match.id != "p4"
                else title
            )
            assert match.score == pytest.approx((title + description) / 2, abs=1e-4)
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)

        # A metadata-only update keeps the stored factors.
        engine.indexer.index([Item(items[1].id, items[1].title, items[1].description, {"brand": "other"})])
        again = {r.id: r.score for r in engine.similar_to_item("p1", k=10)}
        assert again == pytest.approx({r.id: r.score for r in results}, abs=1e-6)
    finally:
        store.close()


def _field_factors(encoder, item: dict) -> np.ndarray:
    factors = np.zeros((2, encoder.rank, encoder.dim), dtype=np.float32)
    for col, text in enumerate((item["title"], item["description"])):
        if text:
            factors[col] = encoder.encode([text])[0, encoder.dim :].reshape(encoder.rank, encoder.dim)
    return factors


@pytest.mark.slow  # a service subprocess: about 10 s
def test_served_score_of_a_stored_item_against_itself_is_1(svd_bundle, start_service):
    from tests.service.api.test_api import ITEMS

    service = start_service(svd_bundle)
    with service.client() as client:
        assert client.post("/index", json={"items": ITEMS}).status_code == 200
        model = client.get("/model").json()
        assert (model["pooling"], model["rank_k"], model["metric"]) == ("svd", 3, "frobenius")
        query = {"title": ITEMS[2]["title"], "description": ITEMS[2]["description"], "k": 3}
        results = client.post("/similar", json=query).json()["results"]
        assert results[0]["id"] == ITEMS[2]["id"]
        assert results[0]["score"] == pytest.approx(1.0, abs=1e-5)
        by_id = client.post("/similar", json={"id": "p3", "k": 3}).json()["results"]
        assert len(by_id) == 3 and all(0.0 <= r["score"] <= 1.0 for r in by_id)
