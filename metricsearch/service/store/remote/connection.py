"""The collection a server store works on, opened (or created) by the first call that finds the server answering, so
a service that started while Qdrant was down becomes ready without a restart. Once open, a collection that vanishes
is an error state, never created empty again by this process. Every call goes through the circuit breaker, and the
server's outages become StoreUnavailableError (503)."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.payload import sync_indexes
from metricsearch.service.store.remote.aliases import is_generation, served_collection
from metricsearch.service.store.remote.breaker import CircuitBreaker
from metricsearch.service.store.remote.collection import bundle_record, check_existing, create

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class OpenCollection:
    """The collection the served name `name` resolves to (see served_collection), or a rollout's `<name>.r<n>`, on
    `client`. `indexed_fields` ({key: type}; None leaves the indexes as they are) are synced at open, keeping
    undeclared ones with `keep_learned`; `on_indexes` gets the metadata indexes there then."""

    client: QdrantClient
    name: str
    schema: VectorSchema
    _: KW_ONLY
    url: str
    layout: Mapping[str, Any]
    bundle_dir: Path | None
    breaker: CircuitBreaker
    indexed_fields: Mapping[str, str] | None
    keep_learned: bool
    on_indexes: Callable[[dict[str, str]], None]

    def __post_init__(self) -> None:
        self.collection = self.name
        """The collection itself, once opened (`name` resolved)."""
        self._open_lock = threading.Lock()
        self._opened = False
        self._vanished = False
        """Set once the open collection disappeared: it is not created again by this process."""

    @contextmanager
    def serving(self) -> Iterator[None]:
        """One call through the breaker: the collection open, and server outages raised as StoreUnavailableError."""
        with self.breaker.call():
            self.ensure_open()
            with self._answering():
                yield

    def ensure_open(self) -> None:
        if self._opened:
            return
        with self._open_lock, self._answering():
            if not self._opened:
                self._open()
                self._opened = True

    def _open(self) -> None:
        served = None if is_generation(self.name) else served_collection(self.client, self.name)
        self.collection = served or self.name
        if not self.client.collection_exists(self.collection):
            if self._vanished:
                self.lost()
            try:
                record = bundle_record(self.schema, self.bundle_dir)
                create(self.client, self.collection, self.schema, self.layout, record)
                self._sync_indexes({})
                return
            except UnexpectedResponse as e:
                if e.status_code != 409:
                    raise
                # Another replica, started at the same time, created it first: check it like any existing one.
        existing = check_existing(
            self.client.get_collection(self.collection),
            self.schema,
            self.layout,
            where=f"Collection {self.collection!r} on {self.url}",
            fix=f"A model rollout swapped it in as {self.name!r}: restart the service, which serves it with the "
            "bundle it records (that bundle's folder must exist here), or set MS_BUNDLE_DIR to that bundle."
            if self.collection != self.name
            else "Set MS_COLLECTION to a new collection name to index with this bundle, "
            "or delete the collection and re-index the catalog with it.",
        )
        self._sync_indexes(existing)

    def _sync_indexes(self, existing: Mapping[str, str]) -> None:
        """Every replica does this at open; Qdrant keeps an index that exists with its type, so they agree."""
        if self.indexed_fields is None:
            return
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")  # local mode (tests)
            indexed = sync_indexes(
                existing,
                self.indexed_fields,
                create=lambda path, kind: self.client.create_payload_index(
                    self.collection, path, qm.PayloadSchemaType(kind), wait=True
                ),
                drop=lambda path: self.client.delete_payload_index(self.collection, path, wait=True),
                where=f"collection {self.collection!r} on {self.url}",
                keep_undeclared=self.keep_learned,
            )
        self.on_indexes(indexed)

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Server-side outages and refused keys become StoreUnavailableError (503); request errors stay bugs."""
        try:
            yield
        except UnexpectedResponse as e:
            if e.status_code == 404 and self._opened:
                self.lost()
            if e.status_code in (401, 403):
                raise StoreUnavailableError(
                    f"Qdrant at {self.url} refused the API key (HTTP {e.status_code}): set MS_QDRANT_API_KEY"
                ) from e
            if e.status_code is not None and e.status_code >= 500:
                raise StoreUnavailableError(f"Qdrant at {self.url} failed (HTTP {e.status_code}); retry later") from e
            raise
        except (ResponseHandlingException, httpx.TransportError, ConnectionError) as e:
            raise StoreUnavailableError(
                f"Qdrant at {self.url} does not answer ({e}): check MS_QDRANT_URL and that the server is up"
            ) from e

    def lost(self) -> NoReturn:
        """The open collection is gone: an error state until it is back, never silently created empty again."""
        first = self._opened  # logged once per loss, not on every call that finds it still gone
        self._vanished, self._opened = True, False
        message = (
            f"collection {self.collection!r} vanished from Qdrant at {self.url} after this service opened it (its "
            "data was deleted or lost): restore a snapshot (`metricsearch snapshot restore`) and the service serves "
            "it again, or restart the service to create it empty and re-index the catalog"
        )
        if first:
            logger.error(message)
        raise StoreUnavailableError(message)
