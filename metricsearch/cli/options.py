"""What several commands' options share: choice types, the store folder option, and the service settings that options
override."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

DataDir = Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")]


def choice(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A choice type typer checks and lists in --help; its members are the strings themselves, so they pass on as
    plain values. (typer takes a `Literal` too, but not in a repeatable option.)"""
    return StrEnum(name, [(value, value) for value in values])


def service_settings(ctx: typer.Context, **overrides: object):
    """The service settings from MS_* variables and the options given; an invalid value is a usage error."""
    from pydantic import ValidationError

    from metricsearch.service import Settings

    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        ctx.fail("; ".join(_setting_error(e) for e in exc.errors()))


def _setting_error(error: dict) -> str:
    """One setting's error, or one about several settings (no location: its message names them)."""
    where = ".".join(map(str, error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    return f"setting {where}: {message}" if where else message
