"""The one error root and its kinds: raised anywhere in metricsearch; the service maps them to HTTP status codes
once (service/api/errors.py) and the CLI to exit code 1, with the message as it is."""

from __future__ import annotations


class MetricSearchError(Exception):
    """Base of every error reported to a user; the message says what to fix."""


class InvalidInputError(MetricSearchError):
    """A request, file or option that is well-formed but asks for something impossible (HTTP 400); file problems
    name the file and line."""


class AuthMissingError(MetricSearchError):
    """No credentials where a key is required (401)."""


class AuthForbiddenError(MetricSearchError):
    """Credentials given but wrong (403)."""


class NotFoundError(MetricSearchError):
    """An item id that is not in the store (404)."""


class PayloadTooLargeError(MetricSearchError):
    """A request over a documented size limit (413)."""


class OverloadedError(MetricSearchError):
    """The encoding queue is full; the client should retry later (429)."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TimedOutError(MetricSearchError):
    """A request that waited longer than MS_REQUEST_TIMEOUT_S for the encoder (503 with Retry-After)."""

    retry_after_s = 1


class StoreUnavailableError(MetricSearchError):
    """Qdrant does not answer (503 with Retry-After: when a retry may find it back)."""

    def __init__(self, message: str, retry_after_s: int = 2) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StorageFullError(MetricSearchError):
    """Too little free space where the embedded store writes for a write to be safe (507); reads still answer."""


class NotReadyError(StoreUnavailableError):
    """The readiness probe's answer while the store does not answer (503 with Retry-After)."""


class BundleError(MetricSearchError):
    """A model bundle that is missing, malformed or of another schema version (startup error)."""


class StoreMismatchError(MetricSearchError):
    """A store built by a bundle whose vectors do not fit the loaded bundle (startup error)."""


class TrainerError(MetricSearchError):
    """A training config or run that cannot go on; the message names the option and the fix."""


class ExportError(MetricSearchError):
    """A model that cannot be exported as asked; the message says what to change."""


class RolloutError(MetricSearchError):
    """A model rollout request that its state does not allow: a second start, a swap before the copy is done, a swap
    or abort with none under way (409)."""
