"""How `metricsearch serve` runs uvicorn: its options from the settings, and an HTTP protocol with read deadlines.

uvicorn has a keep-alive timeout between requests but none while a request arrives: a client that sent half its
headers, or 2 of 1,000 declared body bytes, held its connection for as long as it liked (over 65 s measured), so a
few slow clients could hold every connection. Each deadline here closes such a connection."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from metricsearch.service.config import Settings

log = logging.getLogger(__name__)


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (its default with uvicorn[standard]) with two deadlines: a request's headers must
    arrive within `header_timeout_s` of the connection opening (or, on a kept-alive connection, of the request's
    first byte; the keep-alive timeout covers the wait before it), and its body within `body_timeout_s` of its
    headers."""

    def __init__(self, *args: Any, header_timeout_s: float, body_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self._deadline: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float, waiting_for: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire, waiting_for, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, waiting_for: str, seconds: float) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info(
                "closed a connection whose request %s did not arrive within %s s",
                waiting_for,
                seconds,
                extra={"client": f"{self.client[0]}:{self.client[1]}" if self.client else None},
            )
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, "headers")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # the next request on a kept-alive connection (the first is armed at connect)
            self._arm(self.header_timeout_s, "headers")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout_s, "body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvloop is picked by uvicorn's "auto" (uvicorn[standard]); no access log on the hot path. The protocol is a
    partial of a module-level class, so it pickles into each `--workers` process."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": 10,
        "timeout_keep_alive": settings.keep_alive_s,
        "http": functools.partial(
            DeadlineProtocol, header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s
        ),
    }
