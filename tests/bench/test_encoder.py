"""bench.encoder end to end at a tiny size, as `python -m` runs it: a tiny bundle carrying fp32 and int8, a few rows
of each dataset (MS_BENCH_DATA), no report written (MS_BENCH_NO_WRITE). Timings mean nothing here; the test checks
that every contender and every pair is in the printed tables."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import NO_WRITE
from tests.tiny_model import CORPUS, build_tiny_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="latin-1" if path.name == "Abt.csv" else "utf-8") as f:
        csv.writer(f).writerows([header, *rows])


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory) -> Path:
    """Every pair: left item n matches right item n, which shares its code; wine reviews for the bulk texts."""
    root = tmp_path_factory.mktemp("encoder-bench-data")
    left = [[f"L{n}", f"{CORPUS[n]} KX{n}00", CORPUS[(n + 3) % 32]] for n in range(20)]
    right = [[f"R{n}", f"KX{n}00 {CORPUS[n]}", CORPUS[(n + 5) % 32]] for n in range(24)]
    gold = [[f"L{n}", f"R{n}"] for n in range(20)]
    for folder, (lname, rname, mname), (lid, rid), title in [
        ("abt_buy", ("Abt", "Buy", "abt_buy_perfectMapping"), ("idAbt", "idBuy"), "name"),
        ("walmart_amazon", ("left", "right", "mapping"), ("idLeft", "idRight"), "title"),
        ("dblp_scholar", ("left", "right", "mapping"), ("idLeft", "idRight"), "title"),
    ]:
        _csv(root / folder / f"{lname}.csv", ["id", title, "description"], left)
        _csv(root / folder / f"{rname}.csv", ["id", title, "description"], right)
        _csv(root / folder / f"{mname}.csv", [lid, rid], gold)
    wine = [[n, CORPUS[n % 32], f"A wine of {CORPUS[(n * 7) % 32].lower()}"] for n in range(40)]
    _csv(root / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv", ["id", "title", "description"], wine)
    return root


def test_encoder_bench(bench_data, tmp_path):
    from metricsearch.export import export_bundle

    model = build_tiny_model(tmp_path / "model")
    bundle = export_bundle(model, tmp_path / "bundle", int8=True)
    args = ["--bundle", str(bundle), "--model", str(model), "--items", "60", "--chunks", "2", "--queries", "10"]
    env = {**os.environ, NO_WRITE: "1", "MS_BENCH_DATA": str(bench_data), "TQDM_DISABLE": "1"}
    report = ROOT / "BENCHMARKS.md"
    before = report.read_bytes()
    run = subprocess.run(
        [sys.executable, "-m", "bench.encoder", *args, "--threads", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert report.read_bytes() == before
    lines = run.stdout.splitlines()
    encoders = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "x sentence" not in line]
    assert encoders[0] == "sentence-transformers (PyTorch fp32)"
    assert any(e.startswith("metricsearch fp32") for e in encoders)
    assert any(e.startswith("metricsearch int8") for e in encoders)
    assert {"Abt-Buy", "Walmart-Amazon", "DBLP-Scholar"} <= set(encoders)
    assert "60 items (" in run.stdout and ("Auto chose **fp32**" in run.stdout or "Auto chose **int8**" in run.stdout)
    header = next(line for line in lines if line.startswith("| encoder |")).split("|")
    rates = [line.split("|") for line in lines if line.startswith(("| sentence-transformers", "| metricsearch"))]
    column = header.index(" bulk GFLOP/s ")
    assert len(rates) == 3 and all(float(row[column]) > 0 for row in rates)
    assert re.search(r"sgemm peak: [1-9]\d* GFLOP/s", run.stdout)


def test_encoder_flop_is_what_pytorch_counts_for_the_same_texts(tmp_path):
    """bench.encoder's operation count against PyTorch's own (torch.utils.flop_counter) for the tiny BERT run on each
    text alone, unpadded: the same projections, feed-forward layers and attention products, and nothing else (the
    pooler, which sentence-transformers never reads, left out)."""
    import torch
    from tokenizers import Tokenizer
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertModel

    from bench.encoder import encoder_flop

    model = build_tiny_model(tmp_path / "model")
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_padding()
    bert = BertModel.from_pretrained(str(model), add_pooling_layer=False, attn_implementation="eager").eval()
    texts = [CORPUS[0], CORPUS[1] + " " + CORPUS[2], "a"]
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        for text in texts:
            bert(input_ids=torch.tensor([tokenizer.encode(text).ids]))
    assert encoder_flop(texts, model, tokenizer, max_length=128) == counter.get_total_flops()
    longest = max(len(tokenizer.encode(text).ids) for text in texts)
    assert encoder_flop(texts, model, tokenizer, max_length=longest - 1) < counter.get_total_flops()
