"""A server store's collections over model rollouts (base.Generations): the plain collection `<collection>`, then
collections `<collection>.r<n>` behind the alias `<collection>` (aliases.py)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from metricsearch.core.bundle import MANIFEST_FILE, load_bundle
from metricsearch.core.errors import BundleError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.store.base import Store, warn_if_other_bundle
from metricsearch.service.store.remote.aliases import Aliases

log = logging.getLogger(__name__)


class Collections:
    """A Qdrant server: the plain collection `<collection>`, then collections `<collection>.r<n>` behind the alias
    `<collection>` (aliases.py). Each collection records the bundle that built it, so a restart after a swap
    serves it with that bundle, like `serving.json` does for the embedded store; where that folder is missing on
    this machine, the store refuses the collection at open, naming the bundle it needs."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def serving(self) -> Settings:
        """MS_BUNDLE_DIR unless the served collection was built by another bundle whose folder is here. A server
        that does not answer yet leaves the settings as they are: the store checks the collection when it opens."""
        settings = self._settings
        try:
            with Aliases(settings) as aliases:
                served = aliases.served()
                record = aliases.record(served) if served else {}
        except StoreUnavailableError as e:
            log.warning("cannot tell which bundle built the served collection (%s); serving MS_BUNDLE_DIR", e)
            return settings
        recorded = Path(str(record.get("bundle_dir", settings.bundle_dir.resolve())))
        if recorded == settings.bundle_dir.resolve() or not (recorded / MANIFEST_FILE).is_file():
            return settings
        try:
            if load_bundle(settings.bundle_dir).identity == record.get("identity"):
                return settings  # the same bundle, moved
        except BundleError:
            pass  # MS_BUNDLE_DIR does not load: the recorded bundle is the one to serve
        warn_if_other_bundle(recorded, settings, f"collection {served!r}")
        return settings.model_copy(update={"bundle_dir": recorded})

    def remove_leftovers(self, served: Settings) -> None:
        try:
            with Aliases(self._settings) as aliases:
                aliases.remove_leftovers()
        except StoreUnavailableError as e:
            log.warning("left what a model rollout may have left on the server: %s", e)

    def next_name(self) -> str:
        with Aliases(self._settings) as aliases:
            names = aliases.names()
        collection = self._settings.collection
        numbers = [int(m.group(1)) for n in names if (m := re.fullmatch(rf"{re.escape(collection)}\.r(\d+)", n))]
        return f"{collection}.r{1 + max(numbers, default=0)}"

    def commit(self, new: Settings) -> None:
        with Aliases(self._settings) as aliases:
            aliases.point(new.collection)

    def drop(self, store: Store) -> None:
        """A server that does not answer keeps the collection: the next start drops it (remove_leftovers)."""
        try:
            with Aliases(self._settings) as aliases:
                aliases.drop(store.location)
        except StoreUnavailableError as e:
            log.warning("collection %r left on the server for the next start to drop: %s", store.location, e)
