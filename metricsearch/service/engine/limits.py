"""The size limits of what a request may ask to encode or store, checked before any work, each refused with 413 and
the setting that raises it: long texts cost encoder time for tokens the model never reads, and large metadata
costs every search that reads it back."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from metricsearch.core.errors import PayloadTooLargeError
from metricsearch.core.records import Item
from metricsearch.service.config import Settings


class Limits:
    def __init__(self, settings: Settings, max_length: int) -> None:
        """`max_length`: the tokens the encoder reads of a text, named in the message of a text too long."""
        self._settings = settings
        self._max_length = max_length

    def check_texts(self, title: str | None, description: str | None, where: str) -> None:
        settings = self._settings
        if title is not None and len(title) > settings.max_title_chars:
            raise PayloadTooLargeError(
                f"{where}: title has {len(title)} characters; the limit is {settings.max_title_chars} "
                "(MS_MAX_TITLE_CHARS)"
            )
        if description is not None and len(description) > settings.max_description_chars:
            raise PayloadTooLargeError(
                f"{where}: text has {len(description)} characters; the limit is {settings.max_description_chars} "
                "(MS_MAX_DESCRIPTION_CHARS); the model reads only its first "
                f"{self._max_length} tokens anyway"
            )

    def check_items(self, items: Sequence[Item]) -> None:
        """An /index batch: its size, each item's texts and metadata."""
        settings = self._settings
        if len(items) > settings.max_batch_items:
            raise PayloadTooLargeError(
                f"{len(items)} items in one request; the limit is {settings.max_batch_items}: split the batch"
            )
        for n, item in enumerate(items):
            self.check_texts(item.title, item.description, f"items.{n}")
            metadata = item.metadata or {}
            if len(metadata) > settings.max_metadata_keys:
                raise PayloadTooLargeError(
                    f"items.{n}: metadata has {len(metadata)} keys; the limit is {settings.max_metadata_keys}"
                )
            size = len(orjson.dumps(metadata))
            if size > settings.max_metadata_bytes:
                raise PayloadTooLargeError(
                    f"items.{n}: metadata is {size} bytes as JSON; the limit is {settings.max_metadata_bytes} "
                    "(MS_MAX_METADATA_BYTES): keep filterable attributes there, not documents"
                )
