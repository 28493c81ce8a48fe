"""The embedded store's stores over model rollouts (base.Generations): folders `<data_dir>/<collection>[.r<n>]`, and
`<collection>.serving.json` naming the one served and its bundle once a rollout was swapped in."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

from metricsearch.core.errors import StoreMismatchError
from metricsearch.service.config import Settings
from metricsearch.service.store.atomic import written_whole
from metricsearch.service.store.base import Store, warn_if_other_bundle

log = logging.getLogger(__name__)


class Folders:
    """The embedded store: folders `<data_dir>/<collection>[.r<n>]`, `<collection>.serving.json` naming the one
    served and its bundle once a rollout was swapped in."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pointer = settings.data_dir / f"{settings.collection}.serving.json"

    def serving(self) -> Settings:
        settings, pointer = self._settings, self._pointer
        if not pointer.is_file():
            return settings
        try:
            state = json.loads(pointer.read_text())
            bundle_dir, folder = Path(state["bundle_dir"]), str(state["collection"])
        except (ValueError, KeyError, TypeError) as e:
            raise StoreMismatchError(
                f"{pointer} is damaged ({e!r}): it names the store and bundle a model rollout swapped in; write it "
                'again as {"collection": "<folder under MS_DATA_DIR>", "bundle_dir": "<bundle folder>"}'
            ) from e
        if not (settings.data_dir / folder).is_dir():
            raise StoreMismatchError(
                f"{pointer} names the store {settings.data_dir / folder}, which is gone: restore a snapshot there, or "
                f"remove {pointer} to serve {settings.data_dir / settings.collection} with MS_BUNDLE_DIR"
            )
        warn_if_other_bundle(bundle_dir, settings, str(pointer))
        return settings.model_copy(update={"bundle_dir": bundle_dir, "collection": folder})

    def remove_leftovers(self, served: Settings) -> None:
        if not self._settings.data_dir.is_dir():
            return
        for child in self._settings.data_dir.iterdir():
            if child.is_dir() and child.name != served.collection and self._of_collection(child.name):
                log.info("removing %s, left by a model rollout", child)
                shutil.rmtree(child)

    def _of_collection(self, name: str) -> bool:
        collection = self._settings.collection
        return name == collection or re.fullmatch(rf"{re.escape(collection)}\.r\d+", name) is not None

    def next_name(self) -> str:
        collection = self._settings.collection
        numbers = [
            int(m.group(1))
            for child in self._settings.data_dir.iterdir()
            if (m := re.fullmatch(rf"{re.escape(collection)}\.r(\d+)", child.name))
        ]
        return f"{collection}.r{1 + max(numbers, default=0)}"

    def commit(self, new: Settings) -> None:
        state = {"collection": new.collection, "bundle_dir": str(new.bundle_dir)}
        with written_whole(self._pointer) as partial:
            partial.write_text(json.dumps(state, indent=2) + "\n")

    def drop(self, store: Store) -> None:
        shutil.rmtree(store.location, ignore_errors=True)
