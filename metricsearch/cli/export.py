"""`metricsearch export`: a trained checkpoint (or the packaged model) turned into the bundle the service loads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, get_args

import typer

from metricsearch.cli.options import choice
from metricsearch.core.bundle import METRICS_OF_POOLING, EncoderSpec, FusionSpec
from metricsearch.core.bundle import Metric as ManifestMetric
from metricsearch.core.fusion import NAMED_FUSIONS

Pooling = choice("Pooling", METRICS_OF_POOLING)
Metric = choice("Metric", get_args(ManifestMetric))
Precision = choice("Precision", get_args(EncoderSpec.model_fields["precision"].annotation))
Fusion = choice("Fusion", NAMED_FUSIONS)


def export(
    bundle: Annotated[Path, typer.Option(help="bundle folder to write (what `serve --bundle` loads)")],
    model: Annotated[
        Path | None,
        typer.Option(help="sentence-transformers folder, e.g. RUN/best of `train`; default: packaged all-MiniLM-L6-v2"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="bundle name (default: from the model folder)")] = None,
    title_weight: Annotated[float, typer.Option(min=0.0, help="weight of the title distance")] = 1.0,
    description_weight: Annotated[float, typer.Option(min=0.0, help="weight of the description distance")] = 1.0,
    metric: Annotated[
        Metric | None,
        typer.Option(
            help="rerank: angular (per-field angular sum, default for mean pooling), recobert (RecoBERT's 4-score "
            "fusion) or frobenius (S_F, default for cov/svd pooling)"
        ),
    ] = None,
    pooling: Annotated[
        Pooling,
        typer.Option(
            help="mean (one vector a text), cov or svd (second-order: the graph returns token embeddings, the "
            "service stores rank-k factors); use what the model was trained with"
        ),
    ] = "mean",
    rank_k: Annotated[
        int | None,
        typer.Option(min=1, help="factor rows kept: needed for svd; with cov, truncates a cov-trained model to rank k"),
    ] = None,
    max_seq_length: Annotated[
        int | None, typer.Option(min=1, help="truncate texts at this many tokens (default: the model's)")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing bundle folder")] = False,
    precision: Annotated[
        Precision,
        typer.Option(
            help="fp32 (exact, ONNX Runtime); int8 (NNCF-quantized, OpenVINO: fastest on CPU); bf16 (OpenVINO "
            "runs the fp32 graph in bf16); fp16 (for CUDA). int8 and bf16 need --catalog (docs/bundle.md)"
        ),
    ] = "fp32",
    catalog: Annotated[
        Path | None,
        typer.Option(
            help="catalog (.csv/.jsonl) whose texts calibrate int8 and measure the agreement with fp32 recorded in "
            "the bundle"
        ),
    ] = None,
    fusion: Annotated[
        Fusion | None,
        typer.Option(
            help="fusion weights to write: default (DEFAULT_FUSION: any text, sentence similarity kept at the "
            "encoder's) or catalog (CATALOG_FUSION: item-to-item on a product catalog, more weight on lexical "
            "evidence); unset: default for the packaged model, none for another until `metricsearch tune`"
        ),
    ] = None,
) -> None:
    """Turn a checkpoint into a model bundle (needs the `train` extra: torch)."""
    from metricsearch.core.bundle import check_bundle_target, load_bundle

    check_bundle_target(bundle, overwrite)
    from metricsearch.export import export_bundle

    path = export_bundle(
        model,
        bundle,
        name=name,
        title_weight=title_weight,
        description_weight=description_weight,
        metric=metric,
        max_seq_length=max_seq_length,
        pooling=pooling,
        rank_k=rank_k,
        overwrite=overwrite,
        precision=precision,
        catalog=catalog,
        fusion=None if fusion is None else named_fusion(fusion),
    )
    encoder = load_bundle(path).manifest.encoder
    measured = [(encoder.precision, encoder.agreement), *((r.precision, r.agreement) for r in encoder.reduced)]
    kept = "; ".join(
        f"{p} keeps {a.neighbour_overlap:.3f} of fp32's top-10 neighbours, mean cosine {a.mean_cosine:.4f}, on "
        f"{a.texts} texts of {a.dataset}"
        for p, a in measured
        if a
    )
    typer.echo(f"bundle written to {path}" + (f" ({kept})" if kept else ""))


def named_fusion(name: str) -> FusionSpec:
    """The fusion weights `--fusion NAME` writes, with the rule that chose them."""
    weights, rule = NAMED_FUSIONS[name]
    return FusionSpec(weights=weights, chosen_by=rule)
