"""Schemathesis fuzzes the service's own OpenAPI schema over real HTTP (a subprocess service with the tiny
bundle): valid and invalid requests on every operation, and no response may be a 5xx, stray from the documented
status codes and schemas, or carry a stack trace. A bounded number of examples here; docs/operations.md, "Testing
under stress", gives the command for a longer run."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.service.serving import indexed_service

KEY = "fuzz-write-key"
EXAMPLES = 150
"""Per mode, over all operations: about 20 s on 2 busy cores."""


@pytest.fixture(scope="module")
def fuzzed_service(tiny_bundle, tmp_path_factory):
    items = [{"id": str(n), "title": f"item {n}", "metadata": {"n": n}} for n in range(20)]
    data = tmp_path_factory.mktemp("fuzz") / "data"
    with indexed_service(tiny_bundle, data, items, {"MS_API_KEY": KEY}, KEY) as process:
        yield process


def no_stack_trace(ctx, response, case) -> None:
    """Error bodies say what to fix; a traceback or source path would leak internals."""
    text = response.text
    for leak in ("Traceback", 'File "/', "site-packages"):
        assert leak not in text, (
            f"{case.method} {case.path} answered {response.status_code} with {leak!r}: {text[:300]}"
        )


def json_integers(body: object) -> None:
    """JSON Schema counts 82.0 as an integer, and so may a generated valid `k`; the API takes integers only as
    integer literals (docs/api.md, "Limits"), so a valid case sends it as one."""
    if isinstance(body, dict) and isinstance(body.get("k"), float) and body["k"].is_integer():
        body["k"] = int(body["k"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_api_conforms_to_its_schema_and_never_fails(fuzzed_service, mode):
    schema = schemathesis.openapi.from_url(f"{fuzzed_service.url}/openapi.json")

    @given(case=schema.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def call(case) -> None:
        if mode == GenerationMode.POSITIVE:
            json_integers(case.body)
        case.call_and_validate(
            base_url=fuzzed_service.url,
            headers={"Authorization": f"Bearer {KEY}"},
            additional_checks=[no_stack_trace],
            timeout=30,
        )

    call()
