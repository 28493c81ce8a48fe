"""What every resource's routes share: the documented error responses and the key checks."""

from __future__ import annotations

from fastapi import Depends

from metricsearch.core.schemas import ProblemDetail
from metricsearch.service.api.deps import require_read_key, require_write_key

ERRORS = {code: {"model": ProblemDetail} for code in (400, 401, 403, 413, 415, 422, 429, 503)}
NOT_FOUND = {404: {"model": ProblemDetail}}
CONFLICT = {409: {"model": ProblemDetail}}
ReadKey = Depends(require_read_key)
WriteKey = Depends(require_write_key)
