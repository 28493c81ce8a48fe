"""The report writer (bench/report.py): a section is rewritten in place or added in its order, and the summary table
holds the rows of one commit on one machine."""

from __future__ import annotations

import pytest

from bench import report


@pytest.fixture
def reports(tmp_path, monkeypatch):
    monkeypatch.delenv(report.NO_WRITE, raising=False)
    monkeypatch.setattr(report, "machine", lambda: "CPU X (x86_64; avx2), 2 cores")
    return tmp_path / "BENCHMARKS.md"


def summary_rows(path) -> list[str]:
    text = path.read_text()
    summary = text.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    return [line.split(" | ")[0].removeprefix("| ") for line in summary.splitlines()[4:] if line.startswith("| ")]


def test_a_section_is_replaced_in_place_and_a_new_one_lands_in_its_order(reports, monkeypatch):
    monkeypatch.setattr(report, "commit", lambda: "aaa")
    report.write_section(reports, "Memory", "memory table 1")
    report.write_section(reports, "Latency, 10 items", "latency table")
    report.write_section(reports, "Memory", "memory table 2")
    text = reports.read_text()
    assert text.index("## Latency, 10 items") < text.index("## Memory")
    assert "memory table 2" in text and "memory table 1" not in text
    assert "at commit aaa on CPU X (x86_64; avx2), 2 cores" in text


def test_the_summary_keeps_one_commits_rows(reports, monkeypatch):
    """Rows of the same commit add up and replace their own question; a row of another commit starts the table
    anew, whose stamp names the commit and machine."""
    monkeypatch.setattr(report, "commit", lambda: "aaa")
    report.write_summary(reports, "Latency", [("p50", "1 ms", "2 ms"), ("p99", "3 ms", "4 ms")])
    report.write_summary(reports, "Memory", [("rss", "10 MB", "-")])
    report.write_summary(reports, "Latency", [("p50", "1.5 ms", "2 ms")])
    assert summary_rows(reports) == ["p50", "p99", "rss"]
    assert "| p50 | 1.5 ms | 2 ms | Latency," in reports.read_text()

    monkeypatch.setattr(report, "commit", lambda: "bbb")
    report.write_summary(reports, "Memory", [("rss", "11 MB", "-")])
    text = reports.read_text()
    assert summary_rows(reports) == ["rss"]
    assert "Every row below: commit bbb on CPU X (x86_64; avx2), 2 cores." in text and "commit aaa" not in text
