"""The model bundle: the one contract between the offline side (export/) and the online side (service/, and the
evaluation that scores bundles as the service does).

A bundle is a folder holding `bundle.json` (the manifest defined here, once), an ONNX encoder and
`tokenizer.json`. The manifest is validated on load; every problem becomes a `BundleError` that names
the file and what to do about it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from metricsearch.core.errors import BundleError, ExportError

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 2 added `encoder.reduced` (a bundle carrying more than one precision); a version-1 manifest is the same
without it, so it still loads, and a bundle that carries one precision is written as version 1, which an older
service reads too."""
MANIFEST_FILE = "bundle.json"
MIN_NEIGHBOUR_OVERLAP = 0.95
"""The lowest top-10 neighbour overlap with fp32 a reduced-precision encoder is served at unless the service is told
otherwise (MS_MIN_NEIGHBOUR_OVERLAP)."""

FieldName = Literal["title", "description"]
Pooling = Literal["mean", "cov", "svd"]
Metric = Literal["angular", "frobenius", "recobert"]

METRICS_OF_POOLING: dict[str, tuple[str, ...]] = {
    "mean": ("angular", "recobert"),
    "cov": ("frobenius",),
    "svd": ("frobenius",),
}
"""The one rule of which rerank metric goes with which pooling (the first is the default): mean vectors compare by
MetricBERT's per-field angular distance or RecoBERT's fusion, second-order factors by the Frobenius similarity."""


def default_metric(pooling: str) -> str:
    return METRICS_OF_POOLING[pooling][0]


def pooling_metric_problem(pooling: str, metric: str) -> str | None:
    """Why `metric` cannot rerank `pooling`'s vectors, or None when it can."""
    allowed = METRICS_OF_POOLING.get(pooling)
    if allowed is None:
        return f"pooling {pooling!r} is unknown; use one of {', '.join(METRICS_OF_POOLING)}"
    if metric not in allowed:
        return f"metric {metric!r} does not go with pooling {pooling!r}: " + "; ".join(
            f"pooling {p!r} is scored with {' or '.join(map(repr, m))}" for p, m in METRICS_OF_POOLING.items()
        )
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Agreement(_Strict):
    """How closely a reduced-precision encoder agrees with the fp32 graph it was made from, measured at export on a
    catalog: the service refuses a bundle whose overlap is below MS_MIN_NEIGHBOUR_OVERLAP."""

    dataset: str = Field(description="the catalog measured on")
    texts: int = Field(gt=0, description="titles and descriptions encoded by both")
    mean_cosine: float = Field(description="mean cosine between a text's fp32 and reduced-precision vectors")
    min_cosine: float
    neighbour_overlap: float = Field(
        ge=0, le=1, description="mean share of each text's 10 nearest texts (cosine) that both encoders agree on"
    )
    backend: str = Field(description="the runtime that produced the reduced-precision vectors")


class ReducedEncoder(_Strict):
    """Another precision of the bundle's graph in a file of its own: same inputs, output and width as `encoder`,
    with its agreement measured, so the service can run it instead where the CPU makes it faster."""

    file: str
    precision: Literal["int8"]
    backend: Literal["onnxruntime", "openvino"] = Field(description="the runtime it is fastest on")
    agreement: Agreement = Field(description="measured agreement with the encoder it was made from")


class EncoderSpec(_Strict):
    """The ONNX graph: which file, what it takes and what it returns."""

    file: str = "encoder.onnx"
    inputs: list[str] = Field(min_length=1, description="ONNX input names fed from the tokenizer")
    output: str = Field(description="ONNX output name read by the service")
    output_kind: Literal["pooled", "tokens"] = Field(
        description="pooled: one vector a text (pooling inside the graph); "
        "tokens: masked token embeddings, pooled by the service (second-order pooling)"
    )
    dim: int = Field(gt=0, description="width of the output vectors")
    precision: Literal["fp32", "fp16", "bf16", "int8"] = Field(
        "fp32", description="what the encoder computes in; bf16 runs the fp32 graph in bf16 (OpenVINO)"
    )
    backend: Literal["onnxruntime", "openvino"] = Field(
        "onnxruntime", description="the runtime the encoder was measured with and is fastest on"
    )
    agreement: Agreement | None = Field(None, description="measured agreement with fp32; none for an fp32 bundle")
    reduced: list[ReducedEncoder] = Field(
        default_factory=list,
        description="the same graph in other precisions (an fp32 encoder only); the service chooses one at start-up",
    )

    @model_validator(mode="after")
    def _reduced_from_fp32(self) -> EncoderSpec:
        if self.reduced and self.precision != "fp32":
            raise ValueError("reduced encoders are made from an fp32 encoder; this one is " + self.precision)
        precisions = [r.precision for r in self.reduced]
        if len(set(precisions)) != len(precisions) or any(r.file == self.file for r in self.reduced):
            raise ValueError("each reduced encoder needs a precision and a file of its own")
        return self

    @property
    def precisions(self) -> dict[str, float | None]:
        """Each precision the bundle carries -> its measured top-10 neighbour overlap with fp32 (None: unmeasured or
        fp32 itself); the bundle's own encoder first."""
        own = None if self.agreement is None else self.agreement.neighbour_overlap
        return {self.precision: own} | {r.precision: r.agreement.neighbour_overlap for r in self.reduced}

    def in_precision(self, precision: str) -> EncoderSpec:
        """This spec with the encoder of `precision` in place of its own (itself for its own precision)."""
        if precision == self.precision:
            return self
        reduced = next((r for r in self.reduced if r.precision == precision), None)
        if reduced is None:
            raise BundleError(
                f"the bundle carries no {precision} encoder (it has {', '.join(self.precisions)}): re-export it with "
                "`metricsearch export`, which adds int8 to the packaged model, or choose another precision"
            )
        return self.model_copy(update=dict(reduced) | {"reduced": []})


class FieldSpec(_Strict):
    """An item field embedded on its own, and its weight in the per-field score."""

    name: FieldName
    weight: float = Field(ge=0.0)


CODE_STEMS = "words+joined-part-numbers+code-stems/v2"
"""The analyzer that adds each code's stems ("kdl40v" of "kdl40v5100b"), what `metricsearch export` writes."""


class LexicalSpec(_Strict):
    """The sparse term vectors stored beside the dense ones, per embedded field and for the whole text
    (core/lexical.py)."""

    analyzer: Literal["words+joined-part-numbers/v1", "words+joined-part-numbers+code-stems/v2"] = Field(
        CODE_STEMS,
        description="the tokenizer of core/lexical.py that made the stored terms: v1 without code stems, v2 with "
        "them (a store keeps the analyzer of the bundle that built it)",
    )
    weighting: Literal["sublinear-tf-l2/v1"] = Field(
        "sublinear-tf-l2/v1",
        description="term weights 1 + ln tf, L2-normalised per text; the store multiplies by idf at query time",
    )
    ngrams: Literal["char-wb-3grams/v1"] | None = Field(
        None,
        description="the analyzer of the character n-gram vectors stored beside the words' (components ngrams_<field>, "
        "weighted as the words): each word's 3-grams, padded with a space, as scikit-learn's char_wb; none: words "
        "alone",
    )

    @model_serializer(mode="wrap")
    def _without_absent_ngrams(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A manifest without n-grams is written, and its stores identified (`Bundle.identity`), as before they
        existed: the stores it built stay valid and an older service still reads it."""
        dumped = handler(self)
        if self.ngrams is None:
            dumped.pop("ngrams", None)
        return dumped


FUSION_COMPONENTS = (
    "title",
    "description",
    "lexical_title",
    "lexical_description",
    "lexical_text",
    "lexical_codes",
    "ngrams_title",
    "ngrams_description",
    "ngrams_text",
)


class AdaptiveFusionSpec(_Strict):
    """A label-free rule that chooses the fusion weights on the catalog served (core/fusion.py's AgreementRule): each
    component's neighbour agreement with the others on the catalog's own items, where the catalog holds
    near-duplicates, mapped to weights; elsewhere the fixed `weights`."""

    components: list[str] = Field(min_length=1, description="the components the rule may weigh")
    floor: float = Field(ge=0.0, le=1.0, description="agreement below which a component weighs 0")
    power: float = Field(gt=0.0, description="w = max(agreement - floor, 0) ** power, the largest scaled to 1")
    gate: float = Field(
        ge=0.0, le=1.0, description="near-duplicate agreement below which the fixed weights are used instead"
    )
    chosen_by: str = Field("", description="how the rule's parameters were chosen")

    @model_validator(mode="after")
    def _known(self) -> AdaptiveFusionSpec:
        unknown = sorted(set(self.components) - set(FUSION_COMPONENTS))
        if unknown or len(set(self.components)) != len(self.components):
            raise ValueError(
                f"fusion.adaptive.components must name each of {', '.join(FUSION_COMPONENTS)} at most once, got "
                f"{self.components}"
            )
        return self


class FusionSpec(_Strict):
    """The fused rerank: each component's score z-normalised with catalog-wide statistics, then weighted."""

    weights: dict[str, float] = Field(
        description="weight >= 0 of each component: title, description (the learned metric per field), "
        "lexical_title, lexical_description, lexical_text (TF-IDF cosine per field and over the whole text), "
        "lexical_codes (model numbers), ngrams_title, ngrams_description, ngrams_text (character 3-grams, with "
        "lexical.ngrams); with `adaptive`, the weights wherever its rule does not choose"
    )
    chosen_by: str = Field(
        "", description="how the weights were chosen (rule, self-supervised signals or labelled pairs)"
    )
    adaptive: AdaptiveFusionSpec | None = Field(
        None, description="a rule that chooses the weights on the catalog served, without labels; none: `weights`"
    )

    @model_validator(mode="after")
    def _known(self) -> FusionSpec:
        unknown = sorted(set(self.weights) - set(FUSION_COMPONENTS))
        if unknown:
            raise ValueError(f"fusion weights name unknown components {unknown}; use {', '.join(FUSION_COMPONENTS)}")
        if any(w < 0 for w in self.weights.values()) or not any(w > 0 for w in self.weights.values()):
            raise ValueError("fusion weights must be >= 0, at least one > 0")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_rule(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A fusion without a rule is written as before rules existed, so an older service still reads it."""
        dumped = handler(self)
        if self.adaptive is None:
            dumped.pop("adaptive", None)
        return dumped


class Provenance(_Strict):
    """Where the weights came from, so a served figure can be traced to its training run."""

    base_model: str
    objective: str = "off-the-shelf"
    training_data_digest: str | None = None
    exporter: str = ""
    created_at: str = ""
    evaluation: dict[str, float] = Field(default_factory=dict)
    notes: str = ""


class Manifest(_Strict):
    """`bundle.json`, schema version 2 (docs/bundle.md); version 1 reads as the same without `encoder.reduced`."""

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    encoder: EncoderSpec
    tokenizer: str = "tokenizer.json"
    max_seq_length: int = Field(gt=0, le=8192)
    pooling: Pooling = "mean"
    rank_k: int | None = Field(default=None, gt=0)
    normalize: bool = True
    metric: Metric = "angular"
    recobert_lambdas: tuple[float, float, float, float] = Field(
        (1.0, 1.0, 1.0, 1.0), description="metric 'recobert': weights of CosD, CosT, TDM(t_m, d_s), TDM(t_s, d_m)"
    )
    fields: list[FieldSpec] = Field(
        default_factory=lambda: [FieldSpec(name="title", weight=1.0), FieldSpec(name="description", weight=1.0)]
    )
    lexical: LexicalSpec | None = Field(
        None, description="term vectors stored per field and for the whole text; none: dense only"
    )
    fusion: FusionSpec | None = Field(None, description="the fused rerank's weights; none: the metric alone")
    provenance: Provenance

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"fields must name title and/or description once each, got {names}")
        if names[0] != "title" or self.fields[0].weight <= 0:
            raise ValueError(
                "the first field must be 'title' with weight > 0: every item has a title, and items "
                "without a description compare on it"
            )
        if self.pooling == "svd" and self.rank_k is None:
            raise ValueError("pooling 'svd' needs rank_k")
        if self.pooling == "mean" and self.rank_k is not None:
            raise ValueError("rank_k applies to pooling 'cov' (truncation) and 'svd', not to mean pooling")
        problem = pooling_metric_problem(self.pooling, self.metric)
        if problem:
            raise ValueError(problem)
        if self.fusion is not None and (self.lexical is None or self.metric == "recobert"):
            raise ValueError("fusion needs lexical vectors and metric 'angular' or 'frobenius'")
        if self.fusion is not None and self.lexical.ngrams is None:
            named = {name for name, w in self.fusion.weights.items() if w > 0}
            named |= set(self.fusion.adaptive.components) if self.fusion.adaptive else set()
            if any(name.startswith("ngrams_") for name in named):
                raise ValueError("fusion names ngrams_* components, which need lexical.ngrams 'char-wb-3grams/v1'")
        if self.metric == "recobert" and [(f.name, f.weight > 0) for f in self.fields] != [
            ("title", True),
            ("description", True),
        ]:
            raise ValueError("metric 'recobert' needs the fields title and description, both with weight > 0")
        if self.schema_version == 1 and self.encoder.reduced:
            raise ValueError("encoder.reduced needs schema_version 2")
        if (self.pooling == "mean") != (self.encoder.output_kind == "pooled"):
            raise ValueError(
                "pooling 'mean' goes with encoder output_kind 'pooled', second-order pooling ('cov', 'svd') with "
                "'tokens'"
            )
        return self

    def weight(self, field: FieldName) -> float:
        """The field's weight, 0 when the bundle does not embed that field."""
        return next((f.weight for f in self.fields if f.name == field), 0.0)


@dataclass(frozen=True)
class Bundle:
    """A validated manifest and the folder it lives in."""

    path: Path
    manifest: Manifest

    @property
    def encoder_path(self) -> Path:
        return self.path / self.manifest.encoder.file

    @property
    def tokenizer_path(self) -> Path:
        return self.path / self.manifest.tokenizer

    def in_precision(self, precision: str) -> Bundle:
        """The bundle with its `precision` encoder in place of its own, for the encoder to load. Stores keep the
        loaded bundle's identity (its own encoder's bytes), so one store serves either precision: their vectors
        differ less than the neighbour overlap recorded says."""
        spec = self.manifest.encoder.in_precision(precision)
        return (
            self
            if spec is self.manifest.encoder
            else Bundle(self.path, self.manifest.model_copy(update={"encoder": spec}))
        )

    @cached_property
    def identity(self) -> str:
        """What a store's vectors depend on: the bundle name, the encoder's bytes and the field weights. A store
        built under another identity holds vectors this bundle would not produce."""
        digest = hashlib.sha256()
        with self.encoder_path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        weights = ",".join(f"{f.name}={f.weight:g}" for f in self.manifest.fields)
        lexical = self.manifest.lexical
        terms = "" if lexical is None else f", lexical {lexical.model_dump_json()}"
        return f"{self.manifest.name} (encoder sha256 {digest.hexdigest()[:12]}, weights {weights}{terms})"


def load_bundle(path: Path) -> Bundle:
    """Read and validate a bundle folder; raise `BundleError` naming the file and the fix."""
    manifest_path = Path(path) / MANIFEST_FILE
    if not manifest_path.is_file():
        raise BundleError(f"no {MANIFEST_FILE} in {path}: build a bundle with `metricsearch export --bundle {path}`")
    try:
        raw = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BundleError(f"{manifest_path} is not readable JSON ({exc}): re-export the bundle") from exc
    if not isinstance(raw, dict):
        raise BundleError(f"{manifest_path} must hold a JSON object")
    version = raw.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise BundleError(
            f"{manifest_path} has schema_version {version!r}; this service reads versions "
            f"{' and '.join(map(str, READABLE_VERSIONS))}: re-export the bundle with this version's "
            "`metricsearch export`"
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'manifest'}: {e['msg']}" for e in exc.errors())
        raise BundleError(f"{manifest_path} is invalid: {problems}") from exc
    bundle = Bundle(path=Path(path), manifest=manifest)
    reduced = [bundle.path / r.file for r in manifest.encoder.reduced]
    for needed in (bundle.encoder_path, bundle.tokenizer_path, *reduced):
        if not needed.is_file():
            raise BundleError(f"{manifest_path} names {needed.name}, which is missing from {path}")
    return bundle


def check_agreement(bundle: Bundle, floor: float) -> None:
    """Refuse a reduced-precision bundle whose measured neighbour overlap with fp32 is below `floor`, or that records
    none (its overlap is unknown, so it counts as 0: only a floor of 0 serves it); fp32 is exact and always passes."""
    encoder = bundle.manifest.encoder
    agreement = encoder.agreement
    if agreement is None and encoder.precision != "fp32" and floor > 0:
        raise BundleError(
            f"{bundle.path}: its {encoder.precision} encoder records no measured agreement with fp32, so "
            f"MS_MIN_NEIGHBOUR_OVERLAP={floor} cannot be checked: re-export it with `metricsearch export --precision "
            f"{encoder.precision} --catalog CATALOG` to measure it on your catalog, or set MS_MIN_NEIGHBOUR_OVERLAP=0 "
            "to serve it unmeasured"
        )
    if agreement is not None and agreement.neighbour_overlap < floor:
        raise BundleError(
            f"{bundle.path}: its {encoder.precision} encoder keeps {agreement.neighbour_overlap:.3f} "
            f"of fp32's top-10 neighbours on {agreement.dataset}, below MS_MIN_NEIGHBOUR_OVERLAP={floor}: "
            "export it with another --precision (fp32 is exact) or lower the floor"
        )


def check_bundle_target(folder: Path, overwrite: bool) -> None:
    """Refuse a folder an export must not write into; torch-free, so `metricsearch export` refuses at once rather
    than after loading the exporter (10 s)."""
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{folder} exists and is not a folder: choose another --bundle")
    if folder.is_dir() and any(folder.iterdir()) and not overwrite:
        raise ExportError(f"{folder} is not empty: choose another --bundle or pass --overwrite to replace it")


def write_manifest(manifest: Manifest, folder: Path) -> Path:
    """Write `bundle.json` (used by export/); the one serialisation of the schema, in the lowest version that holds
    the manifest."""
    version = SCHEMA_VERSION if manifest.encoder.reduced else 1
    written = manifest.model_copy(update={"schema_version": version})
    target = Path(folder) / MANIFEST_FILE
    target.write_text(
        written.model_dump_json(indent=2, exclude=None if version > 1 else {"encoder": {"reduced"}}) + "\n"
    )
    return target
