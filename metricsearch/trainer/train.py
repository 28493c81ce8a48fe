"""`train(config)`: the whole run behind `metricsearch train`. Cheap checks first (output folder, data files, the
held-out split), then the model, then the loop, so a mistake costs a second rather than a model load."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as torch_dist

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.augment import positive_texts
from metricsearch.trainer.config import (
    BEST_FOLDER,
    CATALOG_OBJECTIVES,
    HEAD_FOLDER,
    LAST_FOLDER,
    LOG_FILE,
    PSEUDO_FILE,
    STATE_FILE,
    TrainConfig,
    distributed_env,
)
from metricsearch.trainer.data import read_catalog, read_pairs, read_triplets

if TYPE_CHECKING:
    from metricsearch.trainer.loop import TrainResult


def train(config: TrainConfig) -> TrainResult:
    """Train as configured; return what happened (the CLI prints its summary)."""
    started = time.perf_counter()
    out = Path(config.out)
    _check_out(out, config.resume)
    data_file = out / PSEUDO_FILE if config.pseudo_matches else config.catalog or config.pairs or config.triplets
    examples = _read_examples(config, data_file)
    train_examples, held_out = split(examples, config.val_fraction, config.val_max, config.seed, data_file)

    # Imported only now: sentence-transformers takes seconds to import, which a mistake above should not wait for.
    from metricsearch.core.base_model import PACKAGED_BASE_MODEL, packaged_model_dir
    from metricsearch.trainer.distributed import Distributed
    from metricsearch.trainer.loop import Loop
    from metricsearch.trainer.mlm import MLMHead
    from metricsearch.trainer.model import load_encoder
    from metricsearch.trainer.objectives import build_objective
    from metricsearch.trainer.validation import Pooling, build_validator

    packaged = config.base is None
    base = packaged_model_dir() if packaged else Path(config.base)
    rank, local_rank, world_size = distributed_env()
    device = _device(local_rank, world_size)
    bf16 = bf16_supported(device) if config.bf16 is None else config.bf16
    config = config.model_copy(update={"bf16": bf16, "base": base})  # config.json states what the run used
    last = out / LAST_FOLDER
    try:
        torch.manual_seed(config.seed)  # dropout and the MLM head's initialisation
        model = load_encoder(last if config.resume else base, max_seq_length=config.max_seq_length, device=device)
        head = None
        if config.resume and config.uses_mlm:
            head = MLMHead.load(last / HEAD_FOLDER, model[0].auto_model.get_input_embeddings())
        generator = torch.Generator().manual_seed(config.seed + 1)
        objective = build_objective(config, model, generator=generator, bf16=bf16, head=head)
        pooling = Pooling(config.pooling, config.rank_k)
        validator = None
        if held_out:
            positives = _held_out_positives(config, held_out)
            if config.pseudo_matches:  # held-out triplets: is the match nearer than the look-alike?
                validator = build_validator("sbert-triplet", held_out, "cosine", pooling)
            else:
                validator = build_validator(config.objective, held_out, config.triplet_distance, pooling, positives)
        provenance = {
            "objective": config.objective,
            "base_model": PACKAGED_BASE_MODEL if packaged else str(base),
            "training_data": str(data_file),
            "training_data_digest": file_digest(data_file),
            "pooling": config.pooling,
            "rank_k": config.rank_k,
        }
        loop = Loop(
            config,
            model,
            objective,
            train_examples,
            validator,
            generator=generator,
            started=started,
            provenance=provenance,
            dist=Distributed(rank, world_size),
        )
        state = torch.load(last / STATE_FILE, map_location="cpu") if config.resume else None
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text(json.dumps(config.model_dump(mode="json"), indent=2) + "\n")
        return loop.run(state)
    finally:
        if world_size > 1 and torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def _check_out(out: Path, resume: bool) -> None:
    if resume:
        if not (out / LAST_FOLDER / STATE_FILE).is_file():
            raise TrainerError(f"nothing to resume: {out / LAST_FOLDER / STATE_FILE} does not exist")
        return
    if out.exists() and not out.is_dir():
        raise TrainerError(f"{out} exists and is not a folder: choose another --out")
    if any((out / name).exists() for name in (LAST_FOLDER, BEST_FOLDER, LOG_FILE)):
        raise TrainerError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")


def _held_out_positives(config: TrainConfig, held_out: list[Any]) -> list[str] | None:
    """With title variants on, the held-out titles are validated against positives drawn as in training (once,
    seeded), so early stopping follows the task the run trains on."""
    if not config.title_variants:
        return None
    generator = torch.Generator().manual_seed(config.seed + 2)
    titles, descriptions = [i.title for i in held_out], [i.description for i in held_out]
    return positive_texts(titles, descriptions, config.title_variants, generator)


def _read_examples(config: TrainConfig, data_file: Path) -> list[Any]:
    if config.pseudo_matches:
        if not data_file.is_file():
            raise TrainerError(
                f"{data_file} is missing: `metricsearch train --pseudo-matches` mines it with the bundle before "
                "training (the trainer runs no bundle itself)"
            )
        return read_triplets(data_file)
    if config.objective in CATALOG_OBJECTIVES:
        items = read_catalog(config.catalog)
        if config.title_variants:  # an item without a description still has its title variants
            return items
        described = [item for item in items if item.description.strip()]
        if len(described) < 2:
            raise TrainerError(
                f"{config.catalog}: {config.objective} pairs each title with its description, and only "
                f"{len(described)} of its {len(items)} items have one; it needs at least 2"
            )
        return described
    if config.objective == "sbert-siamese":
        return read_pairs(config.pairs)
    return read_triplets(config.triplets)


def split(examples: list[Any], fraction: float, most: int, seed: int, source: Path) -> tuple[list[Any], list[Any]]:
    """A seeded held-out slice of round(fraction * n) examples (at most `most`) and the rest for training."""
    if fraction == 0:
        return examples, []
    size = min(most, round(fraction * len(examples)))
    if size < 2:
        raise TrainerError(
            f"{source}: a held-out slice of {fraction:g} x {len(examples)} examples is too small to validate on; "
            "raise --val-fraction, or pass --val-fraction 0 to train without validation (best/ = the final weights)"
        )
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed)).tolist()
    return [examples[i] for i in order[size:]], [examples[i] for i in order[:size]]


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast runs natively: CUDA with bf16, or a CPU whose oneDNN has bf16 kernels (AVX512-BF16 or
    AMX; measured 2x faster here), rather than being emulated at a loss."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _device(local_rank: int, world_size: int) -> torch.device:
    """CUDA when present (one GPU per torchrun process), else the CPU; joins the process group under torchrun."""
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not torch_dist.is_initialized():
        torch_dist.init_process_group(backend="nccl" if cuda else "gloo")
    return device


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return f"sha256:{digest.hexdigest()[:16]}"
