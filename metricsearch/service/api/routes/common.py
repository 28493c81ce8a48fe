"""What every resource's routes share: the documented error responses, the key checks and the text limits."""

from __future__ import annotations

from fastapi import Depends

from metricsearch.core.errors import PayloadTooLargeError
from metricsearch.core.schemas import ProblemDetail
from metricsearch.service.api.deps import require_read_key, require_write_key
from metricsearch.service.runtime import Runtime

ERRORS = {code: {"model": ProblemDetail} for code in (400, 401, 403, 413, 415, 422, 429, 503)}
NOT_FOUND = {404: {"model": ProblemDetail}}
CONFLICT = {409: {"model": ProblemDetail}}
ReadKey = Depends(require_read_key)
WriteKey = Depends(require_write_key)


def check_text_limits(runtime: Runtime, title: str | None, description: str | None, where: str) -> None:
    settings = runtime.settings
    if title is not None and len(title) > settings.max_title_chars:
        raise PayloadTooLargeError(
            f"{where}: title has {len(title)} characters; the limit is {settings.max_title_chars} (MS_MAX_TITLE_CHARS)"
        )
    if description is not None and len(description) > settings.max_description_chars:
        raise PayloadTooLargeError(
            f"{where}: text has {len(description)} characters; the limit is {settings.max_description_chars} "
            "(MS_MAX_DESCRIPTION_CHARS); the model reads only its first "
            f"{runtime.encoder.max_length} tokens anyway"
        )
