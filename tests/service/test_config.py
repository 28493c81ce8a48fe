"""Settings: every field is an MS_ variable documented in docs/settings.md, and the serving path never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from metricsearch.service.config import Settings

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_every_setting_is_documented():
    documented = SETTINGS_DOC.read_text()
    missing = [f"MS_{name.upper()}" for name in Settings.model_fields if f"MS_{name.upper()}" not in documented]
    assert not missing, f"docs/settings.md lacks {missing}"


def test_env_variables_override_defaults(monkeypatch):
    monkeypatch.setenv("MS_PORT", "9123")
    monkeypatch.setenv("MS_API_KEY", "s3cret")
    settings = Settings()
    assert settings.port == 9123
    assert settings.api_key.get_secret_value() == "s3cret" and "s3cret" not in repr(settings)


def test_keys_are_read_from_their_files(monkeypatch, tmp_path):
    (tmp_path / "write").write_text("w-s3cret\n")
    (tmp_path / "read").write_text("r-s3cret")
    monkeypatch.setenv("MS_API_KEY_FILE", str(tmp_path / "write"))
    monkeypatch.setenv("MS_READ_API_KEY_FILE", str(tmp_path / "read"))
    settings = Settings()
    assert settings.api_key.get_secret_value() == "w-s3cret"  # without the newline `echo key > file` writes
    assert settings.read_api_key.get_secret_value() == "r-s3cret"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("env", "content", "message"),
    [
        ({"MS_API_KEY_FILE": "{missing}"}, None, "MS_API_KEY_FILE {missing} cannot be read"),
        ({"MS_READ_API_KEY_FILE": "{file}"}, "\n", "MS_READ_API_KEY_FILE {file} is empty"),
        ({"MS_API_KEY_FILE": "{file}"}, b"\xff\xfe", "MS_API_KEY_FILE {file} is not UTF-8 text"),
        ({"MS_API_KEY_FILE": "{file}", "MS_API_KEY": "k"}, "k", "MS_API_KEY and MS_API_KEY_FILE are both set"),
        ({"MS_READ_API_KEY_FILE": "{file}", "MS_READ_API_KEY": "k"}, "k", "MS_READ_API_KEY and MS_READ_API_KEY_FILE"),
    ],
    ids=["missing", "empty", "binary", "write-both", "read-both"],
)
def test_a_key_file_that_cannot_serve_is_an_error_naming_it(monkeypatch, tmp_path, env, content, message):
    paths = {"missing": tmp_path / "absent" / "key", "file": tmp_path / "key"}
    if isinstance(content, bytes):
        paths["file"].write_bytes(content)
    elif content is not None:
        paths["file"].write_text(content)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(**paths))
    with pytest.raises(ValidationError, match=message.format(**paths)):
        Settings()


def test_serve_stops_at_start_up_on_a_missing_key_file(tmp_path):
    missing = tmp_path / "secrets" / "api-key"
    env = {**os.environ, "MS_API_KEY_FILE": str(missing), "COLUMNS": "500"}  # the message on one line
    result = subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and f"MS_API_KEY_FILE {missing} cannot be read" in result.stderr, result.stderr


def test_serving_path_imports_no_torch_trainer_or_export():
    code = (
        "import sys, metricsearch.service.api.app, metricsearch.service.runtime, metricsearch.cli; "
        "bad = [m for m in ('torch', 'metricsearch.trainer', 'metricsearch.export', 'transformers') "
        "if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_indexed_fields_are_parsed_from_key_type_pairs(monkeypatch):
    monkeypatch.setenv("MS_INDEXED_FIELDS", "brand:keyword, price:Float,in_stock:bool,")
    assert Settings().indexed_fields == {"brand": "keyword", "price": "float", "in_stock": "bool"}
    assert Settings(indexed_fields="").indexed_fields == {}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ("brand", "'brand' is not key:type"),
        ("brand:keyword,:float", "':float' is not key:type"),
        ("tags[0]:keyword", "'tags[0]' cannot be a filtered metadata key"),
        ("price:integer", "price:integer: declare numbers as float"),
        ("brand:text", "brand: unknown index type 'text'; use one of keyword, float, bool"),
        ("brand:keyword,brand:bool", "'brand' is declared twice"),
    ],
)
def test_bad_declarations_are_refused_at_start_up(monkeypatch, declared, message):
    monkeypatch.setenv("MS_INDEXED_FIELDS", declared)
    with pytest.raises(ValueError, match="indexed_fields") as raised:
        Settings()
    assert message in str(raised.value)


def test_an_empty_qdrant_url_means_the_embedded_store(monkeypatch):
    """An env file or a template that leaves MS_QDRANT_URL= empty asks for the embedded store, everywhere the store
    is told apart (a service with several workers on it is refused, not started against a server named '')."""
    from metricsearch.service import store_traits

    monkeypatch.setenv("MS_QDRANT_URL", " ")
    settings = Settings()
    assert settings.qdrant_url is None
    assert store_traits(settings).one_process
