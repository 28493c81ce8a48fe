"""Models under evaluation, each turning a task's queries and candidates into a (queries, candidates) score
matrix, higher = more similar: a bundle scored in-process with the service's own encoder and scoring code, a
running service over HTTP, and the baselines (TF-IDF, LDA, and the off-the-shelf model's mean pooling and
per-field inference)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from tqdm import tqdm

from metricsearch.core import scoring
from metricsearch.core.bundle import FieldSpec, load_bundle
from metricsearch.core.errors import InvalidInputError
from metricsearch.core.fusion import ComponentStats, fuse, stats_sample
from metricsearch.core.lexical import WHOLE_TEXT, LexicalFields, SparseVector, document_frequencies, idf, lexical_fields
from metricsearch.core.records import Item
from metricsearch.core.rerank import FieldVectors, Reranker
from metricsearch.encoder import Encoder
from metricsearch.evaluation.adaptation import adapted_stats
from metricsearch.evaluation.datasets import EvalData

Inference = Literal["served", "metric-two", "mean"]
INFERENCES: tuple[Inference, ...] = ("served", "metric-two", "mean")
BASELINES = ("tfidf", "lexical", "lda", "mean", "metric-two")
HTTP_MAX_K = 100  # the service's largest k


class Scorer(Protocol):
    label: str  # the table's row name
    how: str  # what produced the row

    def scores(self, data: EvalData) -> np.ndarray: ...


def whole_text(item: Item) -> str:
    """Title and description as one text, for models that see an item as one document."""
    return f"{item.title} {item.description}".strip()


class BundleScorer:
    """A bundle in-process with the service's Encoder and scoring functions over every candidate (no ANN cut-off):
    'served' = the bundle's own rerank (metric and field weights from its manifest, as the service runs it: the
    per-field S_F of the factors for a second-order bundle);
    'metric-two' = per-field angular with weights (1, 1) (MetricBERT's inference, the paper's "Metric_two");
    'mean' = title and description as one mean-pooled text, cosine (the paper's "Mean").
    A second-order bundle's 'metric-two' and 'mean' use its mean vectors, what its ANN search uses."""

    def __init__(self, bundle: Path, inference: Inference = "served", intra_op_threads: int = 0) -> None:
        if inference not in INFERENCES:
            raise InvalidInputError(f"unknown inference {inference!r}; use one of {', '.join(INFERENCES)}")
        loaded = load_bundle(bundle)
        self.manifest = loaded.manifest
        self.inference = inference
        self.encoder = Encoder(loaded, intra_op_threads=intra_op_threads)
        served = self.manifest
        if inference != "served":  # per-field angular (1, 1), whatever the bundle serves
            fields = [FieldSpec(name="title", weight=1.0), FieldSpec(name="description", weight=1.0)]
            update = {"metric": "angular", "fields": fields, "lexical": None, "fusion": None}
            served = served.model_copy(update=update)
        self.rerank = Reranker(served)
        self.lexical = lexical_fields(served)
        self.weights, self.metric = self.rerank.weights, self.rerank.metric
        self.label = {
            "served": f"{self.manifest.name}, served: {self._served_name()}",
            "metric-two": f"{self.manifest.name}, per-field angular (1, 1)",
            "mean": f"{self.manifest.name}, mean pooling of title + description, cosine",
        }[inference]
        self.how = f"`--bundle {bundle}" + ("`" if inference == "served" else f" --inference {inference}`")

    def _served_name(self) -> str:
        if self.manifest.metric == "recobert":
            return f"RecoBERT fusion {tuple(self.manifest.recobert_lambdas)}"
        if self.rerank.fusion is not None:
            weights = ", ".join(f"{name} {w:g}" for name, w in self.rerank.fusion.items())
            return f"{self.manifest.metric} fused with lexical scores ({weights})"
        weights = ", ".join(f"{w:g}" for w in self.weights)
        metric = self.manifest.metric
        if metric == "frobenius":
            metric = f"S_F of {self.manifest.pooling} factors, k = {self.encoder.rank}"
        return f"per-field {metric} ({weights})" if len(self.weights) > 1 else f"title only, {metric}"

    def scores(self, data: EvalData) -> np.ndarray:
        outside = [i for i, own in enumerate(data.own_index) if own is None]
        dim = self.encoder.dim
        if self.inference == "mean":
            candidates = self.encoder.encode([whole_text(i) for i in data.candidates])[:, :dim]
            queries = np.zeros((len(data.queries), dim), dtype=np.float32)
            queries[outside] = self.encoder.encode([whole_text(data.queries[i]) for i in outside])[:, :dim]
            for i, own in enumerate(data.own_index):
                if own is not None:
                    queries[i] = candidates[own]
            return queries @ candidates.T
        queries, candidates, lexical = self.prepare(data)
        if self.rerank.fusion is None:
            return np.stack([self.rerank(q, candidates, _row(lexical, i)).scores for i, q in enumerate(queries)])
        stats = adapted_stats(self, data.candidates, candidates, self.stats(data.candidates, candidates))
        return fuse(self.components(queries, candidates, lexical), stats, self.rerank.fusion_weights(stats))

    def prepare(self, data: EvalData) -> tuple[list[FieldVectors], FieldVectors, dict[str, np.ndarray] | None]:
        """The task's queries and candidates as the service holds them, and each pair's lexical scores."""
        dim = self.encoder.dim
        outside = [i for i, own in enumerate(data.own_index) if own is None]
        encoded_candidates = self._field_encodings(data.candidates)
        # As stored: packed into the ANN vector and unpacked again, exactly what the service reranks.
        stored, stored_present = scoring.unpack(
            scoring.pack(encoded_candidates[..., :dim], self.weights), len(self.weights)
        )
        stored_factors = self._factors(encoded_candidates)
        candidates = FieldVectors(stored, stored_present, stored_factors)
        # A query that is not a candidate is encoded, not packed, as /similar {"title", "description"} does.
        encoded = dict(zip(outside, self._field_encodings([data.queries[i] for i in outside]), strict=True))
        queries = []
        for i, own in enumerate(data.own_index):
            if own is not None:  # by id: the item's stored vectors, as /similar {"id"} does
                queries.append(FieldVectors(stored[own], stored_present[own], stored_factors[own]))
            else:
                vectors = encoded[i][:, :dim]
                fields, present = scoring.normalize_rows(vectors), np.linalg.norm(vectors, axis=-1) > 0
                queries.append(FieldVectors(fields, present, self._factors(encoded[i][None])[0]))
        lexical = self.lexical_matrices(data.queries, data.candidates, stored_present)
        return queries, candidates, lexical

    def components(
        self, queries: Sequence[FieldVectors], candidates: FieldVectors, lexical: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """Every component of every (query, candidate) pair, (queries, candidates) each."""
        rows: dict[str, list[np.ndarray]] = {}
        for i, query in enumerate(tqdm(queries, desc="scoring", unit="query", leave=False)):
            for name, values in self.rerank.metric_scores(query, candidates, _row(lexical, i))[1].items():
                rows.setdefault(name, []).append(values)
        return {name: np.stack(values) for name, values in rows.items()}

    def lexical_matrices(
        self, queries: Sequence[Item], candidates: Sequence[Item], present: np.ndarray
    ) -> dict[str, np.ndarray] | None:
        """Every query's lexical score against every candidate per lexical field, idf over the candidates (the
        service's is over its whole store); NaN where the query has no term in the field or the candidate lacks it,
        as Catalog._lexical."""
        if self.lexical is None:
            return None
        documents = [self.lexical.documents(c.title, c.description) for c in candidates]
        asked = [self.lexical.queries(q.title, q.description) for q in queries]
        out = {}
        for name, held in self.lexical.present(self.rerank.fields, present).items():
            terms = [query.get(name) for query in asked]
            stored = self.lexical.using.get(name, name)
            matrix = lexical_matrix([t or SparseVector.empty() for t in terms], [d[stored] for d in documents])
            out[name] = np.where(np.outer([t is not None for t in terms], held), matrix, np.nan)
        return out

    def stats(self, items: Sequence[Item], stored: FieldVectors) -> ComponentStats:
        """The catalog's component statistics as the service estimates them: pairs among the same sample."""
        sample = stats_sample([item.id for item in items])
        picked = FieldVectors(stored.fields[sample], stored.present[sample], stored.factors[sample])
        lexical = self.lexical_matrices([items[j] for j in sample], items, stored.present)
        parts: dict[str, list[np.ndarray]] = {}
        for n in range(len(sample)):
            query = FieldVectors(picked.fields[n], picked.present[n], picked.factors[n])
            among = {name: m[n, sample] for name, m in (lexical or {}).items()}
            others = np.arange(len(sample)) != n
            for name, values in self.rerank.metric_scores(query, picked, among or None)[1].items():
                parts.setdefault(name, []).append(values[others])
        return ComponentStats.estimate({name: np.concatenate(v) for name, v in parts.items()})

    def _field_encodings(self, items: Sequence[Item]) -> np.ndarray:
        """(n, F, width) title (and description) encodings, zeros for a blank field, as Catalog.index encodes:
        the unit vector, then for a second-order bundle its factors."""
        encodings = np.zeros((len(items), len(self.weights), self.encoder.width), dtype=np.float32)
        encodings[:, 0] = self.encoder.encode([i.title for i in items])
        if len(self.weights) > 1:
            described = [n for n, item in enumerate(items) if item.description.strip()]
            if described:
                encodings[described, 1] = self.encoder.encode([items[n].description for n in described])
        return encodings

    def _factors(self, encodings: np.ndarray) -> np.ndarray:
        """(n, F, rank, dim) factors of (n, F, width) encodings; rank 0 for a mean-pooled bundle."""
        return encodings[..., self.encoder.dim :].reshape(*encodings.shape[:2], self.encoder.rank, self.encoder.dim)


def _row(lexical: dict[str, np.ndarray] | None, i: int) -> dict[str, np.ndarray] | None:
    return None if lexical is None else {name: matrix[i] for name, matrix in lexical.items()}


def lexical_matrix(queries: Sequence[SparseVector], documents: Sequence[SparseVector]) -> np.ndarray:
    """(queries, documents) lexical scores with idf over the documents: core.lexical.lexical_scores as one sparse
    product."""
    from scipy.sparse import csr_matrix

    frequencies, n_documents = document_frequencies(documents)
    terms = sorted({int(t) for v in (*queries, *documents) for t in v.indices})
    column = {t: j for j, t in enumerate(terms)}

    def matrix(vectors: Sequence[SparseVector], values) -> csr_matrix:
        rows = np.repeat(np.arange(len(vectors)), [len(v) for v in vectors])
        cols = [column[int(t)] for v in vectors for t in v.indices]
        data = np.concatenate([values(v) for v in vectors]) if vectors else np.zeros(0)
        return csr_matrix((data, (rows, cols)), shape=(len(vectors), len(terms)))

    def weighted(v: SparseVector) -> np.ndarray:
        return v.values * idf(np.array([frequencies.get(int(t), 0) for t in v.indices]), n_documents)

    query_matrix = matrix(queries, weighted)
    return np.asarray((query_matrix @ matrix(documents, lambda v: v.values.astype(np.float64)).T).todense())


class LexicalScorer:
    """The service's lexical score alone, over the whole text (title + description), with the bundles' analyzer."""

    label = "lexical alone (TF-IDF cosine over title + description, the bundles' analyzer)"
    how = "core/lexical.py: sublinear tf, L2-normalised, idf over the candidates"

    def scores(self, data: EvalData) -> np.ndarray:
        fields = LexicalFields([])
        name = fields.names[WHOLE_TEXT]
        documents = [fields.documents(c.title, c.description)[name] for c in data.candidates]
        terms = [fields.queries(q.title, q.description).get(name, SparseVector.empty()) for q in data.queries]
        return lexical_matrix(terms, documents)


class TfidfScorer:
    """TF-IDF (sublinear tf) over title + description, fitted on every text of the task; cosine."""

    label = "TF-IDF (title + description)"
    how = "scikit-learn TfidfVectorizer(sublinear_tf=True), cosine"

    def scores(self, data: EvalData) -> np.ndarray:
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts = [whole_text(i) for i in data.queries + data.candidates]
        matrix = TfidfVectorizer(sublinear_tf=True).fit_transform(texts)
        return (matrix[: len(data.queries)] @ matrix[len(data.queries) :].T).toarray()


def umass_coherence(doc_term: np.ndarray, topic_word: np.ndarray, top_n: int = 10) -> float:
    """Mean UMass coherence (Mimno et al. 2011) of the topics' top words: sum over word pairs of
    log((D(w_i, w_j) + 1) / D(w_j)), D = document frequencies; higher is better. scikit-learn has no coherence
    and these few lines over the count matrix spare a gensim dependency."""
    present = (doc_term > 0).astype(np.float64)
    values = []
    for topic in topic_word:
        top = np.argsort(-topic)[:top_n]
        column = present[:, top]
        together = np.asarray((column.T @ column).todense() if hasattr(column, "todense") else column.T @ column)
        frequency = np.diag(together)
        values.append(
            sum(
                np.log((together[i, j] + 1.0) / frequency[j])
                for i in range(1, len(top))
                for j in range(i)
                if frequency[j] > 0
            )
        )
    return float(np.mean(values))


class LdaScorer:
    """LDA topic mixtures (scikit-learn), the topic count chosen by the best UMass coherence over a small grid
    (as metricbert.txt section 4.2 did); items compare by the Bhattacharyya coefficient of their mixtures."""

    def __init__(self, grid: Sequence[int] = (10, 25, 50), seed: int = 13, max_iter: int = 20) -> None:
        self.grid, self.seed, self.max_iter = tuple(grid), seed, max_iter
        self.label = "LDA"
        self.how = f"scikit-learn LatentDirichletAllocation, topics by UMass coherence over {list(self.grid)}"
        self.coherence: dict[int, float] = {}

    def scores(self, data: EvalData) -> np.ndarray:
        from scipy.sparse import csr_matrix
        from sklearn.decomposition import LatentDirichletAllocation
        from sklearn.feature_extraction.text import CountVectorizer

        texts = [whole_text(i) for i in data.queries + data.candidates]
        counts = csr_matrix(CountVectorizer(stop_words="english", min_df=2, max_df=0.5).fit_transform(texts))
        best, best_mixtures = None, None
        for n_topics in tqdm(self.grid, desc="LDA grid", unit="fit", leave=False):
            lda = LatentDirichletAllocation(
                n_components=n_topics, max_iter=self.max_iter, learning_method="batch", random_state=self.seed
            )
            mixtures = lda.fit_transform(counts)
            self.coherence[n_topics] = umass_coherence(counts, lda.components_)
            if best is None or self.coherence[n_topics] > self.coherence[best]:
                best, best_mixtures = n_topics, mixtures
        self.label = f"LDA ({best} topics)"
        roots = np.sqrt(best_mixtures)
        return roots[: len(data.queries)] @ roots[len(data.queries) :].T


class HttpScorer:
    """A running service, through POST /index and POST /similar. The candidates are indexed under fresh ids
    with a run tag in their metadata (so the store's other items are neither touched nor returned) and deleted
    at the end. The service returns at most its top 100: a relevant item beyond that counts as last (pessimistic),
    so on larger candidate sets MPR and MRR are lower bounds of the full ranking's. `free_text`: a query that is not
    a candidate is sent as one text, `{"text": title + description}`, as a search box would."""

    def __init__(
        self, url: str, api_key: str | None = None, batch: int = 250, timeout_s: float = 300, free_text: bool = False
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        self.batch = batch
        self.free_text = free_text
        self.manifest = self._call("GET", "/model")
        self.label = f"service at {self.url} ({self.manifest['name']})"
        self.how = f"`--url {self.url}`"

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        import httpx

        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise InvalidInputError(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 300:
            raise InvalidInputError(f"{self.url}{path} answered {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else {}

    def scores(self, data: EvalData) -> np.ndarray:
        if data.is_pairs and self.manifest.get("metric") == "recobert":
            raise InvalidInputError(
                "pairs over --url: a recobert bundle z-normalises its scores over the candidates, and a pair has "
                "one; evaluate the bundle in-process with --bundle"
            )
        run = uuid.uuid4().hex[:12]
        ids = [f"evaluate-{run}-{j}" for j in range(len(data.candidates))]
        try:
            for start in tqdm(range(0, len(ids), self.batch), desc="indexing", unit="batch", leave=False):
                items = [
                    {
                        "id": ids[j],
                        "title": data.candidates[j].title,
                        "description": data.candidates[j].description,
                        "metadata": {"evaluate_run": run, "evaluate_slot": str(j)},
                    }
                    for j in range(start, min(start + self.batch, len(ids)))
                ]
                self._call("POST", "/index", {"items": items})
            return self._search(data, run, ids)
        finally:
            self._delete(ids)

    def _search(self, data: EvalData, run: str, ids: list[str]) -> np.ndarray:
        slot = {item_id: j for j, item_id in enumerate(ids)}
        scores = np.full((len(data.queries), len(ids)), -np.inf)
        for i, query in enumerate(tqdm(data.queries, desc="querying", unit="query", leave=False)):
            body: dict = {"k": min(HTTP_MAX_K, len(ids)), "filter": {"evaluate_run": run}}
            if data.is_pairs:  # the score of exactly its own candidate
                body.update(k=1, filter={"evaluate_run": run, "evaluate_slot": str(i)})
            own = data.own_index[i]
            if own is not None:
                body["id"] = ids[own]
            elif self.free_text:
                body["text"] = whole_text(query)
            else:
                body["title"] = query.title
                if query.description.strip():
                    body["description"] = query.description
            for result in self._call("POST", "/similar", body)["results"]:
                scores[i, slot[result["id"]]] = result["score"]
        return scores

    def _delete(self, ids: list[str]) -> None:
        """Remove this run's items; an id never indexed (a run cut short) is a 404 and fine."""
        import httpx

        for item_id in ids:
            try:
                response = self.client.delete(f"/items/{item_id}")
            except httpx.HTTPError:
                return  # the service is gone: the error that stopped the run is the one to report
            if response.status_code not in (204, 404):
                raise InvalidInputError(f"{self.url} refused to delete {item_id}: {response.status_code}")

    def close(self) -> None:
        self.client.close()


def baseline_scorers(names: Sequence[str], base_bundle: Path, seed: int = 13) -> list[Scorer]:
    """The named baselines; 'mean' and 'metric-two' run the off-the-shelf `base_bundle`."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise InvalidInputError(f"unknown baseline(s) {', '.join(unknown)}; use {', '.join(BASELINES)}")
    made: dict[str, Scorer] = {}
    for name in names:
        if name == "tfidf":
            made[name] = TfidfScorer()
        elif name == "lexical":
            made[name] = LexicalScorer()
        elif name == "lda":
            made[name] = LdaScorer(seed=seed)
        else:
            made[name] = BundleScorer(base_bundle, name)  # type: ignore[arg-type]
    return list(made.values())
