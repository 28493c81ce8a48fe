"""A masked-language-model head for encoders that ship without one (all-MiniLM-L6-v2 has none), tied to the
encoder's word embeddings as BERT's is, and the switch that freezes the encoder for the head-only warm-up."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.data import IGNORE_INDEX

WEIGHTS_FILE = "mlm_head.safetensors"
CONFIG_FILE = "mlm_head.json"


class MLMHead(nn.Module):
    """BERT's prediction head: transform (Linear, GELU, LayerNorm), then a decoder whose weight is the encoder's
    word-embedding matrix and whose bias is the head's own.

    Written here because transformers' BertOnlyMLMHead takes a whole BertConfig and is tied by PreTrainedModel's
    machinery; this one ties to the embeddings of any encoder. Submodule names follow BERT's (dense, LayerNorm).

    The tied matrix is held outside the module's registered parameters: encoder and head parameters then
    partition the model, so an optimizer given both never steps the embeddings twice, and the head's state_dict
    is just its own weights.
    """

    def __init__(self, hidden_size: int, word_embeddings: nn.Embedding, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        if word_embeddings.embedding_dim != hidden_size:
            raise TrainerError(
                f"the MLM head's hidden size {hidden_size} differs from the word embeddings' "
                f"{word_embeddings.embedding_dim}; the decoder is tied to them, so they must match"
            )
        self.hidden_size = hidden_size
        self.layer_norm_eps = layer_norm_eps
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.GELU()  # BERT's "gelu" is the exact (erf) form, nn.GELU's default
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(word_embeddings.num_embeddings))
        self._tied = (word_embeddings,)  # a tuple, so nn.Module does not register the embeddings as a child

    @property
    def decoder_weight(self) -> Tensor:
        """The (vocab, hidden) decoder matrix: the word embeddings' own weight, not a copy."""
        return self._tied[0].weight

    def forward(self, hidden_states: Tensor, labels: Tensor) -> Tensor:
        """Mean cross-entropy over the positions where labels != -100. Those hidden states are gathered before
        the vocabulary projection, which is the costly part: full logits at every position would be ~7x more
        work at BERT's 15% masking. Zero (with a gradient) when nothing is masked."""
        chosen = labels != IGNORE_INDEX
        states = hidden_states[chosen]
        logits = F.linear(self.LayerNorm(self.activation(self.dense(states))), self.decoder_weight, self.bias)
        targets = labels[chosen]
        if targets.numel() == 0:
            return logits.sum()
        return F.cross_entropy(logits.float(), targets)

    def save(self, folder: Path) -> None:
        """Write the head's own weights (transform and bias; the tied decoder lives in the encoder) and config."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, folder / WEIGHTS_FILE)
        config = {
            "hidden_size": self.hidden_size,
            "vocab_size": self.bias.shape[0],
            "layer_norm_eps": self.layer_norm_eps,
        }
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path, word_embeddings: nn.Embedding) -> MLMHead:
        """A head saved by `save`, tied to `word_embeddings`, on their device."""
        folder = Path(folder)
        if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise TrainerError(f"{folder}: no MLM head here (expected {CONFIG_FILE} and {WEIGHTS_FILE})")
        config = json.loads((folder / CONFIG_FILE).read_text())
        if config["vocab_size"] != word_embeddings.num_embeddings:
            raise TrainerError(
                f"{folder / CONFIG_FILE}: the head was trained for a vocabulary of {config['vocab_size']} tokens, "
                f"the encoder has {word_embeddings.num_embeddings}; load it with the encoder it was trained with"
            )
        head = cls(config["hidden_size"], word_embeddings, config["layer_norm_eps"])
        head.load_state_dict(load_file(folder / WEIGHTS_FILE))
        return head.to(word_embeddings.weight.device)


def freeze_encoder(model: nn.Module, frozen: bool) -> None:
    """Set requires_grad on every parameter of the encoder: frozen for the head-only warm-up, so a random head's
    gradients cannot damage the pre-trained weights, then unfrozen for joint training."""
    model.requires_grad_(not frozen)
