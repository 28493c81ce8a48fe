"""Reduced-precision encoders for a bundle, each measured against the fp32 graph it comes from.

- `int8`: NNCF post-training quantization of the ONNX graph (QDQ format) with its transformer preset, which applies
  SmoothQuant and keeps the sensitive operations (softmax, layer norms, the attention scores) in float; calibrated on
  the catalog's own texts. OpenVINO runs it in int8 (VNNI). ONNX Runtime's `quantize_dynamic`, per-channel or with
  the FFN outputs kept in fp32, lost too many neighbours (BENCHMARKS.md, Encoder).
- `bf16`: the fp32 graph unchanged, run in bf16 by OpenVINO (AVX512-BF16 / AMX).
- `fp16`: the graph's float tensors in fp16, inputs and output unchanged, for CUDA (ONNX Runtime).

The export measures the result on the catalog with the service's own `Encoder` (the runtime that will serve it)
and records mean cosine and top-10 neighbour overlap with fp32 in the manifest (`encoder.agreement`); the service
refuses a bundle below MS_MIN_NEIGHBOUR_OVERLAP. `add_int8` keeps the fp32 graph and writes the int8 one beside it
(`encoder.reduced`), for the service to choose at start-up.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import onnx
from tqdm import tqdm

from metricsearch.core.bundle import Agreement, Bundle, EncoderSpec, Manifest, ReducedEncoder
from metricsearch.core.errors import ExportError
from metricsearch.core.readers import read_catalog
from metricsearch.encoder import Encoder
from metricsearch.export import calibration

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
BACKENDS = {"fp32": "onnxruntime", "fp16": "onnxruntime", "bf16": "openvino", "int8": "openvino"}
CALIBRATION_TEXTS = 320  # about NNCF's default subset of 300 samples
MEASURED_TEXTS = 5000  # per field: the neighbour search is all-pairs
NEIGHBOURS = 10
SEED = 0
INT8_FILE = "encoder-int8.onnx"
LISTINGS = "generic product listings"


def catalog_texts(path: Path, limit: int = MEASURED_TEXTS) -> list[list[str]]:
    """[titles, non-empty descriptions] of a catalog file, each a seeded sample of at most `limit`."""
    items = list(read_catalog(path))
    rng = np.random.default_rng(SEED)
    fields = [[i.title for i in items], [i.description for i in items if i.description.strip()]]
    return [[f[j] for j in sorted(rng.choice(len(f), limit, replace=False))] if len(f) > limit else f for f in fields]


def check_request(precision: str, catalog: Path | None) -> None:
    """Fail fast, before the fp32 export, on a precision or catalog that cannot work."""
    if precision not in PRECISIONS:
        raise ExportError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if catalog is None and precision in ("int8", "bf16"):
        raise ExportError(
            f"--precision {precision} needs --catalog (CSV/JSONL of id,title,description): the int8 graph is "
            "calibrated on its texts, and the neighbour overlap with fp32 is measured on them"
        )
    if catalog is not None and not Path(catalog).is_file():
        raise ExportError(f"--catalog {catalog}: no such file")


def reduce_precision(fp32: Bundle, precision: str, catalog: Path | None) -> Manifest:
    """Rewrite the fp32 bundle folder `fp32.path` as a `precision` bundle; return its manifest, which records the
    agreement with fp32 measured on `catalog` (needed for int8 and bf16, optional for fp16)."""
    check_request(precision, catalog)
    groups = catalog_texts(catalog) if catalog is not None else None
    source = fp32.encoder_path
    target = source.with_name(f"{source.stem}-{precision}.onnx") if precision in ("int8", "fp16") else source
    spec, agreement = _reduce(fp32, precision, target, groups, catalog.name if catalog else "")
    if target != source:
        target.replace(source)
    return fp32.manifest.model_copy(
        update={"encoder": spec.model_copy(update={"file": source.name, "agreement": agreement})}
    )


def add_int8(fp32: Bundle, catalog: Path | None) -> Manifest:
    """The fp32 bundle's manifest with an int8 graph written beside its own (`encoder.reduced`), calibrated on
    `catalog`'s texts and measured against fp32 on them; without a catalog, on generic product listings
    (export/calibration.py)."""
    with tempfile.TemporaryDirectory(prefix="calibration-") as folder:
        source = catalog or calibration.write(Path(folder) / "listings.jsonl")
        _, agreement = _reduce(
            fp32, "int8", fp32.path / INT8_FILE, catalog_texts(source), catalog.name if catalog else LISTINGS
        )
    int8 = ReducedEncoder(file=INT8_FILE, precision="int8", backend=BACKENDS["int8"], agreement=agreement)
    return fp32.manifest.model_copy(update={"encoder": fp32.manifest.encoder.model_copy(update={"reduced": [int8]})})


def _reduce(
    fp32: Bundle, precision: str, target: Path, groups: list[list[str]] | None, dataset: str
) -> tuple[EncoderSpec, Agreement | None]:
    """Write the `precision` graph of `fp32`'s to `target` (bf16: none, OpenVINO runs the fp32 graph); return its
    encoder spec and its agreement with fp32 on `groups` (None without texts)."""
    reference = Encoder(fp32, "CPUExecutionProvider", precision="fp32")
    if precision == "int8":
        quantize_int8(fp32.encoder_path, target, calibration_feeds(reference, groups))
    elif precision == "fp16":
        to_fp16(fp32.encoder_path, target)
    spec = fp32.manifest.encoder.model_copy(
        update={"file": target.name, "precision": precision, "backend": BACKENDS[precision]}
    )
    if groups is None:
        return spec, None
    # Unmeasured until now: any overlap may run, so the floor is 0 here.
    reduced = Bundle(fp32.path, fp32.manifest.model_copy(update={"encoder": spec}))
    agreement = measure_agreement(reference, Encoder(reduced, "CPUExecutionProvider", min_overlap=0), groups, dataset)
    log.info("%s agrees with fp32 on %s: %s", precision, dataset, agreement.model_dump())
    return spec, agreement


def calibration_feeds(encoder: Encoder, groups: Sequence[Sequence[str]], batch_size: int = 16) -> list[dict]:
    """Graph inputs for a seeded sample of the catalog's titles and descriptions, in batches."""
    texts = list(chain.from_iterable(groups))
    rng = np.random.default_rng(SEED)
    sample = [texts[i] for i in rng.choice(len(texts), min(CALIBRATION_TEXTS, len(texts)), replace=False)]
    encodings = encoder.tokenizer.encode_batch(sample)
    return [encoder.batch_inputs(encodings[i : i + batch_size]) for i in range(0, len(encodings), batch_size)]


def quantize_int8(source: Path, target: Path, feeds: list[dict]) -> None:
    """NNCF post-training int8 quantization (transformer preset: SmoothQuant, sensitive ops kept in float)."""
    import nncf

    quantized = nncf.quantize(
        onnx.load(str(source)),
        nncf.Dataset(feeds),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(feeds),
    )
    onnx.save(quantized, str(target))


def to_fp16(source: Path, target: Path) -> None:
    """fp16 weights and activations; int64 inputs and the fp32 output kept, so the service feeds it unchanged."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(target))


def measure_agreement(
    reference: Encoder, candidate: Encoder, groups: Sequence[Sequence[str]], dataset: str
) -> Agreement:
    """Mean/min cosine between the two encoders' vectors of the same texts, and the mean share of each text's 10
    nearest texts of its own field (cosine, by the reference) that the candidate also ranks in its top 10."""
    cosines, overlaps = [], []
    for texts in groups:
        if len(texts) <= NEIGHBOURS:
            continue
        ref, cand = _encode(reference, texts), _encode(candidate, texts)
        cosines.append(np.sum(ref * cand, axis=1))
        overlaps.append(neighbour_overlap(ref, cand))
    if not cosines:
        raise ExportError(f"{dataset} has too few texts to measure neighbours: give a catalog of at least 11 items")
    cosine, overlap = np.concatenate(cosines), np.concatenate(overlaps)
    return Agreement(
        dataset=dataset,
        texts=len(cosine),
        mean_cosine=round(float(cosine.mean()), 5),
        min_cosine=round(float(cosine.min()), 5),
        neighbour_overlap=round(float(overlap.mean()), 4),
        backend=candidate.runtime.description,
    )


def neighbour_overlap(reference: np.ndarray, candidate: np.ndarray, k: int = NEIGHBOURS) -> np.ndarray:
    """Per row: |top-k(reference) ∩ top-k(candidate)| / k over the other rows, by dot product of unit vectors."""
    return np.array([len(set(a) & set(b)) / k for a, b in zip(_top_k(reference, k), _top_k(candidate, k), strict=True)])


def _top_k(vectors: np.ndarray, k: int) -> np.ndarray:
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    return np.argpartition(-scores, k, axis=1)[:, :k]


def _encode(encoder: Encoder, texts: Sequence[str], chunk: int = 256) -> np.ndarray:
    parts = [
        encoder.encode(texts[i : i + chunk], batch_size=32)
        for i in tqdm(range(0, len(texts), chunk), desc="measuring", unit="chunk", leave=False)
    ]
    return np.concatenate(parts)[:, : encoder.dim]
