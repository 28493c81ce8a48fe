"""The four training objectives. Each turns one batch of examples into a loss on a SentenceTransformer model,
composing the distances and losses of `trainer.losses`, the MLM head of `trainer.mlm`, and sentence-transformers'
own losses where they compute the same thing.

Forward passes run under bf16 autocast when asked; every loss is computed from float32 embeddings (casting
after the encoder), because cosines of near neighbours are indistinguishable in bfloat16. Every objective compares
texts through the configured pooling (`trainer.pooling`): the mean embedding, or the unit second-order vector whose
cosine is S_F.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss, TripletLoss
from sentence_transformers.sentence_transformer.losses.triplet import TripletDistanceMetric
from torch import Tensor

from metricsearch.core.errors import TrainerError
from metricsearch.core.records import Item, ScoredPair, Triplet
from metricsearch.trainer import losses
from metricsearch.trainer.augment import positive_texts
from metricsearch.trainer.config import TrainConfig
from metricsearch.trainer.data import mask_tokens
from metricsearch.trainer.mlm import MLMHead
from metricsearch.trainer.pooling import pool


@dataclass(frozen=True)
class BatchLoss:
    """The loss to minimise and its terms as floats, for the log."""

    total: Tensor
    parts: dict[str, float]


class Objective(Protocol):
    """What the loop needs: a loss per batch, and the MLM head (if any) to optimise and save with the encoder."""

    head: MLMHead | None

    def __call__(self, batch: Sequence[Any]) -> BatchLoss: ...


def _embed_columns(model: SentenceTransformer, columns: list[dict[str, Any]], config: TrainConfig) -> list[Tensor]:
    """One float32 representation per column: sentence-transformers' merged forward for mean pooling; one forward
    per column for second-order pooling, which needs each column's token embeddings and mask."""
    if config.pooling == "mean":
        return [e.float() for e in embed_columns(model, columns)]
    return [pool(model(features), config.pooling, config.rank_k).float() for features in columns]


def _features(model: SentenceTransformer, texts: list[str]) -> dict[str, Any]:
    features = model.preprocess(texts)
    return {k: v.to(model.device) if isinstance(v, Tensor) else v for k, v in features.items()}


class _Autocast:
    """bf16 autocast on the model's device type, or nothing; a fresh torch.autocast per use."""

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.device_type, self.enabled = device.type, enabled

    def __call__(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.enabled)


class MaskedLM:
    """BERT's masked-language-model loss: masks token ids in place (a copy the caller then encodes) and scores
    the encoder's last hidden states at the masked positions with the head."""

    def __init__(self, model: SentenceTransformer, head: MLMHead, probability: float, generator: torch.Generator):
        tokenizer = model[0].tokenizer
        if tokenizer.mask_token_id is None:
            raise TrainerError("the base model's tokenizer has no [MASK] token; train with --mlm-weight 0")
        self.head = head
        self.probability = probability
        self.generator = generator
        self.special_ids = set(tokenizer.all_special_ids)
        self.mask_id = tokenizer.mask_token_id
        self.vocab_size = min(len(tokenizer), head.bias.shape[0])

    @classmethod
    def create(cls, model: SentenceTransformer, probability: float, generator: torch.Generator) -> MaskedLM:
        """A new head tied to the model's word embeddings (the packaged base ships none: shared/MODELS.md)."""
        encoder = model[0].auto_model
        embeddings = encoder.get_input_embeddings()
        eps = getattr(encoder.config, "layer_norm_eps", 1e-12)
        head = MLMHead(embeddings.embedding_dim, embeddings, layer_norm_eps=eps).to(model.device)
        return cls(model, head, probability, generator)

    def mask(self, features: dict[str, Any]) -> Tensor:
        """Replace features' input_ids by a masked copy; return the labels (-100 where not masked)."""
        features["input_ids"], labels = mask_tokens(
            features["input_ids"],
            features["attention_mask"],
            special_ids=self.special_ids,
            mask_id=self.mask_id,
            vocab_size=self.vocab_size,
            probability=self.probability,
            generator=self.generator,
        )
        return labels

    def loss(self, token_embeddings: Tensor, labels: Tensor) -> Tensor:
        return self.head(token_embeddings, labels)


class _TitleDescriptionObjective:
    """What MetricBERT and RecoBERT share: titles and descriptions masked (when MLM is on) and encoded once each,
    so one pass per field gives both the pooled embeddings and the token states the MLM loss reads."""

    def __init__(
        self,
        model: SentenceTransformer,
        config: TrainConfig,
        mlm: MaskedLM | None,
        generator: torch.Generator,
        amp: _Autocast,
    ) -> None:
        self.model, self.mlm, self.generator, self.amp = model, mlm, generator, amp
        self.head = mlm.head if mlm else None
        self.similarity_weight, self.mlm_weight = config.similarity_weight, config.mlm_weight
        self.pooling, self.rank_k = config.pooling, config.rank_k

    def _encode(self, titles: list[str], descriptions: list[str]) -> tuple[Tensor, Tensor, Tensor | None]:
        """(title embeddings, description embeddings, MLM loss averaged over both fields or None)."""
        title_features = _features(self.model, titles)
        description_features = _features(self.model, descriptions)
        labels = (self.mlm.mask(title_features), self.mlm.mask(description_features)) if self.mlm else None
        with self.amp():
            title_out, description_out = self.model(title_features), self.model(description_features)
            mlm_loss = None
            if self.mlm:  # both fields are reconstructed, as in the paper
                title_mlm = self.mlm.loss(title_out["token_embeddings"], labels[0])
                mlm_loss = (title_mlm + self.mlm.loss(description_out["token_embeddings"], labels[1])) / 2
            titles = pool(title_out, self.pooling, self.rank_k).float()
            descriptions = pool(description_out, self.pooling, self.rank_k).float()
        return titles, descriptions, mlm_loss


class MetricBERT(_TitleDescriptionObjective):
    """Anchor = title, positive = the same item's description, negative = another item's positive from the
    batch: the hardest (nearest to the anchor) or a random one. L = mlm_weight * L_MLM + lambda * L_sim. With
    `title_variants` > 0 that share of the positives are perturbed copies of the anchor's own title
    (`trainer.augment`), an addition of ours to the paper.

    As in the paper (metricbert.txt section 3), titles and descriptions are masked and encoded once: the same
    pass gives the pooled embeddings for the metric loss and the token states for the MLM loss, so MLM costs
    no extra encoder pass. Mining under angular or cosine distance picks the same negative (arccos is
    monotonic); the distance changes only the loss.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        config: TrainConfig,
        mlm: MaskedLM | None,
        generator: torch.Generator,
        amp: _Autocast,
    ) -> None:
        super().__init__(model, config, mlm, generator, amp)
        self.mining, self.loss_name, self.margin = config.mining, config.loss, config.margin
        self.title_variants = config.title_variants
        angular = config.distance == "angular"
        self.pairwise = losses.pairwise_angular_distance if angular else losses.pairwise_cosine_distance

    def __call__(self, batch: Sequence[Item | Triplet]) -> BatchLoss:
        if isinstance(batch[0], Triplet):
            return self._triplets(batch)
        titles = [i.title for i in batch]
        texts = positive_texts(titles, [i.description for i in batch], self.title_variants, self.generator)
        anchors, positives, mlm_loss = self._encode(titles, texts)
        distances = self.pairwise(anchors, positives)
        n = len(batch)
        negatives = (
            losses.hardest_negatives(distances)
            if self.mining == "hardest"
            else losses.random_negatives(n, self.generator).to(distances.device)
        )
        rows = torch.arange(n, device=distances.device)
        d_pos, d_neg = distances[rows, rows], distances[rows, negatives]
        if self.loss_name == "triplet":
            similarity = losses.triplet_loss(d_pos, d_neg, self.margin)
        else:  # the paper's pair losses compare cosine similarities, whatever distance picked the negatives
            cosines = 1.0 - losses.pairwise_cosine_distance(anchors, positives)
            margin_pos, margin_neg = losses.PAIR_MARGINS[self.loss_name]
            similarity = losses.cosine_hinge_loss(cosines[rows, rows], cosines[rows, negatives], margin_pos, margin_neg)
        return _combine(self.loss_name, similarity, self.similarity_weight, mlm_loss, self.mlm_weight)

    def _triplets(self, batch: Sequence[Triplet]) -> BatchLoss:
        """Mined triplets (`--pseudo-matches`, no MLM): the negative is the hardest of every text in the batch but
        the anchor's own positive and its copies (the given negatives and the other positives), or with `random`
        mining the given one, the lexical look-alike."""
        columns = [_features(self.model, [getattr(t, c) for t in batch]) for c in ("anchor", "positive", "negative")]
        with self.amp():
            anchors, positives, negatives = (pool(self.model(c), self.pooling, self.rank_k).float() for c in columns)
        n = len(batch)
        distances = self.pairwise(anchors, torch.cat([positives, negatives]))
        rows = torch.arange(n, device=distances.device)
        if self.mining == "hardest":
            texts = [t.positive for t in batch] + [t.negative for t in batch]
            same = torch.tensor([[text == t.positive for text in texts] for t in batch], device=distances.device)
            chosen = distances.detach().masked_fill(same, torch.inf).argmin(dim=1)
        else:
            chosen = rows + n
        d_pos, d_neg = distances[rows, rows], distances[rows, chosen]
        if self.loss_name == "triplet":
            similarity = losses.triplet_loss(d_pos, d_neg, self.margin)
        else:
            cosines = 1.0 - losses.pairwise_cosine_distance(anchors, torch.cat([positives, negatives]))
            margin_pos, margin_neg = losses.PAIR_MARGINS[self.loss_name]
            similarity = losses.cosine_hinge_loss(cosines[rows, rows], cosines[rows, chosen], margin_pos, margin_neg)
        return _combine(self.loss_name, similarity, self.similarity_weight, None, 0.0)


class RecoBERT(_TitleDescriptionObjective):
    """Title-description matching: with probability 0.5 an item's description is swapped for another item's from
    the batch (label 0); L = mlm_weight * L_MLM + lambda * BCE((1 + cos(F_t, F_d)) / 2, label).

    Deviation from recobert.txt section 3.1, on purpose: F_t and F_d are the mean-pooled embeddings of the title
    and of the description each encoded on its own (as MetricBERT's fields are), not segment means of one joint
    [CLS] t [SEP] d [SEP] pass. The service scores RecoBERT's four inference terms from the per-field vectors it
    stores; joint pairs would cost two encoder passes per candidate and query, and a model trained on joint pairs
    would be served on inputs it never saw.
    """

    def __call__(self, batch: Sequence[Item]) -> BatchLoss:
        n = len(batch)
        swapped = torch.rand(n, generator=self.generator) < 0.5
        others = losses.random_negatives(n, self.generator).tolist()
        descriptions = [
            batch[o].description if s else item.description
            for item, s, o in zip(batch, swapped.tolist(), others, strict=True)
        ]
        targets = (~swapped).float().to(self.model.device)
        titles, description_embeddings, mlm_loss = self._encode([item.title for item in batch], descriptions)
        tdm = losses.tdm_loss(titles, description_embeddings, targets)
        return _combine("tdm", tdm, self.similarity_weight, mlm_loss, self.mlm_weight)


class SiameseSBERT:
    """Scored pairs, score in [0, 1]. cosine: MSE of cos(a, b) to the score (sentence-transformers'
    CosineSimilarityLoss); euclidean: MSE of ||a - b|| to 1 - score (siamese-vs-triplet-sbert.txt), which
    sentence-transformers lacks."""

    head = None

    def __init__(self, model: SentenceTransformer, config: TrainConfig, amp: _Autocast) -> None:
        self.model, self.amp, self.distance, self.config = model, amp, config.siamese_distance, config
        self.cosine_loss = CosineSimilarityLoss(model)

    def __call__(self, batch: Sequence[ScoredPair]) -> BatchLoss:
        columns = [_features(self.model, [p.text_a for p in batch]), _features(self.model, [p.text_b for p in batch])]
        with self.amp():
            embeddings = _embed_columns(self.model, columns, self.config)
        scores = torch.tensor([p.score for p in batch], dtype=torch.float32, device=self.model.device)
        if self.distance == "cosine":
            loss = self.cosine_loss.compute_loss_from_embeddings(embeddings, scores)
        else:
            loss = F.mse_loss(F.pairwise_distance(*embeddings), 1.0 - scores)
        return BatchLoss(loss, {"mse": loss.item()})


class TripletSBERT:
    """(anchor, positive, negative) texts with sentence-transformers' TripletLoss: max(0, d(a,p) - d(a,n) + margin)
    under euclidean or cosine distance."""

    head = None

    def __init__(self, model: SentenceTransformer, config: TrainConfig, amp: _Autocast) -> None:
        self.model, self.amp, self.config = model, amp, config
        metric = (
            TripletDistanceMetric.EUCLIDEAN if config.triplet_distance == "euclidean" else TripletDistanceMetric.COSINE
        )
        self.triplet_loss = TripletLoss(model, distance_metric=metric, triplet_margin=config.margin)

    def __call__(self, batch: Sequence[Triplet]) -> BatchLoss:
        columns = [
            _features(self.model, [t.anchor for t in batch]),
            _features(self.model, [t.positive for t in batch]),
            _features(self.model, [t.negative for t in batch]),
        ]
        with self.amp():
            embeddings = _embed_columns(self.model, columns, self.config)
        loss = self.triplet_loss.compute_loss_from_embeddings(embeddings, None)
        return BatchLoss(loss, {"triplet": loss.item()})


def _combine(name: str, similarity: Tensor, weight: float, mlm_loss: Tensor | None, mlm_weight: float) -> BatchLoss:
    total = weight * similarity
    parts = {name: similarity.item()}
    if mlm_loss is not None:
        total = total + mlm_weight * mlm_loss
        parts["mlm"] = mlm_loss.item()
    return BatchLoss(total, parts)


def build_objective(
    config: TrainConfig,
    model: SentenceTransformer,
    *,
    generator: torch.Generator,
    bf16: bool,
    head: MLMHead | None = None,
) -> Objective:
    """The configured objective on `model`; `head` restores a saved MLM head (resume), else a new one is made."""
    amp = _Autocast(model.device, bf16)
    if config.objective == "sbert-siamese":
        return SiameseSBERT(model, config, amp)
    if config.objective == "sbert-triplet":
        return TripletSBERT(model, config, amp)
    mlm = None
    if config.uses_mlm:
        mlm = (
            MaskedLM(model, head, config.mlm_probability, generator)
            if head is not None
            else MaskedLM.create(model, config.mlm_probability, generator)
        )
    cls = MetricBERT if config.objective == "metricbert" else RecoBERT
    return cls(model, config, mlm, generator, amp)
