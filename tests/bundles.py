"""Variants of a test bundle: a copy whose manifest a test changes (fusion weights, a metric, the n-gram analyzer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

NGRAMS = "char-wb-3grams/v1"
"""The character n-gram analyzer a variant with `ngrams=True` names (core/lexical.py)."""


def bundle_variant(bundle: Path, target: Path, *, ngrams: bool = False, **changes: object) -> Path:
    """A copy of `bundle` at `target` whose manifest has `changes` as top-level keys, and with `ngrams` also the
    character n-gram components."""
    shutil.copytree(bundle, target)
    path = target / "bundle.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    if ngrams:
        manifest["lexical"]["ngrams"] = NGRAMS
    path.write_text(json.dumps(manifest))
    return target
