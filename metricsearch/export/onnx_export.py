"""Export a sentence-transformers folder into a model bundle: `encoder.onnx`, `tokenizer.json`, `bundle.json`.

The graph holds the transformer and the mean pooling over the attention mask, so the service gets one vector
a text and needs no torch. It does not normalise: the manifest says `normalize: true` and the service does it,
which keeps the graph's output usable for metrics that need the raw mean (docs/bundle.md). For second-order
pooling (`pooling='cov'|'svd'`) the graph returns the masked token embeddings instead and the service computes
each text's low-rank factors from them (`service.second_order`).

We use the legacy TorchScript exporter (`dynamo=False`): the dynamo exporter needs `onnxscript`, and optimum
would downgrade transformers (shared/MODELS.md).
"""

from __future__ import annotations

import inspect
import logging
import re
import shutil
import tempfile
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import torch
from pydantic import ValidationError
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from tokenizers import Tokenizer

from metricsearch.core.base_model import PACKAGED_BASE_MODEL, PACKAGED_MODEL_NAME, packaged_model_dir
from metricsearch.core.bundle import (
    METRICS_OF_POOLING,
    AdaptiveFusionSpec,
    EncoderSpec,
    FieldSpec,
    FusionSpec,
    LexicalSpec,
    Manifest,
    Provenance,
    check_bundle_target,
    default_metric,
    load_bundle,
    pooling_metric_problem,
    write_manifest,
)
from metricsearch.core.errors import ExportError
from metricsearch.core.fusion import AGREEMENT_FUSION, DEFAULT_FUSION, DEFAULT_FUSION_RULE

log = logging.getLogger(__name__)

ENCODER_FILE = "encoder.onnx"
TOKENIZER_FILE = "tokenizer.json"
OUTPUT_NAME = "sentence_embedding"
TOKENS_OUTPUT_NAME = "token_embeddings"
OPSET = 17  # first opset with LayerNormalization, which onnxruntime runs as one kernel
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # in the order the graph declares them


def export_bundle(
    model_dir: Path | None,
    out_dir: Path,
    *,
    name: str | None = None,
    title_weight: float = 1.0,
    description_weight: float = 1.0,
    metric: str | None = None,
    recobert_lambdas: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0),
    max_seq_length: int | None = None,
    pooling: str = "mean",
    rank_k: int | None = None,
    objective: str = "off-the-shelf",
    base_model: str | None = None,
    overwrite: bool = False,
    precision: str = "fp32",
    catalog: Path | None = None,
    lexical: bool = True,
    fusion: FusionSpec | None = None,
    int8: bool | None = None,
) -> Path:
    """Export `model_dir` (default: the packaged all-MiniLM-L6-v2) as a bundle in `out_dir`; return `out_dir`.

    The bundle is built in a sibling temp folder, validated with `load_bundle`, then renamed into place, so
    a failed export never leaves half a bundle. A non-empty `out_dir` is replaced only with `overwrite=True`.
    `base_model` goes into the provenance; it defaults to the packaged model's id or the folder's path.
    `pooling` 'cov' or 'svd' (with `rank_k`) makes a second-order bundle: the graph returns masked token embeddings,
    the service stores rank-k factors and reranks by the Frobenius similarity S_F. 'cov' with `rank_k` is the
    paper's post-hoc truncation P_cov(., k) of a model trained with cov pooling; 'cov' alone keeps up to
    `service.second_order.FULL_RANK_CAP` rows. `metric` defaults to 'frobenius' for those and 'angular' for mean.
    `metric` is the rerank the service runs: 'angular' (MetricBERT's per-field sum, weighted by the field weights)
    or 'recobert' (RecoBERT's four z-normalised scores, weighted by `recobert_lambdas`).
    `lexical` stores BM25 vectors per field beside the dense ones (candidates from both; `scores` shows them);
    `fusion` (component weights and their rule) fuses them into the rerank's score: the packaged model gets
    DEFAULT_FUSION, another model none unless given (`train --bundle` gives CATALOG_FUSION) until `metricsearch tune`
    chooses its weights on a catalog.
    `precision` other than fp32 rewrites the graph (export/quantize.py: int8, bf16, fp16) and records its measured
    agreement with fp32 on `catalog`'s texts in the manifest.
    `int8` writes an int8 graph beside the fp32 one, calibrated on `catalog` (or generic product listings) with its
    measured agreement, for the service to run where the CPU makes it faster; by default the packaged model gets it
    (its quality measured in BENCHMARKS.md, Encoder), another model not.
    """
    started = time.perf_counter()
    out_dir = Path(out_dir)
    quantize = _quantize_module(precision, catalog)
    packaged = model_dir is None
    int8 = packaged and precision == "fp32" and pooling == "mean" if int8 is None else int8
    if int8 and precision != "fp32":
        raise ExportError(f"an int8 encoder is added beside an fp32 one, not beside {precision}")
    if int8 and catalog is not None and not Path(catalog).is_file():
        raise ExportError(f"--catalog {catalog}: no such file")
    tokens = pooling != "mean"
    if pooling not in METRICS_OF_POOLING:  # refused before default_metric, which has no metric for it
        raise ExportError(pooling_metric_problem(pooling, metric or ""))
    metric = metric or default_metric(pooling)
    problem = pooling_metric_problem(pooling, metric)
    if problem:
        raise ExportError(problem)
    if rank_k is not None and not tokens:
        raise ExportError("--rank-k applies to pooling 'cov' (truncation) and 'svd', not to mean pooling")
    check_bundle_target(out_dir, overwrite)
    if packaged:
        model_dir = packaged_model_dir()
    model_dir = Path(model_dir)
    if not (model_dir / "modules.json").is_file():
        raise ExportError(f"{model_dir} is not a sentence-transformers folder (no modules.json)")

    log.info("loading %s", model_dir)
    model = _load(model_dir)
    transformer = model[0].auto_model
    seq_len = max_seq_length or model.max_seq_length
    positions = getattr(transformer.config, "max_position_embeddings", None)
    if not seq_len or (positions is not None and seq_len > positions):
        raise ExportError(f"max_seq_length {seq_len} must be between 1 and the model's {positions} positions")
    try:  # before the export, so a bad name or weight fails in a second, not after the graph is written
        manifest = Manifest(
            name=name or (PACKAGED_MODEL_NAME if packaged else _run_name(model_dir)),
            encoder=EncoderSpec(
                file=ENCODER_FILE,
                inputs=_input_names(transformer),
                output=TOKENS_OUTPUT_NAME if tokens else OUTPUT_NAME,
                output_kind="tokens" if tokens else "pooled",
                dim=model.get_embedding_dimension(),
                precision="fp32",
            ),
            tokenizer=TOKENIZER_FILE,
            max_seq_length=seq_len,
            pooling=pooling,
            rank_k=rank_k,
            normalize=True,
            metric=metric,
            recobert_lambdas=recobert_lambdas,
            fields=[
                FieldSpec(name="title", weight=title_weight),
                FieldSpec(name="description", weight=description_weight),
            ],
            lexical=LexicalSpec() if lexical else None,
            fusion=_fusion(fusion, packaged and lexical and metric != "recobert"),
            provenance=Provenance(
                base_model=base_model or (PACKAGED_BASE_MODEL if packaged else str(model_dir.resolve())),
                objective=objective,
                training_data_digest=None,
                exporter=f"torch.onnx {torch.__version__}",
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                notes=f"legacy TorchScript exporter, opset {OPSET}",
            ),
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'manifest'}: {e['msg']}" for e in exc.errors())
        raise ExportError(f"cannot describe this bundle: {problems}") from exc

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a service running as another user must read the bundle
    try:
        tokenizer = _write_tokenizer(model, seq_len, staging / TOKENIZER_FILE)
        _export_onnx(transformer, manifest.encoder.inputs, tokenizer, staging / ENCODER_FILE, tokens=tokens)
        write_manifest(manifest, staging)
        if quantize is not None:
            write_manifest(quantize.reduce_precision(load_bundle(staging), precision, catalog), staging)
        elif int8:
            from metricsearch.export.quantize import add_int8

            write_manifest(add_int8(load_bundle(staging), catalog), staging)
        load_bundle(staging)
        _move_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

    size_mb = (out_dir / ENCODER_FILE).stat().st_size / 1e6
    log.info(
        "exported bundle %s to %s: dim %d, max_seq_length %d, inputs %s, %.1f MB, precisions %s, %.1f s",
        manifest.name,
        out_dir,
        manifest.encoder.dim,
        seq_len,
        ",".join(manifest.encoder.inputs),
        size_mb,
        load_bundle(out_dir).manifest.encoder.precisions,
        time.perf_counter() - started,
    )
    return out_dir


def _fusion(given: FusionSpec | None, packaged_default: bool) -> FusionSpec | None:
    """The fusion given, else for the packaged model DEFAULT_FUSION with AGREEMENT_FUSION, the label-free rule that
    chooses the weights on the catalog served where it holds near-duplicates (DEFAULT_FUSION elsewhere)."""
    if given is not None:
        return given
    if not packaged_default:
        return None
    rule = AGREEMENT_FUSION
    adaptive = AdaptiveFusionSpec(
        components=list(rule.components), floor=rule.floor, power=rule.power, gate=rule.gate, chosen_by=rule.rule
    )
    return FusionSpec(weights=dict(DEFAULT_FUSION), chosen_by=DEFAULT_FUSION_RULE, adaptive=adaptive)


def unsupported_structure(model: SentenceTransformer) -> str | None:
    """Why a model cannot become a bundle, or None: the graph wraps Transformer -> Pooling(mean) [-> Normalize]
    only, and anything else (CLS pooling, a Dense layer) would be exported wrong. The trainer checks it before
    training too, so an hour of training never ends in a checkpoint that cannot be served."""
    modules = list(model)
    supported = (
        len(modules) in (2, 3)
        and isinstance(modules[0], Transformer)
        and isinstance(modules[1], Pooling)
        and modules[1].pooling_mode == "mean"
        and all(isinstance(m, Normalize) for m in modules[2:])
    )
    if supported:
        return None
    found = " -> ".join(type(m).__name__ for m in modules)
    pooling = getattr(modules[1], "pooling_mode", "?") if len(modules) > 1 else "none"
    return f"only Transformer -> Pooling(mean) [-> Normalize] can be exported, found {found} (pooling {pooling})"


def _quantize_module(precision: str, catalog: Path | None):
    """export.quantize for a reduced precision (None for fp32), after checking the request before the long export."""
    if precision == "fp32":
        return None
    from metricsearch.export import quantize

    quantize.check_request(precision, catalog)
    return quantize


def _load(model_dir: Path) -> SentenceTransformer:
    """Load on CPU with eager attention, the form measured to export cleanly and to fuse (shared/MODELS.md)."""
    model = SentenceTransformer(
        str(model_dir), device="cpu", local_files_only=True, model_kwargs={"attn_implementation": "eager"}
    ).eval()
    problem = unsupported_structure(model)
    if problem:
        raise ExportError(f"{model_dir}: {problem}")
    return model


def _write_tokenizer(model: SentenceTransformer, max_seq_length: int, target: Path) -> Tokenizer:
    """Save the fast tokenizer with truncation at `max_seq_length` and padding to the longest text.

    We re-serialise rather than copy the file because a tokenizer.json carries its own truncation and padding,
    which need not match the model: the packaged all-MiniLM-L6-v2 ships one that truncates and pads to 128
    tokens while the model reads 256.
    """
    hf_tokenizer = model[0].tokenizer
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None or hf_tokenizer.pad_token_id is None:
        raise ExportError("the model needs a fast tokenizer (tokenizer.json) with a pad token to be served")
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.enable_truncation(max_length=max_seq_length)
    tokenizer.enable_padding(pad_id=hf_tokenizer.pad_token_id, pad_token=hf_tokenizer.pad_token)
    tokenizer.save(str(target))
    return tokenizer


class _MeanPooledEncoder(torch.nn.Module):
    """Transformer + mean over the tokens the attention mask keeps: what sentence-transformers' Pooling does."""

    def __init__(self, transformer: torch.nn.Module, input_names: list[str]) -> None:
        super().__init__()
        self.transformer = transformer
        self.input_names = input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.input_names, inputs, strict=True))
        tokens = self.transformer(**features, return_dict=True).last_hidden_state
        mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        return (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class _TokenEncoder(_MeanPooledEncoder):
    """Transformer whose padding rows are zeroed: the (batch, sequence, dim) token matrices of second-order pooling."""

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.input_names, inputs, strict=True))
        tokens = self.transformer(**features, return_dict=True).last_hidden_state
        return tokens * features["attention_mask"].unsqueeze(-1).to(tokens.dtype)


def _input_names(transformer: torch.nn.Module) -> list[str]:
    """The tokenizer outputs the model's forward takes (DistilBERT-like models have no token_type_ids)."""
    accepted = inspect.signature(transformer.forward).parameters
    input_names = [n for n in INPUT_NAMES if n in accepted]
    if input_names[:2] != ["input_ids", "attention_mask"]:
        raise ExportError(f"the transformer must take input_ids and attention_mask, it takes {list(accepted)}")
    return input_names


def _export_onnx(
    transformer: torch.nn.Module, input_names: list[str], tokenizer: Tokenizer, target: Path, *, tokens: bool = False
) -> None:
    """Trace with two texts of different lengths (so the mask has padding) and dynamic batch/sequence axes; `tokens`
    exports the masked token embeddings rather than their mean."""
    sample = tokenizer.encode_batch(["a short title", "a longer description of the same item, with details"])
    columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    args = tuple(
        torch.from_numpy(np.array([getattr(e, columns[n]) for e in sample], dtype=np.int64)) for n in input_names
    )
    output = TOKENS_OUTPUT_NAME if tokens else OUTPUT_NAME
    axes = {n: {0: "batch", 1: "sequence"} for n in input_names}
    axes[output] = {0: "batch", 1: "sequence"} if tokens else {0: "batch"}

    log.info("exporting ONNX (opset %d, inputs %s)", OPSET, ",".join(input_names))
    with warnings.catch_warnings(), torch.no_grad():
        # Known and harmless here: the legacy exporter is our choice; transformers' mask code compares shapes
        # that are equal for an encoder (traced as constants); the index ops use non-negative positions. The
        # dynamic-axes and parity tests check the result on other batch and sequence sizes.
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*aten::index operator of advanced indexing", category=UserWarning)
        torch.onnx.export(
            (_TokenEncoder if tokens else _MeanPooledEncoder)(transformer, input_names).eval(),
            args,
            str(target),
            dynamo=False,
            opset_version=OPSET,
            input_names=input_names,
            output_names=[output],
            dynamic_axes=axes,
            do_constant_folding=True,
        )

    onnx.checker.check_model(str(target))
    graph = onnx.load(str(target), load_external_data=False).graph
    exported = [i.name for i in graph.input]
    if exported != input_names or [o.name for o in graph.output] != [output]:
        raise ExportError(f"exported graph takes {exported}, expected {input_names}: the model ignores an input")


RUN_FOLDERS = ("best", "last")
"""The model folders a training run writes (trainer/loop.py): a bundle exported from one is named after the run."""


def _run_name(model_dir: Path) -> str:
    """The bundle's default name: the model folder's, or its run's for a run's `best/` or `last/`."""
    folder = model_dir.resolve()
    return _slug(folder.parent.name if folder.name in RUN_FOLDERS else folder.name)


def _slug(folder_name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", folder_name.lower()).strip("-.") or "model"


def _move_into_place(staging: Path, out_dir: Path) -> None:
    """Rename the finished bundle to `out_dir`; an existing one is moved aside first and removed only after."""
    if not out_dir.exists():
        staging.rename(out_dir)
        return
    if not any(out_dir.iterdir()):
        out_dir.rmdir()
        staging.rename(out_dir)
        return
    previous = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    previous.rmdir()
    out_dir.rename(previous)
    try:
        staging.rename(out_dir)
    except OSError:
        previous.rename(out_dir)
        raise
    shutil.rmtree(previous)
