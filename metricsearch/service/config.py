"""The one settings object. Every field is overridable by an `MS_<NAME>` env variable; nothing else reads the
environment. docs/settings.md documents each field (a test keeps them in sync)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

IndexType = Literal["keyword", "float", "bool"]
"""Payload index types of metadata keys. No integer index: filters compare numbers by value, and an integer index
leaves out a stored 2.5 (measured: a range filter then misses it), so numbers take a float index, which holds ints
and floats alike."""
_INDEX_TYPES: tuple[str, ...] = IndexType.__args__
_FIELD_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_indexed_fields(declared: str | Mapping[str, str]) -> dict[str, str]:
    """`brand:keyword,price:float` (or a mapping) as {key: type}; a malformed pair, a key filters cannot use, an
    unknown type or a key given twice is refused naming it, so a typo stops the start-up instead of leaving a filter
    unindexed."""
    if isinstance(declared, Mapping):
        pairs = [(str(k), ":", str(v)) for k, v in declared.items()]
    else:
        pairs = [tuple(part.strip() for part in p.partition(":")) for p in declared.split(",") if p.strip()]
    fields: dict[str, str] = {}
    for key, sep, kind in pairs:
        if not sep or not key or not kind:
            raise ValueError(f"{key + sep + kind!r} is not key:type (e.g. brand:keyword,price:float,in_stock:bool)")
        if not _FIELD_KEY.match(key):
            raise ValueError(f"{key!r} cannot be a filtered metadata key: use letters, digits, '_' and '-' only")
        kind = kind.lower()
        if kind in ("integer", "int"):
            raise ValueError(f"{key}:{kind}: declare numbers as float (filters compare 2 and 2.0 by value)")
        if kind not in _INDEX_TYPES:
            raise ValueError(f"{key}: unknown index type {kind!r}; use one of {', '.join(_INDEX_TYPES)}")
        if key in fields:
            raise ValueError(f"{key!r} is declared twice")
        fields[key] = kind
    return fields


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MS_", extra="ignore")

    # --- where things live
    bundle_dir: Path = Field(Path("bundles/all-minilm-l6-v2"), description="model bundle folder to serve")
    data_dir: Path = Field(Path("var"), description="embedded store location (ignored with qdrant_url)")
    qdrant_url: str | None = Field(None, description="Qdrant server or cluster URL; unset = embedded store")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server")
    qdrant_timeout_s: float = Field(5.0, gt=0, description="timeout of one Qdrant server call")
    qdrant_max_in_flight: int = Field(
        16, gt=0, description="Qdrant server calls waiting for an answer at once; one more gets 503 at once"
    )
    qdrant_breaker_failures: int = Field(
        3, gt=0, description="Qdrant server outages in a row (timeouts, refusals, 5xx) after which calls fail fast"
    )
    qdrant_breaker_open_s: float = Field(
        2.0, gt=0, description="seconds calls fail fast after the breaker opened, before one call tries Qdrant again"
    )
    qdrant_vector_cache_mb: float = Field(
        256, ge=0, description="MB of vectors the server store keeps so a search need not read them; 0 = off"
    )
    collection: str = Field("items", pattern=r"^[A-Za-z0-9_-]+$", description="collection (or shard folder) name")
    indexed_fields: Annotated[dict[str, IndexType], NoDecode] = Field(
        default_factory=dict,
        description="metadata keys given a payload index, comma-separated key:type (keyword, float or bool), e.g. "
        "brand:keyword,price:float,in_stock:bool; both stores create, retype or drop indexes to match at start-up",
    )

    auto_index: bool = Field(
        True,
        description="build a payload index in the background for a metadata key the first time a search filters on "
        "it, typed from the stored values; kept across restarts (off: start-up drops every undeclared index)",
    )
    auto_index_max: int = Field(
        16, ge=0, description="most payload indexes built automatically (MS_AUTO_INDEX), learned before a restart too"
    )

    @field_validator("qdrant_url", mode="before")
    @classmethod
    def _blank_url_is_unset(cls, value: object) -> object:
        """MS_QDRANT_URL= (set but empty, as an env file or a template leaves it) means the embedded store."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("indexed_fields", mode="before")
    @classmethod
    def _parse_indexed_fields(cls, value: object) -> object:
        return parse_indexed_fields(value) if isinstance(value, str | Mapping) else value

    # --- HTTP
    host: str = Field("127.0.0.1", description="address uvicorn binds")
    port: int = Field(8000, ge=1, le=65535, description="port uvicorn binds")
    api_key: SecretStr | None = Field(None, description="key required on /index and DELETE; unset = writes open")
    read_api_key: SecretStr | None = Field(None, description="key required on reads; unset = reads open")
    api_key_file: Path | None = Field(None, description="file holding api_key (a mounted secret); not with api_key")
    read_api_key_file: Path | None = Field(
        None, description="file holding read_api_key (a mounted secret); not with read_api_key"
    )
    keep_alive_s: int = Field(75, gt=0, description="idle keep-alive connections are closed after this (uvicorn)")
    header_timeout_s: float = Field(
        10.0, gt=0, description="a request's headers must arrive within this; the connection is closed otherwise"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="a request's body must arrive within this of its headers; the connection is closed"
    )
    log_level: str = Field("info", description="log level of the JSON logs")

    # --- limits (docs/api.md: "Limits")
    max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="bytes in one request body (413 beyond, before parsing)"
    )
    max_query_body_bytes: int = Field(
        1024 * 1024, gt=0, description="bytes in one /similar request body (413 beyond, before parsing)"
    )
    max_batch_query_body_bytes: int = Field(
        4 * 1024 * 1024, gt=0, description="bytes in one /similar/batch request body (413 beyond, before parsing)"
    )
    max_batch_items: int = Field(1000, gt=0, description="items in one /index request (413 beyond)")
    max_title_chars: int = Field(1000, gt=0, description="characters in a title (413 beyond)")
    max_description_chars: int = Field(
        20000, gt=0, description="characters in a description or text query (413 beyond)"
    )
    max_metadata_keys: int = Field(64, gt=0, description="keys in one item's metadata")

    # --- encoding
    providers: str = Field(
        "auto", description="ONNX Runtime providers, comma-separated; auto = CUDA when available, else CPU"
    )
    # 1, not one per core: on 2 cores a second, spinning encoder thread starves the event loop, which does the search,
    # rerank and HTTP of every request (BENCHMARKS.md, cold text queries at 8 connections: 22 req/s with 0, 85 with 1;
    # 70 vs 76 at 16 in the batcher sweep). Concurrent queries still share the one thread's calls (the batcher).
    intra_op_threads: int = Field(
        1, ge=0, description="encoder (ONNX Runtime or OpenVINO) threads per call; 0 = the runtime's choice (per core)"
    )
    query_batch_window_ms: float = Field(
        0.0, ge=0, description="how long a text query waits for others to batch with (0: measured best)"
    )
    query_batch_max_tokens: int = Field(8192, gt=0, description="tokens in one batched encoder call")
    query_queue_size: int = Field(256, gt=0, description="text queries waiting to be encoded (429 beyond)")
    index_batch_size: int = Field(64, gt=0, description="texts per encoder call when indexing")
    # Indexing runs calls side by side, each on MS_INTRA_OP_THREADS threads, not one call on every core: no spinning
    # intra-op pool to starve the event loop, and a query being encoded gets a core (encoder.Encoder).
    index_workers: int = Field(
        0, ge=0, description="encoder calls indexing runs at once; 0 = cores / MS_INTRA_OP_THREADS (set your CPU limit)"
    )

    # --- ranking
    candidates_min: int = Field(100, gt=0, description="fewest ANN candidates reranked exactly")
    candidates_factor: int = Field(
        3,
        gt=0,
        description="ANN candidates = max(candidates_min, factor x k); 3: BENCHMARKS.md 'Choices behind the defaults'",
    )
    max_candidates: int = Field(
        5000,
        gt=0,
        description="most candidates a group_by request widens to while it lacks k results, divided by its query items",
    )

    # --- embedded store maintenance
    optimize_after_writes: int = Field(
        5000, ge=0, description="points written before the HNSW index is rebuilt in the background; 0 = never"
    )
    indexing_threshold_kb: int = Field(
        10_000,
        gt=0,
        description="KB of ANN vectors a segment holds unindexed before a build indexes it (brute force until)",
    )
    checkpoint_interval_s: float = Field(
        60.0,
        ge=0,
        description="embedded store: seconds between the engine's flushes while writes arrive; a flush lets it drop "
        "the WAL it covers, which otherwise keeps every write on disk (and a restart replays it) until an HNSW build; "
        "0 = only at builds, snapshots and shutdown",
    )

    # --- Qdrant cluster layout (used once, when the service creates its collection on a server)
    qdrant_shards: int | None = Field(
        None, ge=1, description="shards of the collection; unset = the server's default (one per cluster node)"
    )
    qdrant_replication: int | None = Field(
        None, ge=1, description="replication_factor: copies of each shard on distinct nodes; unset = 1"
    )

    # --- reliability and security (docs/api.md: "Limits")
    sync_writes: bool = Field(
        False, description="embedded store: fsync before /index and DELETE answer (group commit); survives power loss"
    )
    max_metadata_bytes: int = Field(16384, gt=0, description="bytes of one item's metadata as JSON (413 beyond)")
    request_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a /similar request waiting longer than this for the encoder gets 503 (Retry-After); a batch's "
        "queries not answered this long after it arrived get a timed_out error each",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated origins allowed by CORS; empty = no cross-origin access"
    )

    @model_validator(mode="after")
    def _read_key_files(self) -> Settings:
        """A key from its file, read once at start-up: its content without surrounding whitespace (a trailing newline
        included, which a header could not carry anyway)."""
        for name in ("api_key", "read_api_key"):
            path = getattr(self, f"{name}_file")
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"MS_{name.upper()} and MS_{name.upper()}_FILE are both set: set one of them")
            try:
                key = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(f"MS_{name.upper()}_FILE {path} cannot be read: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise ValueError(f"MS_{name.upper()}_FILE {path} is not UTF-8 text: write the key in it") from None
            if not key:
                raise ValueError(f"MS_{name.upper()}_FILE {path} is empty: write the key in it")
            setattr(self, name, SecretStr(key))
        return self

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        return [o.strip() for o in value.split(",") if o.strip()] if isinstance(value, str) else value

    # --- caches and workers (docs/operations.md: "Serving fast")
    embedding_cache_size: int = Field(10000, ge=0, description="query-text vectors kept in an LRU; 0 = off")
    embedding_cache_mb: float = Field(32, ge=0, description="estimated MB the embedding cache may hold; 0 = off")
    answer_cache_size: int = Field(
        10000,
        ge=0,
        description="/similar-by-id answers kept in an LRU until a write can change them (a write of metadata alone "
        "keeps those it cannot; an unfiltered answer is checked after writes of texts); 0 = off",
    )
    answer_cache_mb: float = Field(64, ge=0, description="estimated MB the answer cache may hold; 0 = off")
    workers: int = Field(
        1, ge=1, description="uvicorn worker processes; more than 1 needs a Qdrant server (qdrant_url)"
    )

    # --- encoder backend and reduced precision
    encoder_backend: Literal["auto", "onnxruntime", "openvino"] = Field(
        "auto",
        description="runtime of the encoder; auto = the bundle's (encoder.backend) when installed, else onnxruntime",
    )
    encoder_precision: Literal["auto", "fp32", "int8"] = Field(
        "auto",
        description="encoder a bundle carrying fp32 and int8 runs; auto = int8 on a CPU with AVX-512 VNNI or AMX when "
        "its recorded neighbour overlap is at least MS_MIN_NEIGHBOUR_OVERLAP, else fp32",
    )
    min_neighbour_overlap: float = Field(
        0.95,
        ge=0,
        le=1,
        description="refuse a reduced-precision bundle whose recorded top-10 neighbour overlap with fp32 is lower, or "
        "that records none (0 serves it unmeasured)",
    )

    # --- metrics on a port of their own (docs/operations.md: "Observability")
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="port serving /metrics on MS_HOST instead of the API port; unset = API port"
    )

    @model_validator(mode="after")
    def _metrics_port_alone(self) -> Settings:
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise ValueError(f"MS_METRICS_PORT {self.metrics_port} is MS_PORT: give the metrics another port")
        if self.metrics_port is not None and self.workers > 1:
            # Each worker process has its own registry and would bind the port again.
            raise ValueError("MS_METRICS_PORT serves one process's metrics: use it with MS_WORKERS=1")
        return self


class TracingSettings(BaseSettings):
    """OpenTelemetry's own variables that decide whether to trace at all (not MS_ settings: operators set them alike
    for every service). The SDK reads the rest itself: the endpoint's details, headers, sampler, service name."""

    model_config = SettingsConfigDict(env_prefix="OTEL_", extra="ignore")

    sdk_disabled: bool = False
    traces_exporter: str = "otlp"
    exporter_otlp_endpoint: str | None = None
    exporter_otlp_traces_endpoint: str | None = None

    @property
    def enabled(self) -> bool:
        """Off unless an OTLP endpoint is set: no SDK is loaded, and every span is the API's no-op."""
        endpoint = self.exporter_otlp_traces_endpoint or self.exporter_otlp_endpoint
        return bool(endpoint) and not self.sdk_disabled and self.traces_exporter != "none"
