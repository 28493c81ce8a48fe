"""Turns a checkpoint into a model bundle (ONNX encoder, tokenizer, manifest), in fp32 or a reduced precision.
Needs the `train` extra (torch)."""

from metricsearch.export.onnx_export import export_bundle, unsupported_structure
from metricsearch.export.quantize import (
    PRECISIONS,
    calibration_feeds,
    catalog_texts,
    measure_agreement,
    neighbour_overlap,
)

__all__ = [
    "PRECISIONS",
    "calibration_feeds",
    "catalog_texts",
    "export_bundle",
    "measure_agreement",
    "neighbour_overlap",
    "unsupported_structure",
]
