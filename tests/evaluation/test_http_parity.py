"""The served system scored over HTTP gives the numbers the in-process evaluation gives for the same bundle, a
first-order one and a second-order one (every candidate set here fits in the service's top 100), and leaves the
store's own items as they were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from metricsearch.evaluation.datasets import read_task
from metricsearch.evaluation.harness import evaluate
from metricsearch.evaluation.scorers import BundleScorer, HttpScorer
from tests.tiny_model import CORPUS

pytestmark = pytest.mark.slow


def _items(texts: list[str], prefix: str, shift: int = 0) -> list[dict]:
    """Title = a few words, description = the rest; `shift` moves the cut so two catalogs describe alike items
    differently."""
    out = []
    for n, text in enumerate(texts):
        words = text.split()
        cut = 3 + shift
        out.append({"id": f"{prefix}{n}", "title": " ".join(words[:cut]), "description": " ".join(words[cut:])})
    return out


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-data")
    cm = root / "catalog-match"
    cm.mkdir()
    _jsonl(cm / "left.jsonl", _items(CORPUS[:12], "l"))
    _jsonl(cm / "right.jsonl", _items(CORPUS, "r", shift=1))
    # l0-l7 match their own text; l8-l11 an unrelated item, which ranks anywhere: ranks that differ
    gold = [f"l{n},r{n}\n" for n in range(8)] + [f"l{n},r{n + 12}\n" for n in range(8, 12)] + ["l0,r20\n"]
    (cm / "gold.csv").write_text("left_id,right_id\n" + "".join(gold))

    an = root / "annotated"
    an.mkdir()
    _jsonl(an / "catalog.jsonl", _items(CORPUS, "i"))
    (an / "annotations.csv").write_text(
        "source_id,similar_id\n" + "".join(f"i{n},i{n + 1}\ni{n},i{n + 7}\n" for n in range(0, 20, 3))
    )

    # No pair of one text twice: its angular distance, arccos of a cosine within float noise of 1, differs by 2e-4
    # between two encodings, and its S_F is clipped to 1 on one side only (a tie there, none here).
    pairs = root / "pairs.tsv"
    pairs.write_text(
        "text_a\ttext_b\tscore\n" + "".join(f"{CORPUS[n]}\t{CORPUS[(n * 5 + 1) % 32]}\t{n % 4}\n" for n in range(16))
    )
    halves = _jsonl(
        root / "halves.jsonl",
        [{"id": f"h{n}", "title": f"item {n}", "description": f"{CORPUS[n]} {CORPUS[n + 1]}"} for n in range(31)],
    )
    return {"catalog-match": cm, "annotated": an, "pairs": pairs, "halves": halves}


class _Fixed:
    """Scores computed once, so both sides are compared score by score and then through the same metrics."""

    def __init__(self, label: str, scores: np.ndarray) -> None:
        self.label, self.how, self._scores = label, "", scores

    def scores(self, data) -> np.ndarray:
        return self._scores


@pytest.mark.parametrize("bundle_fixture", ["tiny_bundle", "svd_bundle"])
def test_http_and_in_process_evaluations_agree(bundle_fixture, request, start_service, datasets):
    bundle = request.getfixturevalue(bundle_fixture)
    service = start_service(bundle)
    with service.client() as client:
        kept = {"id": "user-item", "title": "Leather wallet", "description": "the user's own item", "metadata": {}}
        assert client.post("/index", json={"items": [kept]}).status_code == 200
    in_process = BundleScorer(bundle)
    assert (in_process.manifest.metric == "frobenius") == (bundle_fixture == "svd_bundle")
    over_http = HttpScorer(service.url)
    try:
        for task, path in datasets.items():
            data = read_task(task, path)
            local_scores, served_scores = in_process.scores(data), over_http.scores(data)
            # Every score the service returns is the in-process score (same vectors, same rerank), up to the float
            # noise of encoding a text in another batch; and the service returned every candidate.
            compared = np.eye(len(data.queries), dtype=bool) if data.is_pairs else np.ones_like(local_scores, bool)
            for i, own in enumerate(data.own_index):
                if own is not None:
                    assert served_scores[i, own] == -np.inf  # an item never ranks itself
                    compared[i, own] = False
            # Near a distance of 0 (two identical texts) arccos turns a 1e-7 cosine difference into 2e-4, so there the
            # scores agree to within what arccos(1 - 1e-6) / pi allows.
            tolerance = np.where(np.abs(local_scores[compared]) < 1e-3, 1e-3, 1e-5)
            difference = np.abs(served_scores[compared] - local_scores[compared])
            assert np.all(difference <= tolerance), (task, float(difference.max()))
            # The same scores give the same metrics; a rank may flip only where two candidates tie within that noise.
            local = evaluate(data, _Fixed("in-process", local_scores))
            served = evaluate(data, _Fixed("served", served_scores))
            if data.is_pairs:
                assert served.metrics == pytest.approx(local.metrics, abs=1e-4)
            else:
                flips = sum(a != b for a, b in zip(local.ranks, served.ranks, strict=True))
                assert flips <= 1, f"{task}: {flips} ranks differ"
                assert served.metrics == pytest.approx(local.metrics, abs=1.0 / len(local.ranks) + 1e-9), task
                assert len(set(local.ranks)) > 1, f"{task}: a test whose ranks are all alike could not fail"
    finally:
        over_http.close()
    with service.client() as client:
        assert client.get("/readyz").json()["items"] == 1  # the run's items are gone
        assert client.get("/items/user-item").json()["title"] == "Leather wallet"  # the user's item untouched


def test_cli_evaluates_a_bundle_and_a_service_writes_a_run_and_compares_runs(
    tiny_bundle, start_service, datasets, tmp_path
):
    service = start_service(tiny_bundle)
    base = ["evaluate", "--task", "annotated", "--data", str(datasets["annotated"])]
    first = subprocess.run(
        [
            sys.executable,
            "-m",
            "metricsearch.cli",
            *base,
            "--bundle",
            str(tiny_bundle),
            "--url",
            service.url,
            "--baseline",
            "tfidf",
            "--base-bundle",
            str(tiny_bundle),
            "--report-dir",
            str(tmp_path / "run1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    results = json.loads((tmp_path / "run1" / "results.json").read_text())
    bundle_row, tfidf_row, service_row = results["models"]
    assert service_row["model"].startswith(f"service at {service.url}")
    # up to one rank flipped by a near-tie (see the test above)
    assert service_row["metrics"] == pytest.approx(bundle_row["metrics"], abs=1.0 / len(bundle_row["ranks"]) + 1e-9)
    assert tfidf_row["model"].startswith("TF-IDF")
    assert "| TF-IDF" in first.stdout and "evaluated 3 model(s) on annotated" in first.stdout
    for plot in ("rank_histogram.png", "hr_at_k.png"):
        assert (tmp_path / "run1" / plot).read_bytes()[:4] == b"\x89PNG"

    pairs = subprocess.run(
        [
            sys.executable,
            "-m",
            "metricsearch.cli",
            "evaluate",
            "--task",
            "pairs",
            "--data",
            str(datasets["pairs"]),
            "--baseline",
            "tfidf",
            "--report-dir",
            str(tmp_path / "run2"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pairs.returncode == 0, pairs.stderr
    compared = subprocess.run(
        [
            sys.executable,
            "-m",
            "metricsearch.cli",
            "evaluate",
            "--compare",
            str(tmp_path / "run1"),
            "--compare",
            str(tmp_path / "run2"),
            "--report-dir",
            str(tmp_path / "both"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stderr
    table = (tmp_path / "both" / "compare.md").read_text()
    assert table.count("| run1 (annotated) |") == 3 and table.count("| run2 (pairs) |") == 1
    assert "Spearman" in table
    assert (tmp_path / "both" / "compare_hr_at_k.png").exists()
    assert (tmp_path / "both" / "compare_pairs_scatter.png").exists()
