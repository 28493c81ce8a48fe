"""The service's structured logs (logs.py): one JSON object per line with time, level, logger and message, the
call site's `extra=` fields and the request id while one is set; configure_logging sends every logger, uvicorn's
included, through it at the level asked for. How a request's id gets there is tested in api/test_middleware.py."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import orjson
import pytest

from metricsearch.service.logs import JsonFormatter, configure_logging, request_id

UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture
def restored_logging():
    """configure_logging changes process-wide state: the root's handlers and level, uvicorn's loggers."""
    loggers = [logging.getLogger(name) for name in ("", *UVICORN)]
    saved = [(logger.handlers[:], logger.level, logger.propagate) for logger in loggers]
    yield
    for logger, (handlers, level, propagate) in zip(loggers, saved, strict=True):
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def written(msg: str, *args: object, exc_info=None, **extra: object) -> str:
    """The line JsonFormatter writes for a warning logged by `tests.logs` at 2023-11-14 22:13:20.123 UTC."""
    record = logging.getLogger("tests.logs").makeRecord(
        "tests.logs", logging.WARNING, __file__, 1, msg, args, exc_info, extra=extra
    )
    record.created, record.msecs = 1_700_000_000.123, 123.0
    return JsonFormatter().format(record)


def test_a_line_is_one_json_object_with_time_level_logger_and_message():
    line = written("%d items\nin %s", 3, "two lines")
    assert "\n" not in line
    assert orjson.loads(line) == {
        "ts": "2023-11-14T22:13:20.123Z",
        "level": "warning",
        "logger": "tests.logs",
        "msg": "3 items\nin two lines",
    }


def test_extra_fields_are_written_beside_the_message_and_other_values_as_text():
    entry = orjson.loads(written("runtime ready", bundle="tiny-bert", items=3, folder=Path("/data/items")))
    assert (entry["msg"], entry["bundle"], entry["items"], entry["folder"]) == (
        "runtime ready",
        "tiny-bert",
        3,
        "/data/items",
    )


def test_an_exception_is_written_inside_its_line():
    try:
        raise ValueError("a bad value")
    except ValueError:
        line = written("unhandled error", exc_info=sys.exc_info())
    assert "\n" not in line
    exc = orjson.loads(line)["exc"]
    assert exc.startswith("Traceback (most recent call last):") and exc.endswith("ValueError: a bad value")


def test_a_line_carries_the_request_id_only_while_one_is_set():
    assert "request_id" not in orjson.loads(written("at start-up"))
    token = request_id.set("req-1")
    try:
        assert orjson.loads(written("handling"))["request_id"] == "req-1"
    finally:
        request_id.reset(token)
    assert "request_id" not in orjson.loads(written("after it"))


def test_configure_logging_sends_every_logger_through_one_json_handler(restored_logging, capsys):
    """Uvicorn's own loggers write through the root's handler (no second format, no line twice, even configured
    twice as `serve --workers` does: once in the server, once per worker) and its access log is off."""
    configure_logging("INFO")
    configure_logging("info")
    logging.getLogger("tests.logs").debug("below the level")
    logging.getLogger("tests.logs").info("at the level")
    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("uvicorn.access").info('127.0.0.1 - "GET /similar HTTP/1.1" 200')
    lines = [orjson.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(line["logger"], line["msg"]) for line in lines] == [
        ("tests.logs", "at the level"),
        ("uvicorn.error", "Started server process"),
    ]
    configure_logging("warning")
    logging.getLogger("tests.logs").info("now below the level")
    logging.getLogger("uvicorn.error").warning("a warning")
    assert [orjson.loads(line)["msg"] for line in capsys.readouterr().err.splitlines()] == ["a warning"]
