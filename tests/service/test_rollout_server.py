"""Model rollout with a Qdrant server (MS_QDRANT_URL: the fake REST server on 127.0.0.1, tests/service/qdrant_rest.py)
and the service as a subprocess: the new store is the collection `items.r<n>`, the swap one alias update, a restart at
any point serves a whole collection and drops what the rollout left. The embedded store's tests (test_rollout.py)
cover what both share: the copy, the writes applied to both during it, answers equal to a fresh index."""

from __future__ import annotations

import time

from metricsearch.client import Client
from tests.service.qdrant_rest import QdrantRest
from tests.service.test_rollout import (
    Traffic,
    Writer,
    catalog,
    check_whole,
    cli,
    load,
    wait_ready,
)


def layout(qdrant: QdrantRest) -> tuple[set[str], dict[str, str]]:
    """The server's collections and aliases ({alias: collection})."""
    collections = {c.name for c in qdrant.local.get_collections().collections}
    return collections, {a.alias_name: a.collection_name for a in qdrant.local.get_aliases().aliases}


def more_writes(writer: Writer, n: int = 3) -> None:
    """Until `n` more of the writer's writes were acknowledged."""
    until = writer.count + n
    while writer.count < until:
        time.sleep(0.05)


def test_rollout_swaps_the_alias_without_a_failed_request(tiny_bundle, bundle_b, start_service, tmp_path):
    """Plain collection `items` (a first start) -> `items.r1` (the alias `items.next` until the plain one is
    retired, then `items`) -> `items.r2` (one update of the alias `items`), with a writer and queries running."""
    items = catalog(600)
    with QdrantRest() as qdrant:
        service = start_service(tiny_bundle, tmp_path / "data", MS_QDRANT_URL=qdrant.url)
        with Client(service.url) as client:
            load(client, list(items.values()))
            assert layout(qdrant) == ({"items"}, {})
            with Traffic(service.url) as traffic, Writer(service.url, "w") as writer:
                more_writes(writer)
                started = client.rollout_start(str(bundle_b))
                assert (started.model, started.target) == ("tiny-bert", "tiny-bert-b")
                assert layout(qdrant) == ({"items", "items.r1"}, {})
                client.index([{"id": "during", "title": "Written during the copy", "metadata": {"shelf": 1}}])
                client.delete(ids=["sku-9"])
                ready = wait_ready(client)
                assert ready.total >= len(items)
                swapped = client.rollout_swap()
                assert (swapped.state, swapped.model) == ("none", "tiny-bert-b")
                assert client.model()["name"] == "tiny-bert-b"
                # The plain collection waits for the requests that began on it; `items.next` already serves.
                assert layout(qdrant) == ({"items", "items.r1"}, {"items.next": "items.r1"})
                more_writes(writer)
            assert writer.failed == [] and {answer.status for answer in traffic.seen} == {200}
            assert traffic.seen[-1].model == "tiny-bert-b"
            for item_id, title in writer.acknowledged.items():
                assert client.get_item(item_id).title == title
            assert client.get_item("during").title == "Written during the copy"
            assert client.ready()["items"] == len(items) - 1 + 1 + len(writer.acknowledged)

        service.stop()  # a stop retires the plain collection at once; the alias `items` takes over
        assert layout(qdrant) == ({"items.r1"}, {"items": "items.r1"})
        service.start()
        with Client(service.url) as client:
            assert client.model()["name"] == "tiny-bert-b"  # the bundle items.r1 records, not MS_BUNDLE_DIR's
            assert client.get_item("during").title == "Written during the copy"
            total = client.ready()["items"]
            client.rollout_start(str(tiny_bundle))
            wait_ready(client)
            client.rollout_swap()
            assert layout(qdrant)[1] == {"items": "items.r2"}
            assert client.model()["name"] == "tiny-bert"
            assert client.ready()["items"] == total
        service.stop()
        assert layout(qdrant) == ({"items.r2"}, {"items": "items.r2"})


def test_abort_drops_the_new_collection(tiny_bundle, bundle_b, start_service, tmp_path):
    with QdrantRest() as qdrant:
        service = start_service(tiny_bundle, tmp_path / "data", MS_QDRANT_URL=qdrant.url)
        with Client(service.url) as client:
            load(client, list(catalog(200).values()))
            client.rollout_start(str(bundle_b))
            assert layout(qdrant) == ({"items", "items.r1"}, {})
            assert client.rollout_abort().state == "none"
            assert layout(qdrant) == ({"items"}, {})
            assert client.model()["name"] == "tiny-bert" and client.ready()["items"] == 200


def test_a_rollout_killed_at_any_point_restarts_on_a_whole_collection(tiny_bundle, bundle_b, start_service, tmp_path):
    """kill -9 during the copy: the restart serves the old collection whole and drops the new one; kill -9 just after
    a swap (from the plain collection, then from one behind the alias): the restart serves the new one whole, with
    its bundle, and drops the old."""
    items = catalog(1500)
    with QdrantRest() as qdrant:
        service = start_service(tiny_bundle, tmp_path / "data", MS_QDRANT_URL=qdrant.url)
        with Client(service.url) as client:
            load(client, list(items.values()))
        acknowledged: dict[str, str] = {}
        cut: dict[str, str] = {}
        steps = [
            ("copying", bundle_b, "tiny-bert", ({"items"}, {})),
            ("swapped", bundle_b, "tiny-bert-b", ({"items.r1"}, {"items": "items.r1"})),  # the new store's name again
            ("swapped", tiny_bundle, "tiny-bert", ({"items.r2"}, {"items": "items.r2"})),
        ]
        for n, (point, bundle, model, after) in enumerate(steps):
            with Writer(service.url, f"w{n}") as writer:
                more_writes(writer)
                cli("start", "--bundle", str(bundle), "--url", service.url)
                with Client(service.url) as client:
                    if point == "copying":
                        while client.rollout_status().copied == 0:
                            time.sleep(0.01)
                        assert client.rollout_status().state == "copying"
                    else:
                        wait_ready(client)
                        assert f"serving {model}" in cli("swap", "--url", service.url)
                        assert len(layout(qdrant)[0]) == 2  # the old collection waits for requests under way
                service.stop(kill=True)
            assert writer.failed == []
            acknowledged |= writer.acknowledged
            cut |= writer.last
            service.start()
            check_whole(service, model, items, acknowledged, cut, folders=False)
            assert layout(qdrant) == after
