"""Model rollout over real HTTP (subprocess services, two tiny bundles A and B): while the catalog is copied into B's
new store, the service answers from A without a failed request and applies writes to both; after the swap /model
and every answer are B's, equal to a service that indexed the same items with B from scratch, also after a restart;
an abort drops the new store and the service goes on as before."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import NamedTuple

import httpx
import pytest

from metricsearch.client import Client
from metricsearch.core.schemas import RolloutStatus
from tests.tiny_model import CORPUS

N_ITEMS = 1200


def catalog(n: int) -> dict[str, dict]:
    return {
        f"sku-{i}": {
            "id": f"sku-{i}",
            "title": f"{CORPUS[i % len(CORPUS)]}, {CORPUS[(i // len(CORPUS)) % len(CORPUS)]}",
            "description": CORPUS[(i * 7) % len(CORPUS)],
            "metadata": {"n": i, "shelf": i % 5},
        }
        for i in range(n)
    }


def load(client: Client, items: list[dict]) -> None:
    for start in range(0, len(items), 500):
        client.index(items[start : start + 500])


QUERIES = [{"id": "sku-3", "k": 10}, {"text": CORPUS[5], "k": 10}, {"id": "sku-40", "k": 5, "filter": {"shelf": 2}}]


def answers(url: str) -> list[list[tuple[str, float]]]:
    with Client(url) as client:
        return [[(r.id, r.score) for r in client.similar(q).results] for q in QUERIES]


class Answer(NamedTuple):
    status: int
    model: str | None
    sent_at: float  # time.monotonic() when the query was sent


class Traffic:
    """Queries in a loop from another thread: every answer's status and model, and when its query was sent, in
    order."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[Answer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            n = 0
            while not self._stop.is_set():
                sent_at = time.monotonic()
                answer = http.post("/similar", json=QUERIES[n % len(QUERIES)])
                self.seen.append(Answer(answer.status_code, answer.json().get("model"), sent_at))
                n += 1


def wait_ready(client: Client, timeout_s: float = 240) -> RolloutStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.rollout_status()
        assert status.state in ("copying", "ready"), status
        if status.state == "ready":
            return status
        time.sleep(0.2)
    raise AssertionError(f"the rollout copy is not done after {timeout_s} s: {status}")


def test_rollout_swaps_to_the_new_bundle_without_a_failed_request(tiny_bundle, bundle_b, start_service, tmp_path):
    items = catalog(N_ITEMS)
    service = start_service(tiny_bundle, tmp_path / "live")
    with Client(service.url) as client:
        load(client, list(items.values()))
        with Traffic(service.url) as traffic:
            started = client.rollout_start(str(bundle_b))
            assert started.target == "tiny-bert-b" and started.model == "tiny-bert"
            # Writes while the copy runs go to both stores: a new item, a changed text, a changed metadata, deletes.
            items["new-1"] = {"id": "new-1", "title": "Espresso grinder with conical burrs", "metadata": {"shelf": 2}}
            items["sku-7"] = items["sku-7"] | {"title": "Retitled while rolling out"}
            items["sku-8"] = items["sku-8"] | {"metadata": {"shelf": 2, "n": 8}}
            client.index([items["new-1"], items["sku-7"], items["sku-8"]])
            client.delete(ids=["sku-9", "sku-1100"])
            del items["sku-9"], items["sku-1100"]
            assert client.delete(filter={"n": {"gte": 1150}}) == 50
            items = {k: v for k, v in items.items() if not k.startswith("sku-") or int(k[4:]) < 1150}
            ready = wait_ready(client)
            assert ready.copied >= len(items) - 1 and ready.total == len(items)
            assert ready.items_per_s > 0 and ready.eta_s == 0
            assert client.model()["name"] == "tiny-bert"
            swapped = client.rollout_swap()
            assert (swapped.state, swapped.model) == ("none", "tiny-bert-b")
            swapped_at = time.monotonic()
            assert client.model()["name"] == "tiny-bert-b"
            client.index([{"id": "after-swap", "title": "Written after the swap"}])
            assert client.get_item("after-swap").title == "Written after the swap"
            assert client.ready()["items"] == len(items) + 1
            client.delete_item("after-swap")
            deadline = time.monotonic() + 60
            while sum(answer.sent_at > swapped_at for answer in traffic.seen) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert {answer.status for answer in traffic.seen} == {200}
        models = [answer.model for answer in traffic.seen]
        assert models == sorted(models) and models[0] == "tiny-bert" and models[-1] == "tiny-bert-b"
        # A query sent before the swap may be answered by A after it (it was under way); one sent after never is.
        assert all(answer.model == "tiny-bert-b" for answer in traffic.seen if answer.sent_at > swapped_at)
        assert client.ready()["items"] == len(items)
    rolled_out = answers(service.url)

    fresh = start_service(bundle_b, tmp_path / "fresh")
    with Client(fresh.url) as client:
        load(client, list(items.values()))
    assert_same(rolled_out, answers(fresh.url))

    # The swap is durable: a restart with MS_BUNDLE_DIR still naming A serves B's store.
    service.stop()
    service.start()
    with Client(service.url) as client:
        assert client.model()["name"] == "tiny-bert-b"
        assert client.ready()["items"] == len(items)
        assert client.get_item("sku-7").title == "Retitled while rolling out"
    assert_same(answers(service.url), rolled_out)
    folders = sorted(p.name for p in (tmp_path / "live").iterdir())
    assert folders == ["items.r1", "items.serving.json"], folders


def assert_same(got, expected) -> None:
    """The same scores in the same order, and each item in both the same score, up to the encoder's last bits: they
    depend on what a text was batched with (padding), and an angle near 0 magnifies them (arccos' slope), to 1e-4 at
    most here; another model's vectors differ by far more. Items may trade places only where their scores tie."""
    for g, e in zip(got, expected, strict=True):
        assert [s for _, s in g] == pytest.approx([s for _, s in e], abs=5e-4)
        mine, theirs = dict(g), dict(e)
        assert len(mine.keys() & theirs.keys()) >= len(g) - 2
        for item in mine.keys() & theirs.keys():
            assert mine[item] == pytest.approx(theirs[item], abs=5e-4)


def test_abort_drops_the_new_store_and_conflicting_calls_get_409(tiny_bundle, bundle_b, start_service, tmp_path):
    service = start_service(tiny_bundle, tmp_path / "data", MS_API_KEY="admin")
    with Client(service.url, "admin") as client:
        load(client, list(catalog(300).values()))
        before = answers_with_key(service.url)
        with httpx.Client(base_url=service.url) as anonymous:
            assert anonymous.post("/admin/rollout", json={"bundle": str(bundle_b)}).status_code == 401
        with httpx.Client(base_url=service.url, headers={"Authorization": "Bearer admin"}) as http:
            assert http.get("/admin/rollout").json() == http.get("/admin/rollout").json() | {"state": "none"}
            for path in ("/admin/rollout/swap", "/admin/rollout/abort"):
                answer = http.post(path)
                assert answer.status_code == 409 and "no rollout" in answer.json()["detail"]
            missing = http.post("/admin/rollout", json={"bundle": str(tmp_path / "nowhere")})
            assert missing.status_code == 404 and "no bundle at" in missing.json()["detail"]
            for refused in ("a\x00b", "x" * 300):  # paths the OS refuses (NUL byte, name too long) name no bundle
                answer = http.post("/admin/rollout", json={"bundle": refused})
                assert answer.status_code == 404 and "no bundle at" in answer.json()["detail"], answer.text
            broken = tmp_path / "broken"
            broken.mkdir()
            (broken / "bundle.json").write_text("{")
            unreadable = http.post("/admin/rollout", json={"bundle": str(broken)})
            assert unreadable.status_code == 400 and "not readable JSON" in unreadable.json()["detail"]
            assert http.post("/admin/rollout", json={"bundle": str(bundle_b)}).status_code == 202
            again = http.post("/admin/rollout", json={"bundle": str(bundle_b)})
            assert again.status_code == 409 and "under way" in again.json()["detail"]
            assert (tmp_path / "data" / "items.r1").is_dir()
            aborted = http.post("/admin/rollout/abort")
            assert aborted.status_code == 200 and aborted.json()["state"] == "none"
        assert not (tmp_path / "data" / "items.r1").exists()
        assert client.model()["name"] == "tiny-bert"
        client.index([{"id": "after-abort", "title": "Written after the abort"}])
        assert client.ready()["items"] == 301
    assert answers_with_key(service.url) == before


def answers_with_key(url: str) -> list[list[tuple[str, float]]]:
    with Client(url, "admin") as client:
        return [[(r.id, r.score) for r in client.similar(q).results] for q in QUERIES]


class Writer:
    """Writes one item at a time from another thread until stopped or the service dies: the acknowledged writes,
    the last one sent, which the kill may have cut off before or after it was applied, how many were acknowledged,
    and the status of each write the service answered with an error."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.acknowledged: dict[str, str] = {}
        self.last: dict[str, str] = {}
        self.failed: list[int] = []
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            n = 0
            while not self._stop.is_set():
                item = {"id": f"{self.prefix}-{n % 20}", "title": f"{CORPUS[n % len(CORPUS)]} written {n}"}
                self.last = {item["id"]: item["title"]}
                try:
                    answer = http.post("/index", json={"items": [item]})
                except httpx.HTTPError:
                    return  # killed: this write was never acknowledged
                if answer.status_code == 200:
                    self.acknowledged[item["id"]] = item["title"]
                    self.count += 1
                else:
                    self.failed.append(answer.status_code)
                n += 1


def cli(*args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "rollout", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_whole(
    service, model: str, items: dict[str, dict], acknowledged: dict[str, str], cut: dict[str, str], folders: bool = True
) -> None:
    """Serving `model`, with every item of the catalog and every acknowledged write (or the write the kill cut off,
    if it was applied), and no rollout left over (with `folders`, in the embedded store's data folder)."""
    with Client(service.url) as client:
        assert client.model()["name"] == model
        assert client.rollout_status().state == "none"
        assert 0 <= client.ready()["items"] - len(items) - len(acknowledged) <= len(cut.keys() - acknowledged.keys())
        for item_id, title in acknowledged.items():
            assert client.get_item(item_id).title in (title, cut.get(item_id))
        assert client.get_item("sku-5").title == items["sku-5"]["title"]
    if folders:
        stores = sorted(p.name for p in service.data_dir.iterdir() if p.is_dir())
        assert stores == (["items.r1"] if model == "tiny-bert-b" else ["items"]), stores


def test_a_rollout_killed_at_any_point_restarts_on_a_complete_store(tiny_bundle, bundle_b, start_service, tmp_path):
    """kill -9 right after the start, during the copy, once it is ready: the restart serves A, whole, without the
    new store; kill -9 just after the swap (the old store not yet removed): the restart serves B, whole."""
    items = catalog(3000)
    service = start_service(tiny_bundle, tmp_path / "data")
    with Client(service.url) as client:
        load(client, list(items.values()))
    acknowledged: dict[str, str] = {}
    cut: dict[str, str] = {}
    for point in ("started", "copying", "ready", "swapped"):
        with Writer(service.url, f"w-{point}") as writer:
            while len(writer.acknowledged) < 3:
                time.sleep(0.05)
            cli("start", "--bundle", str(bundle_b), "--url", service.url)
            with Client(service.url) as client:
                if point == "copying":
                    while client.rollout_status().copied == 0:
                        time.sleep(0.01)
                    assert client.rollout_status().state == "copying"
                if point in ("ready", "swapped"):
                    wait_ready(client)
                    assert "ready" in cli("status", "--url", service.url)
                if point == "swapped":
                    assert "serving tiny-bert-b" in cli("swap", "--url", service.url)
                    assert (service.data_dir / "items").is_dir()  # the old store waits for requests under way
            service.stop(kill=True)
        acknowledged |= writer.acknowledged
        cut |= writer.last
        service.start()
        check_whole(service, "tiny-bert-b" if point == "swapped" else "tiny-bert", items, acknowledged, cut)


def test_a_write_during_the_copy_wins_over_the_page_the_copy_read(tiny_bundle, bundle_b, tmp_path, monkeypatch):
    """In process, the copy held between reading its first page and writing it: an item changed, one deleted by id
    and one deleted by filter meanwhile are in the new store as the writes left them, not as the page read them."""
    from metricsearch.core.records import Item
    from metricsearch.service import Service, Settings
    from metricsearch.service.engine import Indexer

    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path))
    writes = service.live.engine.indexer
    writes.index([Item(i["id"], i["title"], i["description"], i["metadata"]) for i in catalog(600).values()])
    read, resume = threading.Event(), threading.Event()
    first_page: list[Item] = []
    encode_items = Indexer.encode_items

    def held_after_reading(self, items, batch_size):
        if threading.current_thread().name == "rollout-copy" and not read.is_set():
            first_page.extend(items)
            read.set()
            assert resume.wait(60)
        return encode_items(self, items, batch_size)

    monkeypatch.setattr(Indexer, "encode_items", held_after_reading)
    service.rollout.start(str(bundle_b))
    assert read.wait(60)
    changed, deleted, filtered = first_page[0], first_page[1], first_page[2]
    writes.index([Item(changed.id, "Changed while the copy held its page", "", {})])
    writes.delete(deleted.id)
    assert writes.delete_where(runtime_conditions({"n": filtered.metadata["n"]})) == 1
    resume.set()
    while service.rollout.status().state == "copying":
        time.sleep(0.05)
    assert service.rollout.status().state == "ready"

    old = service.live
    asyncio.run(service.rollout.swap())
    new = service.live
    try:
        assert new.bundle.manifest.name == "tiny-bert-b"
        assert new.store.count() == 598
        assert {i.id for i in scroll_all(new.store)} == {i.id for i in scroll_all(old.store)}
        assert new.engine.get(changed.id).title == "Changed while the copy held its page"
        assert new.store.get([deleted.id, filtered.id]) == {}
    finally:
        old.close()
        new.close()


def runtime_conditions(filter: dict) -> list:
    from metricsearch.core.schemas import DeleteRequest

    return DeleteRequest.model_validate({"filter": filter}).conditions()


def scroll_all(store) -> list:
    """Every stored item, a page at a time (Store.scroll)."""
    offset, out = None, []
    while True:
        page, offset = store.scroll(offset, 100)
        out += page
        if offset is None:
            return out


def test_a_pointer_to_a_missing_or_unreadable_store_is_refused_at_start(tiny_bundle, tmp_path):
    """serving.json names what a swap made live: if that store is gone the service must not create it empty, and a
    damaged serving.json is an error naming the file, not a silent fall back to the swapped-out store."""
    from metricsearch.core.errors import StoreMismatchError
    from metricsearch.service import Service, Settings

    settings = Settings(bundle_dir=tiny_bundle, data_dir=tmp_path)
    pointer = tmp_path / "items.serving.json"
    pointer.write_text(json.dumps({"collection": "items.r3", "bundle_dir": str(tiny_bundle)}))
    with pytest.raises(StoreMismatchError, match=r"items\.r3, which is gone"):
        Service(settings)
    assert not (tmp_path / "items.r3").exists()
    pointer.write_text("{")
    with pytest.raises(StoreMismatchError, match=r"items\.serving\.json is damaged"):
        Service(settings)
