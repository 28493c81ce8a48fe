"""The request size limits: each refusal is a 413 naming where in the request and the setting that raises it."""

from __future__ import annotations

import pytest

from metricsearch.core.errors import PayloadTooLargeError
from metricsearch.core.records import Item
from metricsearch.service.config import Settings
from metricsearch.service.engine import Limits

LIMITS = Limits(
    Settings(max_title_chars=5, max_description_chars=8, max_batch_items=2, max_metadata_keys=1, max_metadata_bytes=20),
    max_length=128,
)


def test_texts_within_the_limits_pass_and_longer_ones_name_their_setting():
    LIMITS.check_texts("shirt", "soft red", "query")
    with pytest.raises(PayloadTooLargeError, match=r"query: title has 6 characters.*MS_MAX_TITLE_CHARS"):
        LIMITS.check_texts("shirts", None, "query")
    with pytest.raises(PayloadTooLargeError, match=r"queries\.2: text has 9 characters.*first 128 tokens"):
        LIMITS.check_texts(None, "soft reds", "queries.2")


@pytest.mark.parametrize(
    ("items", "refusal"),
    [
        ([Item("a", "x"), Item("b", "y"), Item("c", "z")], "3 items in one request; the limit is 2"),
        ([Item("a", "x"), Item("b", "long title")], r"items\.1: title has 10 characters"),
        ([Item("a", "x", "", {"k": 1, "j": 2})], r"items\.0: metadata has 2 keys; the limit is 1"),
        ([Item("a", "x", "", {"k": "v" * 30})], r"items\.0: metadata is \d+ bytes as JSON.*MS_MAX_METADATA_BYTES"),
    ],
)
def test_an_index_batch_past_a_limit_is_refused_whole(items, refusal):
    with pytest.raises(PayloadTooLargeError, match=refusal):
        LIMITS.check_items(items)


def test_an_index_batch_within_the_limits_passes():
    LIMITS.check_items([Item("a", "x", "", {"k": 1}), Item("b", "y")])
