"""Texts -> unit vectors with the bundle's tokenizer and ONNX encoder.

Two runtimes read the same ONNX file: ONNX Runtime (CUDA first when asked and available, CPU otherwise; inputs and
output bound to the device) and OpenVINO on the CPU, which runs bf16 and int8 bundles faster than ONNX Runtime runs
fp32 on CPUs with AVX512-BF16/VNNI or AMX (BENCHMARKS.md, Encoder). A bundle names the runtime it was
measured with (`encoder.backend`); MS_ENCODER_BACKEND overrides it.

A bundle may carry its graph in fp32 and int8 (`encoder.reduced`); `choose_precision` picks one at start-up from the
CPU's instructions and the int8 graph's measured neighbour overlap, and MS_ENCODER_PRECISION forces either.
"""

from __future__ import annotations

import importlib.util
import logging
import queue
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from metricsearch.core import second_order
from metricsearch.core.bundle import MIN_NEIGHBOUR_OVERLAP, Bundle, check_agreement
from metricsearch.core.errors import BundleError
from metricsearch.core.scoring import normalize_rows
from metricsearch.core.spans import span

log = logging.getLogger(__name__)

BULK_BATCH_TOKENS = 384
"""Padded tokens in one bulk encoder call on a CPU (ONNX Runtime). Small calls keep their activations in cache:
all-MiniLM-L6-v2 on the Buy catalog, one thread, took 6.2 CPU-s for 1,092 items at 256-512 tokens, 7.9 at 1,024,
10.4 in batches of 64 texts. A GPU wants large calls: there only the batch size bounds them."""

OPENVINO_BULK_BATCH_TOKENS = 192
"""The same on OpenVINO, where a query waits for a stream that a bulk call holds (there are as many as bulk workers),
so a call's length bounds that wait. Int8 all-MiniLM-L6-v2, 2 workers, 2 cores with AVX-512 VNNI, the 8,000 texts
of bench.indexing's first 4,000 items: a query encoded during the load took 24.6 / 25.4 ms p50 at 384 tokens, 10.9 /
10.6 at 192, and the load ran 1,153 / 1,212 texts/s against 1,135 / 1,228. ONNX Runtime runs a query beside the
bulk calls, so its wait does not depend on their length (fp32, same machine: 15.5 / 14.5 ms at 384, 15.0 / 14.0 at
192, the load 424 / 478 texts/s against 383 / 444)."""


INT8_CPU_FLAGS = frozenset({"avx512_vnni", "amx_int8"})
"""Instructions that make an int8 graph (OpenVINO) faster than fp32, for query texts and bulk alike; on a CPU with AVX2
alone int8 is slower (BENCHMARKS.md: "Encoder" and "Choices behind the defaults", one kind each). AVX-VNNI
(256-bit) is left out: not measured."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (the first processor's); none where the file is missing (another
    OS), which keeps the encoder in fp32."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision an encoder runs and why, as the start-up log gives it."""

    precision: str
    reason: str


def choose_precision(
    requested: str,
    carried: Mapping[str, float | None],
    flags: frozenset[str],
    min_overlap: float,
    *,
    gpu: bool = False,
    int8_runtime: bool = True,
) -> PrecisionChoice:
    """The precision to serve: `requested` when forced ('fp32', 'int8'), else ('auto') int8 where the bundle carries
    it with a neighbour overlap of at least `min_overlap` (`carried`: precision -> overlap, the bundle's own encoder
    first), the CPU has `INT8_CPU_FLAGS`, no GPU runs the encoder and int8's runtime (OpenVINO) is there; otherwise
    the bundle's own encoder."""
    own = next(iter(carried))
    if requested != "auto":
        if requested not in carried:
            raise BundleError(
                f"MS_ENCODER_PRECISION={requested}, but the bundle carries {', '.join(carried)}: re-export it with "
                "`metricsearch export` (the packaged model gets int8 too) or set MS_ENCODER_PRECISION=auto"
            )
        return PrecisionChoice(requested, "MS_ENCODER_PRECISION")
    if own == "int8" or "int8" not in carried:
        return PrecisionChoice(own, "the bundle's only encoder" if len(carried) == 1 else "the bundle's own encoder")
    overlap = carried["int8"] or 0.0
    instructions = sorted(flags & INT8_CPU_FLAGS)
    if not instructions:
        reason = "no AVX-512 VNNI or AMX on this CPU, where int8 is slower than fp32"
    elif gpu:
        reason = "the encoder runs on a GPU"
    elif not int8_runtime:
        reason = "int8 runs fast on OpenVINO, which is not installed or not chosen (MS_ENCODER_BACKEND)"
    elif overlap < min_overlap:
        reason = f"int8 keeps {overlap:.3f} of fp32's top-10 neighbours, below MS_MIN_NEIGHBOUR_OVERLAP={min_overlap}"
    else:
        return PrecisionChoice("int8", f"{', '.join(instructions)} here; int8 keeps {overlap:.3f} of the neighbours")
    return PrecisionChoice(own, reason)


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


def choose_backend(bundle_backend: str, requested: str = "auto") -> str:
    """'auto' -> the bundle's backend when installed, else onnxruntime (every bundle is plain ONNX, which ONNX Runtime
    runs too, only slower); otherwise the one requested."""
    if requested == "onnxruntime" or (requested == "auto" and bundle_backend == "onnxruntime"):
        return "onnxruntime"
    if importlib.util.find_spec("openvino") is not None:
        return "openvino"
    if requested == "openvino":
        raise BundleError("MS_ENCODER_BACKEND is openvino, which is not installed: pip install openvino")
    log.warning("the bundle is fastest on openvino, which is not installed: running it with onnxruntime (slower)")
    return "onnxruntime"


def _runs_natively(bundle_backend: str, requested: str) -> bool:
    """Whether `choose_backend` would run the bundle on its own backend, without falling back."""
    if requested not in ("auto", bundle_backend):
        return False
    return bundle_backend == "onnxruntime" or importlib.util.find_spec(bundle_backend) is not None


class _OnnxRuntime:
    """One session shared by every thread (`run_with_iobinding` is thread-safe with a binding per call). Inputs and
    the output are bound to the first provider's device, so on CUDA a call copies the inputs up and the output
    back once; on CPU the binding wraps the numpy arrays without a copy."""

    def __init__(self, path: Path, providers: str, intra_op_threads: int, output: str) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(str(path), sess_options=options, providers=choose_providers(providers))
        except Exception as exc:  # ONNX Runtime raises its own types for a corrupt or unsupported graph
            raise BundleError(f"{path} cannot be loaded by ONNX Runtime: {exc}") from exc
        self.device = "cuda" if self.session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
        self.bulk_tokens = BULK_BATCH_TOKENS if self.device == "cpu" else None
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = {o.name: o.shape for o in self.session.get_outputs()}
        self.output = output
        self.description = f"onnxruntime {','.join(self.session.get_providers())}"

    def __call__(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        binding = self.session.io_binding()
        for name, array in feed.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, self.device, 0))
        binding.bind_output(self.output, self.device)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


class _OpenVino:
    """OpenVINO on the CPU: a bf16 bundle runs in bf16, an int8 (QDQ) bundle in int8 with the rest in f32, any other
    in f32. The compiled model is shared; each concurrent call takes an infer request of its own from a pool.

    With `intra_op_threads` set, the model runs `streams` streams of that many threads each: a stream runs one call
    at a time, so with the one stream the latency hint gives, the bulk workers' calls (and a query beside them) took
    turns. Int8 all-MiniLM-L6-v2, two workers of one thread on 2 cores with AVX-512 VNNI: 697 texts/s with one
    stream, 1,420 with two; a query alone took the same time either way; the second stream holds 42 MB more.
    OpenVINO runs no more streams than the process has cores (a third one for queries, on 2 cores, gave 2)."""

    def __init__(self, path: Path, intra_op_threads: int, precision: str, output: str, streams: int) -> None:
        import openvino as ov

        core = ov.Core()
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32"}
        if intra_op_threads:
            config |= {"NUM_STREAMS": streams, "INFERENCE_NUM_THREADS": intra_op_threads * streams}
        try:
            model = core.read_model(str(path))
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses of its own for a graph it cannot run
            raise BundleError(f"{path} cannot be loaded by OpenVINO: {exc}") from exc
        self.inputs = [port.get_any_name() for port in model.inputs]
        self.outputs = {
            port.get_any_name(): [d.get_length() if d.is_static else None for d in port.get_partial_shape()]
            for port in model.outputs
        }
        self._port = self.compiled.output(output) if output in self.outputs else None
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self.description = f"openvino CPU {self.compiled.get_property('INFERENCE_PRECISION_HINT').to_string()}"
        self.device = "cpu"
        self.bulk_tokens = OPENVINO_BULK_BATCH_TOKENS

    def __call__(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        try:
            request = self._idle.get_nowait()
        except queue.Empty:
            request = self.compiled.create_infer_request()
        try:
            return request.infer(feed)[self._port]  # a copy: the request's buffers are reused by the next call
        finally:
            self._idle.put(request)


class Encoder:
    """Tokenizer + the bundle's graph on ONNX Runtime or OpenVINO (`choose_backend`), shared by every thread.

    `encode` is for queries; `encode_bulk` (indexing) runs `bulk_workers` encoder calls at once, each on
    `intra_op_threads` threads: one call per core beat one call on every core in 6 of 7 alternating rounds of the Buy
    catalog through /index here (2 shared cores), and no spinning intra-op pool starves the event loop. While a
    query is being encoded, bulk calls start only when no other bulk call runs, so the query has a core of its own.
    `precision` 'auto' runs the precision `choose_precision` picks for this machine; 'fp32' or 'int8' forces one;
    either is refused below `min_overlap` (check_agreement)."""

    def __init__(
        self,
        bundle: Bundle,
        providers: str = "auto",
        intra_op_threads: int = 0,
        backend: str = "auto",
        bulk_workers: int = 1,
        *,
        precision: str = "auto",
        min_overlap: float = MIN_NEIGHBOUR_OVERLAP,
    ) -> None:
        self.bundle = bundle = self._in_chosen_precision(bundle, precision, min_overlap, providers, backend)
        """The bundle with the encoder this one runs in place of its own."""
        manifest = bundle.manifest
        self.dim = manifest.encoder.dim
        self.max_length = manifest.max_seq_length
        self._normalize = manifest.normalize
        self._output = manifest.encoder.output
        self._inputs = manifest.encoder.inputs
        tokens = manifest.encoder.output_kind == "tokens"
        self.rank = second_order.serving_rank(manifest.pooling, manifest.rank_k) if tokens else 0
        self.width = self.dim * (1 + self.rank)
        """Floats in a text's encoding: its vector, then for a second-order bundle its rank x dim factors."""

        try:
            self.tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception for an unreadable file
            raise BundleError(f"{bundle.tokenizer_path} is not a tokenizer file ({exc}): re-export the bundle") from exc
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self._pad_id = self.tokenizer.token_to_id("[PAD]") or 0

        spec = manifest.encoder
        if choose_backend(spec.backend, backend) == "openvino":
            self.runtime = _OpenVino(bundle.encoder_path, intra_op_threads, spec.precision, self._output, bulk_workers)
        else:
            self.runtime = _OnnxRuntime(bundle.encoder_path, providers, intra_op_threads, self._output)
        graph_inputs = set(self.runtime.inputs)
        if set(self._inputs) != graph_inputs:
            raise BundleError(f"bundle.json lists inputs {self._inputs} but the graph takes {sorted(graph_inputs)}")
        outputs = self.runtime.outputs
        width = outputs.get(self._output, [None])[-1]
        if self._output not in outputs or (isinstance(width, int) and width != self.dim):
            raise BundleError(f"bundle.json says output {self._output!r} of width {self.dim}; the graph has {outputs}")
        self.bulk_workers = bulk_workers
        self._bulk = ThreadPoolExecutor(max_workers=bulk_workers, thread_name_prefix="bulk-encoder")
        self._turns = threading.Condition()
        self._queries = 0  # query encodings in progress
        self._bulk_calls = 0  # bulk encoder calls in progress
        log.info("encoder loaded", extra={"runtime": self.runtime.description, "dim": self.dim})

    def _in_chosen_precision(
        self, bundle: Bundle, precision: str, min_overlap: float, providers: str, backend: str
    ) -> Bundle:
        spec = bundle.manifest.encoder
        carried = spec.precisions
        flags = cpu_flags() if len(carried) > 1 else frozenset()
        int8 = next((r for r in spec.reduced if r.precision == "int8"), None)
        choice = choose_precision(
            precision,
            carried,
            flags,
            min_overlap,
            gpu=len(carried) > 1 and choose_providers(providers)[0] == "CUDAExecutionProvider",
            int8_runtime=int8 is not None and _runs_natively(int8.backend, backend),
        )
        served = bundle.in_precision(choice.precision)
        check_agreement(served, min_overlap)
        self.choice = choice
        log.info(
            "encoder precision chosen",
            extra={
                "precision": choice.precision,
                "reason": choice.reason,
                "carried": carried,
                "cpu_int8_instructions": sorted(flags & INT8_CPU_FLAGS),
            },
        )
        return served

    @property
    def precision(self) -> str:
        """The precision this encoder runs (self.choice says why)."""
        return self.choice.precision

    @property
    def session(self) -> ort.InferenceSession:
        """The ONNX Runtime session (onnxruntime backend only), for tools that feed the graph directly."""
        return self.runtime.session

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """(n, width) float32: each text's vector (unit-norm when the bundle says so; for a `tokens` bundle the mean
        of its token embeddings), then for a second-order bundle its factors, flattened (service.second_order).
        Identical texts are encoded once; the rest in batches of similar length (see `_batches`)."""
        with self._turns:
            self._queries += 1
        try:
            return self._encode(texts, batch_size, bulk=False)
        finally:
            with self._turns:
                self._queries -= 1
                self._turns.notify_all()

    def encode_bulk(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """`encode` for indexing: batches of BULK_BATCH_TOKENS padded tokens at most on a CPU (on OpenVINO,
        OPENVINO_BULK_BATCH_TOKENS), spread over `bulk_workers` concurrent calls, yielding to queries. A call's worth
        of texts (a write of a few items) runs here as a query does instead: queued behind another load's batches it
        waited for all of them (a rollout's mirrored writes took 1-3 s each behind its copy)."""
        if len(texts) <= batch_size:
            return self.encode(texts, batch_size)
        return self._encode(texts, batch_size, bulk=True)

    def _encode(self, texts: Sequence[str], batch_size: int, *, bulk: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.width), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        with span("tokenize", texts=len(unique)):
            encodings = self.tokenizer.encode_batch(unique, add_special_tokens=True)
        batches = self._batches([len(e.ids) for e in encodings], batch_size, self.runtime.bulk_tokens if bulk else None)
        calls = [[encodings[i] for i in rows] for rows in batches]
        results = self._bulk.map(self._run_bulk, calls) if bulk else map(self._run, calls)
        out = np.empty((len(unique), self.width), dtype=np.float32)
        for rows, vectors in zip(batches, results, strict=True):
            out[rows] = vectors
        if self._normalize:
            out[:, : self.dim] = normalize_rows(out[:, : self.dim])
        if len(unique) == len(texts):
            return out
        row = {text: n for n, text in enumerate(unique)}
        return out[[row[t] for t in texts]]

    @staticmethod
    def _batches(lengths: list[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
        """Row indices per encoder call: sorted by token count, so short titles are not padded to long descriptions;
        `batch_size` texts and `max_tokens` padded tokens at most (a longer text alone)."""
        batches: list[list[int]] = [[]]
        for row in np.argsort(lengths, kind="stable").tolist():
            rows = batches[-1]
            if rows and (len(rows) == batch_size or (max_tokens and lengths[row] * (len(rows) + 1) > max_tokens)):
                batches.append(rows := [])
            rows.append(row)
        return batches

    def _run_bulk(self, encodings: list) -> np.ndarray:
        with self._turns:
            self._turns.wait_for(lambda: not self._queries or not self._bulk_calls)
            self._bulk_calls += 1
        try:
            return self._run(encodings)
        finally:
            with self._turns:
                self._bulk_calls -= 1
                self._turns.notify_all()

    def _run(self, encodings: list) -> np.ndarray:
        output = self.runtime(self.batch_inputs(encodings))
        if not self.rank:
            return output
        means, factors = second_order.represent(
            [t[: len(e.ids)] for t, e in zip(output, encodings, strict=True)], self.rank
        )
        return np.concatenate([means, factors.reshape(len(encodings), -1)], axis=1)

    def batch_inputs(self, encodings: list) -> dict[str, np.ndarray]:
        """The graph's inputs for tokenized texts, padded to the longest (also an int8 export's calibration data)."""
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
        return {name: arrays[name] for name in self._inputs}
