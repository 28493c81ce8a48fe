"""The MLM head: tied to the word embeddings, loss at masked positions only, saved and loaded, and trainable on
a real (tiny) BERT fed by mask_tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.data import mask_tokens
from metricsearch.trainer.mlm import MLMHead, freeze_encoder

HIDDEN, VOCAB = 16, 50


def make_head(seed: int = 0) -> tuple[MLMHead, nn.Embedding]:
    torch.manual_seed(seed)
    embeddings = nn.Embedding(VOCAB, HIDDEN)
    head = MLMHead(HIDDEN, embeddings)
    nn.init.normal_(head.bias)  # non-zero, so a head that dropped or lost its bias would give another loss
    return head, embeddings


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 7, HIDDEN, generator=generator)
    labels = torch.full((3, 7), -100)
    labels[0, 2], labels[1, 0], labels[1, 5], labels[2, 6] = 4, 17, 49, 0
    return hidden, labels


def slow_loss(head: MLMHead, embeddings: nn.Embedding, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary logits at every position, then -log softmax at each masked position, averaged by hand."""
    transformed = head.LayerNorm(F.gelu(head.dense(hidden)))
    logits = transformed @ embeddings.weight.T + head.bias
    terms = [
        -torch.log_softmax(logits[b, t], dim=-1)[labels[b, t]]
        for b in range(labels.shape[0])
        for t in range(labels.shape[1])
        if labels[b, t] != -100
    ]
    return torch.stack(terms).mean()


def test_decoder_is_tied_to_the_word_embeddings():
    head, embeddings = make_head()
    assert head.decoder_weight is embeddings.weight
    with torch.no_grad():
        embeddings.weight[3, 0] = 42.0
    assert head.decoder_weight[3, 0].item() == 42.0
    # Not registered: encoder + head parameters partition the model, so no optimizer steps the embeddings twice.
    assert all(p is not embeddings.weight for p in head.parameters())
    assert set(head.state_dict()) == {"dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias", "bias"}


def test_loss_equals_full_vocabulary_cross_entropy_at_masked_positions():
    head, embeddings = make_head()
    hidden, labels = inputs()
    assert torch.allclose(head(hidden, labels), slow_loss(head, embeddings, hidden, labels), atol=1e-6)


def test_loss_gradient_reaches_the_embeddings_through_the_decoder():
    head, embeddings = make_head()
    hidden, labels = inputs()
    head(hidden, labels).backward()
    assert embeddings.weight.grad is not None and embeddings.weight.grad.abs().sum() > 0


def test_nothing_masked_gives_zero_loss_not_nan():
    head, _ = make_head()
    hidden = torch.randn(2, 4, HIDDEN, requires_grad=True)
    loss = head(hidden, torch.full((2, 4), -100))
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(hidden.grad).all()


def test_save_and_load_give_the_same_loss(tmp_path):
    head, embeddings = make_head()
    hidden, labels = inputs()
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5)
    head(hidden, labels).backward()
    optimizer.step()  # weights away from their initial values
    head.save(tmp_path / "head")
    loaded = MLMHead.load(tmp_path / "head", embeddings)
    assert loaded.decoder_weight is embeddings.weight
    assert torch.equal(loaded(hidden, labels), head(hidden, labels))
    assert not torch.equal(make_head(seed=5)[0](hidden, labels), head(hidden, labels))


def test_load_refuses_another_vocabulary_or_a_missing_head(tmp_path):
    head, _ = make_head()
    head.save(tmp_path / "head")
    with pytest.raises(TrainerError, match="vocabulary of 50 tokens"):
        MLMHead.load(tmp_path / "head", nn.Embedding(60, HIDDEN))
    with pytest.raises(TrainerError, match="no MLM head"):
        MLMHead.load(tmp_path / "elsewhere", nn.Embedding(VOCAB, HIDDEN))


def test_hidden_size_must_match_the_embeddings():
    with pytest.raises(TrainerError, match="hidden size"):
        MLMHead(32, nn.Embedding(VOCAB, HIDDEN))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    from tests.tiny_model import CORPUS, build_tiny_model

    model = SentenceTransformer(str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")), device="cpu")
    transformer = model[0]
    features = transformer.tokenizer(CORPUS[:8], padding=True, return_tensors="pt")
    return transformer.auto_model, transformer.tokenizer, features


def test_head_only_warm_up_then_joint_training_lower_the_loss(tiny_bert):
    bert, tokenizer, features = tiny_bert
    embeddings = bert.get_input_embeddings()
    masked, labels = mask_tokens(
        features["input_ids"],
        features["attention_mask"],
        special_ids=tokenizer.all_special_ids,
        mask_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        generator=torch.Generator().manual_seed(0),
    )
    torch.manual_seed(0)
    head = MLMHead(bert.config.hidden_size, embeddings, bert.config.layer_norm_eps)
    encoder_before = {name: p.detach().clone() for name, p in bert.named_parameters()}

    def loss() -> torch.Tensor:
        hidden = bert(input_ids=masked, attention_mask=features["attention_mask"]).last_hidden_state
        return head(hidden, labels)

    def train(parameters, steps: int) -> tuple[float, float]:
        optimizer = torch.optim.Adam([p for p in parameters if p.requires_grad], lr=1e-2)
        first = loss().item()
        for _ in range(steps):
            optimizer.zero_grad()
            loss().backward()
            optimizer.step()
        return first, loss().item()

    bert.train(False)  # no dropout: the same batch gives the same loss
    freeze_encoder(bert, True)
    assert not any(p.requires_grad for p in bert.parameters())
    before, after = train(head.parameters(), 10)
    assert after < before
    assert all(torch.equal(p, encoder_before[name]) for name, p in bert.named_parameters())  # embeddings too

    freeze_encoder(bert, False)
    assert all(p.requires_grad for p in bert.parameters())
    before, after = train([*bert.parameters(), *head.parameters()], 10)
    assert after < before
    assert not torch.equal(embeddings.weight, encoder_before["embeddings.word_embeddings.weight"])
