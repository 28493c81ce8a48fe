"""The one settings object. Every field is overridable by an `MS_<NAME>` env variable; nothing else reads the
environment. docs/settings.md documents each field (a test keeps them in sync)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


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

    # --- HTTP
    host: str = Field("127.0.0.1", description="address uvicorn binds")
    port: int = Field(8000, ge=1, le=65535, description="port uvicorn binds")
    api_key: SecretStr | None = Field(None, description="key required on /index and DELETE; unset = writes open")
    read_api_key: SecretStr | None = Field(None, description="key required on reads; unset = reads open")
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
    candidates_factor: int = Field(10, gt=0, description="ANN candidates = max(candidates_min, factor x k)")
    max_candidates: int = Field(
        5000, gt=0, description="most candidates a group_by request widens to while it lacks k results"
    )

    # --- embedded store maintenance
    optimize_after_writes: int = Field(
        5000, ge=0, description="points written before the HNSW index is rebuilt in the background; 0 = never"
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
        10.0, gt=0, description="a /similar request waiting longer than this for the encoder gets 503 (Retry-After)"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated origins allowed by CORS; empty = no cross-origin access"
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        return [o.strip() for o in value.split(",") if o.strip()] if isinstance(value, str) else value

    # --- caches and workers (docs/operations.md: "Serving fast")
    embedding_cache_size: int = Field(10000, ge=0, description="query-text vectors kept in an LRU; 0 = off")
    embedding_cache_mb: float = Field(32, ge=0, description="estimated MB the embedding cache may hold; 0 = off")
    answer_cache_size: int = Field(
        10000, ge=0, description="/similar-by-id answers kept in an LRU until the next write; 0 = off"
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
    min_neighbour_overlap: float = Field(
        0.95,
        ge=0,
        le=1,
        description="refuse a reduced-precision bundle whose recorded top-10 neighbour overlap with fp32 is lower, or "
        "that records none (0 serves it unmeasured)",
    )
