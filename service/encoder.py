"""Texts -> unit vectors with the bundle's tokenizer and ONNX encoder (ONNX Runtime; CUDA first when asked and
available, CPU otherwise)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from service.bundle import Bundle
from service.errors import BundleError
from service.scoring import normalize_rows

log = logging.getLogger(__name__)


def choose_providers(requested: str) -> list[str]:
    """'auto' -> CUDA then CPU when onnxruntime-gpu sees a GPU, else CPU; otherwise the listed providers."""
    available = ort.get_available_providers()
    if requested.strip().lower() == "auto":
        wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        return [p for p in wanted if p in available]
    providers = [p.strip() for p in requested.split(",") if p.strip()]
    unknown = [p for p in providers if p not in available]
    if unknown:
        raise BundleError(f"MS_PROVIDERS names {unknown}, not available here; available: {available}")
    return providers


class Encoder:
    """One ONNX Runtime session shared by every thread (`InferenceSession.run` is thread-safe)."""

    def __init__(self, bundle: Bundle, providers: str = "auto", intra_op_threads: int = 0) -> None:
        manifest = bundle.manifest
        self.dim = manifest.encoder.dim
        self.max_length = manifest.max_seq_length
        self._normalize = manifest.normalize
        self._output = manifest.encoder.output
        self._inputs = manifest.encoder.inputs

        self.tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self._pad_id = self.tokenizer.token_to_id("[PAD]") or 0

        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(
                str(bundle.encoder_path), sess_options=options, providers=choose_providers(providers)
            )
        except Exception as exc:  # ONNX Runtime raises its own types for a corrupt or unsupported graph
            raise BundleError(f"{bundle.encoder_path} cannot be loaded by ONNX Runtime: {exc}") from exc
        graph_inputs = {i.name for i in self.session.get_inputs()}
        if set(self._inputs) != graph_inputs:
            raise BundleError(f"bundle.json lists inputs {self._inputs} but the graph takes {sorted(graph_inputs)}")
        outputs = {o.name: o.shape for o in self.session.get_outputs()}
        width = outputs.get(self._output, [None])[-1]
        if self._output not in outputs or (isinstance(width, int) and width != self.dim):
            raise BundleError(f"bundle.json says output {self._output!r} of width {self.dim}; the graph has {outputs}")
        log.info("encoder loaded", extra={"providers": self.session.get_providers(), "dim": self.dim})

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """(n, dim) float32 vectors, unit-norm when the bundle says so; batches of similar length."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            out[chunk] = self._run([encodings[i] for i in chunk])
        return normalize_rows(out) if self._normalize else out

    def _run(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        arrays = {
            "input_ids": np.full((len(encodings), width), self._pad_id, dtype=np.int64),
            "attention_mask": np.zeros((len(encodings), width), dtype=np.int64),
            "token_type_ids": np.zeros((len(encodings), width), dtype=np.int64),
        }
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            arrays["input_ids"][row, :n] = enc.ids
            arrays["attention_mask"][row, :n] = 1
            arrays["token_type_ids"][row, :n] = enc.type_ids
        feed = {name: arrays[name] for name in self._inputs}
        return self.session.run([self._output], feed)[0]
