"""Named spans for OpenTelemetry tracing (tokenize, encode, store.query, rerank, serialise) that cost nothing while
tracing is off. OpenTelemetry's own no-op span still attaches a context, about 6 µs a span measured (five in a
/similar); until the service enables tracing (service/tracing.py), `span` hands back one shared null context."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from opentelemetry.util.types import AttributeValue

_OFF = nullcontext()
_tracer: Tracer | None = None


def span(name: str, **attributes: AttributeValue) -> AbstractContextManager:
    """A span named `name`, the current one's child, while tracing is on; nothing otherwise."""
    return _OFF if _tracer is None else _tracer.start_as_current_span(name, attributes=attributes)


def enable(tracer: Tracer | None) -> None:
    """Record spans with `tracer` from now on (None: stop)."""
    global _tracer
    _tracer = tracer
