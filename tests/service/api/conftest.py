"""API fixtures: a service over HTTP holding the test module's `ITEMS`, with its `KEY` as the write key, and a client
that sends that key; a module that needs other settings defines its own `service`."""

from __future__ import annotations

import pytest

from tests.service.serving import indexed_service


@pytest.fixture(scope="module")
def service(request, tiny_bundle, tmp_path_factory):
    key, items = request.module.KEY, request.module.ITEMS
    data = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "data"
    with indexed_service(tiny_bundle, data, items, {"MS_API_KEY": key}, key) as process:
        yield process


@pytest.fixture(scope="module")
def client(request, service):
    with service.client(Authorization=f"Bearer {request.module.KEY}") as c:
        yield c
