"""Loading the encoder to fine-tune and writing checkpoints that `metricsearch export` accepts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer

from metricsearch.core.errors import TrainerError
from metricsearch.export import unsupported_structure


def load_encoder(folder: Path, *, max_seq_length: int, device: torch.device) -> SentenceTransformer:
    """A sentence-transformers model in training mode, truncating at `max_seq_length` (at most the model's own);
    refused up front when the export could not turn it into a bundle."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        raise TrainerError(f"{folder} is not a sentence-transformers folder (no modules.json): pass --base DIR")
    model = SentenceTransformer(str(folder), device=str(device), local_files_only=True)
    problem = unsupported_structure(model)
    if problem:
        raise TrainerError(f"{folder}: the trainer keeps checkpoints exportable: {problem}")
    positions = getattr(model[0].auto_model.config, "max_position_embeddings", None) or max_seq_length
    model.max_seq_length = min(max_seq_length, model.max_seq_length or max_seq_length, positions)
    return model.train()


def save_atomically(write, folder: Path) -> None:
    """Run `write(staging_folder)` and rename the result to `folder`, so an interrupted save (Ctrl-C, time limit)
    never leaves a half-written checkpoint where a good one was."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    try:
        write(staging)
        if folder.exists():
            previous = staging.with_name(staging.name.replace(".partial-", ".old-"))
            folder.rename(previous)
            staging.rename(folder)
            shutil.rmtree(previous)
        else:
            staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    folder.chmod(0o755)  # mkdtemp makes it private; an export or service may run as another user


def save_model(model: SentenceTransformer, folder: Path) -> None:
    """The sentence-transformers folder alone (no model card: it would describe a hub upload we never make)."""
    model.save(str(folder), create_model_card=False)
