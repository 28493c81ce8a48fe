"""Every MS_ variable that the deployment files set exists in the Settings object (a typo would be ignored
silently: Settings ignores unknown variables) and is documented in docs/settings.md (that every
setting is documented there is tests/service/test_config.py's check)."""

from __future__ import annotations

from metricsearch.service.config import Settings
from tests.deploy.manifests import ROOT, deployment_files, ms_variables

KNOWN = {f"MS_{name.upper()}" for name in Settings.model_fields}


def test_deployment_files_use_only_existing_settings():
    used = {path: ms_variables(path) for path in deployment_files()}
    assert {"MS_QDRANT_URL", "MS_QDRANT_SHARDS", "MS_QDRANT_REPLICATION", "MS_API_KEY"} <= set().union(*used.values())
    unknown = {str(path.relative_to(ROOT)): sorted(names - KNOWN) for path, names in used.items() if names - KNOWN}
    assert not unknown, f"not settings of service/config.py: {unknown}"


def test_settings_used_in_deployment_are_documented():
    documented = (ROOT / "docs" / "settings.md").read_text()
    used = set().union(*(ms_variables(path) for path in deployment_files()))
    assert not sorted(name for name in used if name not in documented)
