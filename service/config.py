"""The one settings object. Every field is overridable by an `MS_<NAME>` env variable; nothing else reads the
environment. The README's settings table documents each field (a test keeps them in sync)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MS_", extra="ignore")

    # --- where things live
    bundle_dir: Path = Field(Path("bundles/all-minilm-l6-v2"), description="model bundle folder to serve")
    data_dir: Path = Field(Path("var"), description="embedded store location (ignored with qdrant_url)")
    qdrant_url: str | None = Field(None, description="Qdrant server or cluster URL; unset = embedded store")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server")
    qdrant_timeout_s: float = Field(5.0, gt=0, description="timeout of one Qdrant server call")
    collection: str = Field("items", pattern=r"^[A-Za-z0-9_-]+$", description="collection (or shard folder) name")

    # --- HTTP
    host: str = Field("127.0.0.1", description="address uvicorn binds")
    port: int = Field(8000, ge=1, le=65535, description="port uvicorn binds")
    api_key: SecretStr | None = Field(None, description="key required on /index and DELETE; unset = writes open")
    read_api_key: SecretStr | None = Field(None, description="key required on reads; unset = reads open")
    keep_alive_s: int = Field(75, gt=0, description="idle keep-alive connections are closed after this (uvicorn)")
    log_level: str = Field("info", description="log level of the JSON logs")

    # --- limits (README: limits table)
    max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="bytes in one request body (413 beyond, before parsing)"
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
    intra_op_threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads; 0 = one per core")
    query_batch_window_ms: float = Field(2.0, ge=0, description="how long a text query waits for others to batch with")
    query_batch_max_tokens: int = Field(8192, gt=0, description="tokens in one batched encoder call")
    query_queue_size: int = Field(256, gt=0, description="text queries waiting to be encoded (429 beyond)")
    index_batch_size: int = Field(64, gt=0, description="texts per encoder call when indexing")

    # --- ranking
    candidates_min: int = Field(100, gt=0, description="fewest ANN candidates reranked exactly")
    candidates_factor: int = Field(10, gt=0, description="ANN candidates = max(candidates_min, factor x k)")

    # --- embedded store maintenance
    optimize_after_writes: int = Field(
        5000, ge=0, description="points written before the HNSW index is rebuilt in the background; 0 = never"
    )
