"""Each objective on a tiny BERT: its loss falls on a fixed batch, and its pieces (pair segments, the siamese
and triplet losses, mining, the swap labels) compute what the papers say."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer

from metricsearch.core.records import Item, ScoredPair, Triplet
from metricsearch.trainer import losses, objectives
from metricsearch.trainer.config import TrainConfig
from metricsearch.trainer.objectives import MetricBERT, RecoBERT, build_objective
from tests.tiny_model import CORPUS, build_tiny_model

STEPS = 8


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("objectives") / "tiny")


def load(tiny_dir: Path) -> SentenceTransformer:
    torch.manual_seed(0)
    # eval(): no dropout, so a fixed batch gives a loss that changes only through the updates
    return SentenceTransformer(str(tiny_dir), device="cpu", local_files_only=True).eval()


ITEMS = [Item(id=str(i), title=" ".join(t.split()[:2]), description=t) for i, t in enumerate(CORPUS[:8])]
PAIRS = [ScoredPair(CORPUS[i], CORPUS[i + 1] if i % 2 else CORPUS[i][:30], float(i % 2 == 0)) for i in range(8)]
TRIPLETS = [Triplet(" ".join(CORPUS[i].split()[:3]), CORPUS[i], CORPUS[i + 8]) for i in range(8)]

CASES = {
    "metricbert": ({"objective": "metricbert", "catalog": "c.csv", "mlm_warmup_steps": 0}, ITEMS),
    "metricbert-random-contrastive-cosine": (
        {
            "objective": "metricbert",
            "catalog": "c.csv",
            "mining": "random",
            "loss": "contrastive",
            "distance": "cosine",
        },
        ITEMS,
    ),
    "metricbert-cosine-loss-no-mlm": (
        {"objective": "metricbert", "catalog": "c.csv", "loss": "cosine", "mlm_weight": 0},
        ITEMS,
    ),
    "metricbert-title-variants-no-mlm": (
        {"objective": "metricbert", "catalog": "c.csv", "title_variants": 0.5, "mlm_weight": 0},
        ITEMS,
    ),
    "metricbert-pseudo-matches": ({"objective": "metricbert", "catalog": "c.csv", "pseudo_matches": "b"}, TRIPLETS),
    "recobert": ({"objective": "recobert", "catalog": "c.csv", "mlm_warmup_steps": 0}, ITEMS),
    "sbert-siamese-cosine": ({"objective": "sbert-siamese", "pairs": "p.csv"}, PAIRS),
    "sbert-siamese-euclidean": (
        {"objective": "sbert-siamese", "pairs": "p.csv", "siamese_distance": "euclidean"},
        PAIRS,
    ),
    "sbert-triplet-euclidean": ({"objective": "sbert-triplet", "triplets": "t.csv"}, TRIPLETS),
    "sbert-triplet-cosine": (
        {"objective": "sbert-triplet", "triplets": "t.csv", "triplet_distance": "cosine"},
        TRIPLETS,
    ),
}


def losses_on_fixed_batch(tiny_dir: Path, options: dict, batch: list, *, bf16: bool = False) -> list[float]:
    """Train a few steps on one batch; the random draws (masks, negatives, swaps) repeat every step."""
    config = TrainConfig(out="unused", **options)
    model = load(tiny_dir)
    generator = torch.Generator()
    objective = build_objective(config, model, generator=generator, bf16=bf16)
    parameters = list(model.parameters()) + (list(objective.head.parameters()) if objective.head else [])
    optimizer = torch.optim.AdamW(parameters, lr=3e-3)
    history = []
    for _ in range(STEPS):
        generator.manual_seed(7)
        optimizer.zero_grad()
        loss = objective(batch).total
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return history


@pytest.mark.parametrize("case", list(CASES))
def test_loss_falls_on_a_fixed_batch(tiny_dir, case):
    options, batch = CASES[case]
    history = losses_on_fixed_batch(tiny_dir, options, batch)
    assert all(torch.isfinite(torch.tensor(history)))
    assert history[-1] < 0.9 * history[0], f"{case}: {history}"


def test_bf16_autocast_gives_a_finite_falling_loss(tiny_dir):
    options, batch = CASES["metricbert"]
    history = losses_on_fixed_batch(tiny_dir, options, batch, bf16=True)
    assert history[-1] < history[0], history


def test_metricbert_negative_is_the_nearest_other_description(tiny_dir, monkeypatch):
    """The triplet term equals the one computed with a brute-force hardest negative."""
    model = load(tiny_dir)
    config = TrainConfig(out="unused", objective="metricbert", catalog="c.csv", mlm_weight=0)
    objective = build_objective(config, model, generator=torch.Generator().manual_seed(0), bf16=False)
    assert isinstance(objective, MetricBERT)
    with torch.no_grad():
        loss = objective(ITEMS).parts["triplet"]
        a = model.encode([i.title for i in ITEMS], convert_to_tensor=True)
        p = model.encode([i.description for i in ITEMS], convert_to_tensor=True)
    d = losses.pairwise_angular_distance(a, p)
    expected = []
    for i in range(len(ITEMS)):
        d_neg = min(d[i, j] for j in range(len(ITEMS)) if j != i)
        expected.append(max(0.0, config.margin + d[i, i].item() - d_neg.item()))
    assert loss == pytest.approx(sum(expected) / len(expected), abs=1e-5)


@pytest.mark.parametrize("mining", ["hardest", "random"])
def test_metricbert_on_mined_triplets_takes_the_hardest_text_but_the_own_positive(tiny_dir, mining):
    """Hardest: the nearest of the batch's positives and given negatives, never the anchor's positive or a copy of
    it; random: the given negative."""
    model = load(tiny_dir)
    batch = [*TRIPLETS[:4], Triplet(TRIPLETS[4].anchor, TRIPLETS[0].positive, TRIPLETS[4].negative)]
    config = TrainConfig(out="u", objective="metricbert", catalog="c.csv", pseudo_matches="b", mining=mining)
    objective = build_objective(config, model, generator=torch.Generator().manual_seed(0), bf16=False)
    with torch.no_grad():
        loss = objective(batch).parts["triplet"]
        a, p, n = (
            model.encode([getattr(t, c) for t in batch], convert_to_tensor=True)
            for c in ("anchor", "positive", "negative")
        )
    texts = [t.positive for t in batch] + [t.negative for t in batch]
    d = losses.pairwise_angular_distance(a, torch.cat([p, n]))
    expected = []
    for i, t in enumerate(batch):
        if mining == "hardest":
            d_neg = min(d[i, j].item() for j, text in enumerate(texts) if text != t.positive)
        else:
            d_neg = d[i, len(batch) + i].item()
        expected.append(max(0.0, config.margin + d[i, i].item() - d_neg))
    assert loss == pytest.approx(sum(expected) / len(expected), abs=1e-5)


def test_recobert_swaps_about_half_the_descriptions_and_labels_them(tiny_dir, monkeypatch):
    model = load(tiny_dir)
    config = TrainConfig(out="unused", objective="recobert", catalog="c.csv", mlm_weight=0)
    objective = build_objective(config, model, generator=torch.Generator().manual_seed(3), bf16=False)
    assert isinstance(objective, RecoBERT)
    seen = []
    monkeypatch.setattr(losses, "tdm_loss", lambda t, d, labels: seen.append(labels) or (t * d).sum() * 0)
    captured = []
    real_features = objectives._features

    def spy(model, texts):
        captured.append(list(texts))
        return real_features(model, texts)

    monkeypatch.setattr(objectives, "_features", spy)
    batch = [Item(id=str(i), title=f"title {i}", description=CORPUS[i]) for i in range(len(CORPUS))]
    objective(batch)
    labels = seen[0].tolist()
    titles, descriptions = captured  # each field encoded on its own, as the service encodes it
    assert titles == [item.title for item in batch]
    for item, description, label in zip(batch, descriptions, labels, strict=True):
        assert (description == item.description) == (label == 1.0)
    assert 0.25 < sum(labels) / len(labels) < 0.75


def test_siamese_cosine_is_the_mse_of_cosine_to_score(tiny_dir):
    model = load(tiny_dir)
    config = TrainConfig(out="unused", objective="sbert-siamese", pairs="p.csv")
    objective = build_objective(config, model, generator=torch.Generator(), bf16=False)
    with torch.no_grad():
        loss = objective(PAIRS).total.item()
        a = model.encode([p.text_a for p in PAIRS], convert_to_tensor=True)
        b = model.encode([p.text_b for p in PAIRS], convert_to_tensor=True)
    expected = F.mse_loss(F.cosine_similarity(a, b), torch.tensor([p.score for p in PAIRS])).item()
    assert loss == pytest.approx(expected, abs=1e-5)


def test_siamese_euclidean_targets_one_minus_score(tiny_dir):
    model = load(tiny_dir)
    config = TrainConfig(out="unused", objective="sbert-siamese", pairs="p.csv", siamese_distance="euclidean")
    objective = build_objective(config, model, generator=torch.Generator(), bf16=False)
    with torch.no_grad():
        loss = objective(PAIRS).total.item()
        a = model.encode([p.text_a for p in PAIRS], convert_to_tensor=True)
        b = model.encode([p.text_b for p in PAIRS], convert_to_tensor=True)
    target = 1 - torch.tensor([p.score for p in PAIRS])
    assert loss == pytest.approx(F.mse_loss((a - b).norm(dim=1), target).item(), abs=1e-4)
