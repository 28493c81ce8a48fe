"""Files written whole or not at all: a snapshot may be the only copy of a store, and `store.json` names the live
generation, so a failed or killed write must never leave a truncated file under the name a reader trusts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def written_whole(target: Path) -> Iterator[Path]:
    """Yield a temporary name next to `target` to write; when the block succeeds the file is fsynced and renamed
    to `target`, when it fails it is removed. A crash leaves at most the temporary file, never `target`."""
    partial = target.with_name(f"{target.name}.partial")
    try:
        yield partial
        with partial.open("rb") as written:
            os.fsync(written.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def fsync_tree(folder: Path, *, missing_ok: bool = False) -> None:
    """Make every file and folder under `folder` durable before a rename makes them the live copy: an old copy
    removed after it would otherwise leave none that a power loss cannot truncate. `missing_ok`: files removed
    meanwhile (a WAL segment the engine retired) are skipped. os.fsync releases the GIL: other threads run."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except FileNotFoundError:
                if missing_ok:
                    continue
                raise
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(folder: Path) -> None:
    """Make the names in `folder` durable (a power loss could otherwise undo a rename in it)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
