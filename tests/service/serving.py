"""An app served by uvicorn on 127.0.0.1 in a thread of the test process, for tests that change the app (add a route,
instrument it) yet talk to it over real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from metricsearch.service.process import free_port


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The app's base URL while it is served (its lifespan run: the batcher started, the runtime closed after)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
