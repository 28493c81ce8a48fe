"""Training data files (pairs, triplets, catalogs) and BERT's token masking."""

from __future__ import annotations

import pytest
import torch

from metricsearch.core.errors import InvalidInputError, TrainerError
from metricsearch.core.records import ScoredPair, Triplet
from metricsearch.trainer.data import mask_tokens, read_catalog, read_pairs, read_triplets

# ----------------------------------------------------------------------------------------------- files


def test_csv_pairs_with_quoted_commas_scores_normalised(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text('text_a,text_b,score,source\n"red, soft shirt",red shirt,5,x\nhat,boots,0,y\nmug,cup,2.5,z\n')
    assert read_pairs(path) == [
        ScoredPair("red, soft shirt", "red shirt", 1.0),
        ScoredPair("hat", "boots", 0.0),
        ScoredPair("mug", "cup", 0.5),
    ]


def test_tsv_pairs_read_with_quoting_off_as_in_stsb(tmp_path):
    path = tmp_path / "sts.tsv"
    # STS-B's texts carry bare quotes; with csv quoting on, the first row would swallow the lines after it.
    path.write_text(
        "genre\tsentence1\tsentence2\tscore\n"
        'news\t"Quoted start of a text\tA plain text\t3.8\n'
        'forum\tTwo "quotes" inside\tAnother one"\t1.0\n'
        "captions\tA man plays\tA man sings\t0.0\n"
    )
    pairs = read_pairs(path)
    assert [(p.text_a, p.text_b) for p in pairs] == [
        ('"Quoted start of a text', "A plain text"),
        ('Two "quotes" inside', 'Another one"'),
        ("A man plays", "A man sings"),
    ]
    assert [p.score for p in pairs] == pytest.approx([3.8 / 3.8, 1.0 / 3.8, 0.0])


def test_jsonl_pairs_with_numeric_and_string_scores(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"text_a": "a", "text_b": "b", "score": 1}\n\n{"text_a": "c", "text_b": "d", "score": "-1"}\n')
    assert read_pairs(path) == [ScoredPair("a", "b", 1.0), ScoredPair("c", "d", 0.0)]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.csv", "text_a,score\nx,1\n", r"a\.csv:1: header lacks column\(s\) text_b"),
        ("b.tsv", "text_a\ttext_b\nx\ty\n", r"b\.tsv:1: header lacks column\(s\) score"),
        ("c.csv", "text_a,text_b,score\nx,y,1\nx,y,high\n", r"c\.csv:3: score 'high' is not a number"),
        ("d.csv", "text_a,text_b,score\nx,y,1\n,y,2\n", r"d\.csv:3: missing text_a"),
        (
            "e.jsonl",
            '{"text_a": "x", "text_b": "y", "score": 1}\n{"text_a": "x", "score": 2}\n',
            r"e\.jsonl:2: missing text_b",
        ),
        ("f.jsonl", '{"text_a": "x", "text_b": "y", "score": 1}\n{oops\n', r"f\.jsonl:2: not valid JSON"),
        ("g.jsonl", '{"text_a": "x", "text_b": "y", "score": true}\n', r"g\.jsonl:1: score True is not a number"),
        ("h.csv", "text_a,text_b,score\nx,y,nan\n", r"h\.csv:2: score 'nan' is not a finite number"),
        ("i.csv", "text_a,text_b,score\nx,y,2\nz,w,2\n", r"i\.csv: every score is 2\.0"),
        ("j.csv", "text_a,text_b,score\n", r"j\.csv: has no pairs"),
        ("k.txt", "x", r"use \.csv, \.tsv or \.jsonl"),
    ],
)
def test_bad_pair_files_are_named_by_file_line_and_column(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        read_pairs(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InvalidInputError, match=r"nope\.csv: no such file"):
        read_pairs(tmp_path / "nope.csv")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("t.csv", "anchor,positive,negative\nred shirt,crimson tee,steel kettle\n"),
        ("t.tsv", "anchor\tpositive\tnegative\nred shirt\tcrimson tee\tsteel kettle\n"),
        ("t.jsonl", '{"anchor": "red shirt", "positive": "crimson tee", "negative": "steel kettle"}\n'),
    ],
)
def test_triplets_in_each_format(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    assert read_triplets(path) == [Triplet("red shirt", "crimson tee", "steel kettle")]


def test_triplets_missing_column_is_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("anchor,positive\na,b\n")
    with pytest.raises(InvalidInputError, match=r"t\.csv:1: header lacks column\(s\) negative"):
        read_triplets(path)


def test_catalog_read_through_the_service_reader(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('id,title,description\n1,Red shirt,"soft, red"\n2,Hat,\n')
    assert [(i.id, i.title, i.description) for i in read_catalog(path)] == [
        ("1", "Red shirt", "soft, red"),
        ("2", "Hat", ""),
    ]


def test_catalog_errors_name_the_line(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,title\n1,ok\n2,\n")
    with pytest.raises(InvalidInputError, match=r"c\.csv:3: missing title"):
        read_catalog(path)


@pytest.mark.parametrize(("name", "content"), [("e.csv", "id,title,description\n"), ("e.jsonl", "\n")])
def test_empty_catalog_is_refused(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InvalidInputError, match=r"has no items"):
        read_catalog(path)


# ----------------------------------------------------------------------------------------------- masking

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = {PAD, 1, CLS, SEP, MASK}
VOCAB = 30_000


def batch(rows: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] tokens [SEP] [PAD]... with random lengths; real tokens drawn from ids 5.. (never special)."""
    lengths = torch.randint(3, length + 1, (rows,), generator=generator)
    attention = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = torch.randint(5, VOCAB, (rows, length), generator=generator) * attention
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    return ids, attention


def test_masking_follows_berts_rates_and_never_touches_special_or_padding():
    generator = torch.Generator().manual_seed(0)
    chosen = masked = randomised = kept = maskable = 0
    for _ in range(20):
        ids, attention = batch(32, 64, generator)
        original = ids.clone()
        out, labels = mask_tokens(
            ids, attention, special_ids=SPECIAL, mask_id=MASK, vocab_size=VOCAB, generator=generator
        )
        assert torch.equal(ids, original)  # not modified in place
        is_chosen = labels != -100
        real = (attention == 1) & (ids != CLS) & (ids != SEP)
        assert not (is_chosen & ~real).any()
        assert torch.equal(out[~is_chosen], ids[~is_chosen])
        assert torch.equal(labels[is_chosen], ids[is_chosen])
        assert ((out >= 0) & (out < VOCAB)).all()
        maskable += int(real.sum())
        chosen += int(is_chosen.sum())
        masked += int((out[is_chosen] == MASK).sum())
        kept += int((out[is_chosen] == ids[is_chosen]).sum())
        randomised += int(((out[is_chosen] != MASK) & (out[is_chosen] != ids[is_chosen])).sum())
    assert chosen / maskable == pytest.approx(0.15, abs=0.01)
    assert masked / chosen == pytest.approx(0.8, abs=0.02)
    assert randomised / chosen == pytest.approx(0.1, abs=0.015)
    assert kept / chosen == pytest.approx(0.1, abs=0.015)


def test_masking_chooses_at_least_one_token():
    ids = torch.tensor([[CLS, 7, 8, SEP, PAD], [CLS, 9, SEP, PAD, PAD]])
    attention = (ids != PAD).long()
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        _, labels = mask_tokens(
            ids, attention, special_ids=SPECIAL, mask_id=MASK, vocab_size=10, probability=1e-9, generator=generator
        )
        chosen = (labels != -100).nonzero().tolist()
        assert len(chosen) == 1 and chosen[0] in ([0, 1], [0, 2], [1, 1])


def test_masking_a_batch_without_real_tokens_chooses_nothing():
    ids = torch.tensor([[CLS, SEP, PAD]])
    out, labels = mask_tokens(ids, (ids != PAD).long(), special_ids=SPECIAL, mask_id=MASK, vocab_size=10)
    assert torch.equal(out, ids) and (labels == -100).all()


def test_masking_padding_marked_by_attention_not_by_id():
    # A real token that happens to share the pad id's value is still never chosen where attention is 0.
    ids = torch.tensor([[CLS, 7, SEP, 7, 7]])
    attention = torch.tensor([[1, 1, 1, 0, 0]])
    for seed in range(10):
        _, labels = mask_tokens(
            ids,
            attention,
            special_ids=SPECIAL,
            mask_id=MASK,
            vocab_size=10,
            generator=torch.Generator().manual_seed(seed),
        )
        assert (labels != -100).nonzero().tolist() == [[0, 1]]


def test_masking_is_reproducible_with_a_generator():
    ids, attention = batch(4, 16, torch.Generator().manual_seed(3))
    draws = [
        mask_tokens(
            ids,
            attention,
            special_ids=SPECIAL,
            mask_id=MASK,
            vocab_size=VOCAB,
            generator=torch.Generator().manual_seed(9),
        )
        for _ in range(2)
    ]
    assert torch.equal(draws[0][0], draws[1][0]) and torch.equal(draws[0][1], draws[1][1])


def test_masking_probability_out_of_range_is_refused():
    ids = torch.tensor([[CLS, 7, SEP]])
    with pytest.raises(TrainerError, match="probability"):
        mask_tokens(ids, torch.ones_like(ids), special_ids=SPECIAL, mask_id=MASK, vocab_size=10, probability=0.0)
