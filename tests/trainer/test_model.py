"""Loading the encoder to fine-tune (a sentence-transformers folder, truncated at most at the model's own length) and
saving checkpoints so an interrupted save never replaces a good one with half a folder."""

from __future__ import annotations

import pytest
import torch

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.model import load_encoder, save_atomically
from tests.tiny_model import MAX_SEQ_LENGTH, build_tiny_model


def test_the_encoder_loads_in_training_mode_truncated_at_the_shorter_length(tmp_path):
    folder = build_tiny_model(tmp_path / "tiny")
    cpu = torch.device("cpu")
    shorter = load_encoder(folder, max_seq_length=16, device=cpu)
    assert shorter.training and shorter.max_seq_length == 16
    assert load_encoder(folder, max_seq_length=10_000, device=cpu).max_seq_length == MAX_SEQ_LENGTH


def test_a_folder_that_is_no_sentence_transformers_model_is_refused(tmp_path):
    with pytest.raises(TrainerError, match=r"not a sentence-transformers folder .* pass --base"):
        load_encoder(tmp_path, max_seq_length=16, device=torch.device("cpu"))


def test_a_save_replaces_the_checkpoint_whole_or_not_at_all(tmp_path):
    checkpoint = tmp_path / "run" / "best"
    save_atomically(lambda staging: (staging / "weights").write_text("first"), checkpoint)
    assert (checkpoint / "weights").read_text() == "first" and checkpoint.stat().st_mode & 0o777 == 0o755

    def interrupted(staging):
        (staging / "weights").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_atomically(interrupted, checkpoint)
    assert (checkpoint / "weights").read_text() == "first"
    save_atomically(lambda staging: (staging / "weights").write_text("second"), checkpoint)
    assert (checkpoint / "weights").read_text() == "second"
    assert [p.name for p in checkpoint.parent.iterdir()] == ["best"]  # no staging or old folder left behind
