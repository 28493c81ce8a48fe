"""The collections a served name `<collection>` has on a Qdrant server, as model rollouts move it.

Rollouts make `<collection>.r<n>`; after a swap the alias `<collection>` names the one served. A first start (and
every deployment from before rollouts) serves the plain collection `<collection>` as generation 0, as is: moving it
behind an alias at start-up would copy every point, and tools that read it by name keep working. The alias
`<collection>` cannot be made while that plain collection holds the name, and the plain one stays for the requests
that began on it (RETIRE_AFTER_S), so the first swap points the alias `<collection>.next` at the new collection
instead (the commit point: `served_collection` prefers it); dropping the retired plain collection then moves the
alias to `<collection>` (`finish`, one update). A crash between leaves `.next`, which the next start follows and
finishes."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.store.remote.collection import METADATA_KEY
from metricsearch.service.store.remote.server import SERVER_ERRORS, client, server_url

logger = logging.getLogger(__name__)

NEXT = ".next"
"""Suffix of the alias a swap away from a plain collection points first."""


def is_generation(name: str) -> bool:
    """A collection a model rollout made, `<collection>.r<n>`: opened by that name, never through an alias."""
    return re.fullmatch(r".+\.r\d+", name) is not None


def served_collection(client: QdrantClient, name: str) -> str | None:
    """The collection that serves the name `name`: the target of the alias `<name>.next` while a swap away from the
    plain collection `<name>` is unfinished, else of the alias `<name>`, else the plain collection; None if none."""
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    target = aliases.get(name + NEXT) or aliases.get(name)
    if target is not None:
        return target
    return name if client.collection_exists(name) else None


class Aliases:
    """The served name's collections and aliases, through a client of its own (a context manager)."""

    def __init__(self, settings: Settings) -> None:
        self._name = settings.collection
        self._url = server_url(settings)
        self._client = client(settings, settings.qdrant_timeout_s)

    def __enter__(self) -> Aliases:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    @contextmanager
    def _calls(self) -> Iterator[None]:
        try:
            yield
        except SERVER_ERRORS as e:
            raise StoreUnavailableError(f"model rollout on Qdrant at {self._url} failed: {e}") from e

    def served(self) -> str | None:
        with self._calls():
            return served_collection(self._client, self._name)

    def record(self, collection: str) -> Mapping[str, Any]:
        """What the collection records of the bundle that built it (collection.record), {} when nothing."""
        with self._calls():
            metadata = self._client.get_collection(collection).config.metadata or {}
        record = metadata.get(METADATA_KEY)
        return record if isinstance(record, Mapping) else {}

    def names(self) -> list[str]:
        """The plain collection and the rollouts' collections of this name that exist."""
        with self._calls():
            names = [c.name for c in self._client.get_collections().collections]
        return [n for n in names if n == self._name or re.fullmatch(rf"{re.escape(self._name)}\.r\d+", n)]

    def point(self, target: str) -> None:
        """Serve `target` from now on: one alias update, atomic on the server."""
        with self._calls():
            aliases = self._aliases()
            plain = self._name not in aliases and self._client.collection_exists(self._name)
            pointers = [self._name + NEXT] if plain else [self._name, self._name + NEXT]
            operations: list[qm.AliasOperations] = [_delete_alias(a) for a in pointers if a in aliases]
            operations.append(_create_alias(pointers[0], target))
            self._client.update_collection_aliases(change_aliases_operations=operations)

    def drop(self, collection: str) -> None:
        """Delete a collection no longer served (a retired or aborted one)."""
        with self._calls():
            self._client.delete_collection(collection)
        if collection == self._name:
            self.finish()

    def remove_leftovers(self) -> None:
        """Delete what an interrupted rollout left (a half-built collection, one a swap retired) and finish a swap
        away from the plain collection."""
        served = self.served()
        if served is None:  # nothing served (a vanished collection): nothing here is known to be a leftover
            return
        for name in self.names():
            if name not in (served, self._name):
                logger.info("dropping collection %r on %s, left by a model rollout", name, self._url)
                self.drop(name)
        self.finish()

    def finish(self) -> None:
        """After a swap away from the plain collection: drop it, and move the alias `.next` to the served name."""
        with self._calls():
            aliases = self._aliases()
            target = aliases.get(self._name + NEXT)
            if target is None:
                return
            if self._name not in aliases and self._client.collection_exists(self._name):
                self._client.delete_collection(self._name)
            operations = [_delete_alias(self._name + NEXT)]
            operations += [_delete_alias(self._name)] if self._name in aliases else []
            operations.append(_create_alias(self._name, target))
            self._client.update_collection_aliases(change_aliases_operations=operations)

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self._client.get_aliases().aliases}


def _create_alias(alias: str, collection: str) -> qm.CreateAliasOperation:
    return qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=collection, alias_name=alias))


def _delete_alias(alias: str) -> qm.DeleteAliasOperation:
    return qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias))
