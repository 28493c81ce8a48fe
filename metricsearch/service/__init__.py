"""The online service: loads a model bundle, encodes with ONNX Runtime (or OpenVINO), stores in Qdrant, answers
/similar. What the CLI and the benchmarks may use is named here; everything else is the service's own."""

from metricsearch.service.api.app import create_app
from metricsearch.service.cache import ENTRY_OVERHEAD, answer_bytes
from metricsearch.service.config import Settings
from metricsearch.service.engine import ANN_VECTOR, FACTORS_VECTOR, Engine, content_hash, vector_schema
from metricsearch.service.lifecycle import Service
from metricsearch.service.logs import configure_logging
from metricsearch.service.process import ServiceProcess, exit_of, free_port, wait_ready
from metricsearch.service.runtime import Runtime
from metricsearch.service.server import uvicorn_options
from metricsearch.service.snapshot import create as create_snapshot
from metricsearch.service.snapshot import restore as restore_snapshot
from metricsearch.service.store import EdgeStore, RemoteStore, Store, open_store, store_traits
from metricsearch.service.store.base import AnyOf, Equals, Range, StoredItem, VectorSchema

__all__ = [
    "ANN_VECTOR",
    "ENTRY_OVERHEAD",
    "FACTORS_VECTOR",
    "AnyOf",
    "EdgeStore",
    "Engine",
    "Equals",
    "Range",
    "RemoteStore",
    "Runtime",
    "Service",
    "ServiceProcess",
    "Settings",
    "Store",
    "StoredItem",
    "VectorSchema",
    "answer_bytes",
    "configure_logging",
    "content_hash",
    "create_app",
    "create_snapshot",
    "exit_of",
    "free_port",
    "open_store",
    "restore_snapshot",
    "store_traits",
    "uvicorn_options",
    "vector_schema",
    "wait_ready",
]
