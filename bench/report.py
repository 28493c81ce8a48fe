"""The two reports, BENCHMARKS.md and EVALUATION.md: each opens with one summary table, then one `## <title>` section
per question. A benchmark rewrites only its own sections and summary rows; every section it writes is stamped with
the date, commit, machine and load of its run, so a figure is never read without them. The summary holds the rows of
one commit on one machine: a row written at another commit or on another machine leaves it (its section keeps the
figure, stamped)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
EVALUATION = ROOT / "EVALUATION.md"
NO_WRITE = "MS_BENCH_NO_WRITE"
"""Set (to anything), a bench prints its tables and writes no report: the smoke runs of tests/bench."""

SUMMARY = "Summary"
SUMMARY_HEADER = "| question | metricsearch, as served | baseline or peer, same run | section, measured |"
INTROS = {
    "BENCHMARKS.md": "How fast metricsearch answers and indexes, and what it holds in memory, beside a plain stack "
    "and txtai measured in the same run. `make bench-quick` regenerates the quick sections in minutes, `make bench` "
    "all of them; each section names its command, and the date, commit and machine of its run. The summary holds "
    "the rows of one commit on one machine, named above it.",
    "EVALUATION.md": "How good the answers are: what the default bundle serves, beside TF-IDF, the lexical score alone "
    "and the encoder alone, each scored in the same run through `metricsearch.evaluation` (docs/evaluation.md). "
    "`make bench` regenerates it; each section names its command, and the date, commit and machine of its run. "
    "The summary holds the rows of one commit on one machine, named above it.",
}
CHOICES = "Choices behind the defaults"
"""Each report's last section, written by hand: what a one-off experiment decided, one sentence with its figure."""
ORDER = {
    "BENCHMARKS.md": [
        *(SUMMARY, "Latency", "Hot path profile", "Indexing", "Durability", "Memory", "Encoder"),
        *("Answer cache under writes", "Model rollout", "Soak", "Container vs host", CHOICES),
    ],
    "EVALUATION.md": [
        SUMMARY,
        "Catalog matching",
        "Free text and STS-benchmark",
        "Trained on the catalog",
        "Generalisation",
        CHOICES,
    ],
}
"""Where each section goes (by the start of its title): a new section lands before the next one of the list."""


def write_section(path: Path, title: str, body: str) -> None:
    """Rewrite section `title` of the report at `path` (added in ORDER's place when missing) with `body`."""
    if os.environ.get(NO_WRITE):
        print(f"{NO_WRITE} is set: {path.name} section {title!r} not written")
        return
    stamp = f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {commit()} on {machine()}"
    _replace(path, title, f"{stamp}; 1-min load average {os.getloadavg()[0]:.1f} at the end.\n\n{body.strip()}")


def write_summary(path: Path, section: str, rows: Sequence[tuple[str, str, str]]) -> None:
    """Set the summary rows (question, metricsearch's figure, the baseline's or peer's figure of the same run) that
    `section` measured: a row whose question is already there is replaced, a new one appended, and the rows of
    another commit or machine are dropped, so the table is always one commit's on one machine (named above it)."""
    if os.environ.get(NO_WRITE):
        return
    day = time.strftime("%Y-%m-%d", time.gmtime())
    load = f"load {os.getloadavg()[0]:.1f}"
    new = {question: f"| {question} | {ours} | {peer} | {section}, {day}, {load} |" for question, ours, peer in rows}
    stamp = f"Every row below: commit {commit()} on {machine()}."
    text = _read(path)
    match = _section_pattern(SUMMARY).search(text)
    lines = match.group(0).splitlines() if match else []
    same = stamp in lines
    table = [line for line in lines if same and line.startswith("| ") and line != SUMMARY_HEADER]
    kept = [new.pop(_first_cell(line)) if _first_cell(line) in new else line for line in table]
    rows_now = [SUMMARY_HEADER, "|---|---|---|---|", *kept, *new.values()]
    _replace(path, SUMMARY, "\n".join([stamp, "", *rows_now]))


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; numbers right-aligned."""
    align = ["---:" if rows and isinstance(rows[0][i], int | float) else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def command(module: str, argv: Sequence[str]) -> str:
    """The command line that regenerates a section, as the report shows it."""
    return "`.venv/bin/python -m " + " ".join([module, *argv]) + "`"


def shown_path(path: Path) -> Path:
    """A path as a report shows it: relative to the project when inside it."""
    return path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path


def commit() -> str:
    """The checkout's short commit, `+changes` when its tracked files differ from it (measured code not committed);
    the two reports do not count: the bench before this one in `make bench` wrote its section of them."""
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    try:
        sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        reports = [f":!{report.name}" for report in (BENCHMARKS, EVALUATION)]
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", *reports], capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine() -> str:
    """The CPU's model, architecture, speed flags and cores: ratios to peers depend on it (txtai's PyTorch gains more
    from AVX-512 than ONNX Runtime does)."""
    cpu = _cpu_fields()
    present = set(cpu.get("flags", "").split())
    flags = ", ".join(flag for flag in SPEED_FLAGS if flag in present) or "none of " + ", ".join(SPEED_FLAGS)
    return f"{cpu.get('model name') or 'CPU ?'} ({platform.machine()}; {flags}), {os.cpu_count()} cores"


SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
"""The instruction sets reduced precision's speed depends on (docs/bundle.md, "Why the default bundle is fp32")."""


def _cpu_fields() -> dict[str, str]:
    """/proc/cpuinfo's fields of its first CPU ("model name", "flags", ...); none where it cannot be read."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for name, _, value in (line.partition(":") for line in lines):
        fields.setdefault(name.strip(), value.strip())
    return fields


def _read(path: Path) -> str:
    if path.exists():
        return path.read_text()
    title = path.stem.capitalize() if path.name != "BENCHMARKS.md" else "Benchmarks"
    return f"# {title}\n\n{INTROS.get(path.name, '')}\n"


def _section_pattern(title: str) -> re.Pattern[str]:
    return re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)


def _replace(path: Path, title: str, body: str) -> None:
    text = _read(path)
    section = f"## {title}\n\n{body.strip()}\n\n"
    pattern = _section_pattern(title)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        order = ORDER.get(path.name, [])
        place = next((i for i, name in enumerate(order) if title.startswith(name)), len(order))
        later = order[place + 1 :]
        anchor = next((m for t in later if (m := re.search(rf"^## {re.escape(t)}", text, re.M))), None)
        at = anchor.start() if anchor else len(text)
        text = text[:at].rstrip() + "\n\n" + section + text[at:]
    path.write_text(text.rstrip() + "\n")


def _first_cell(line: str) -> str:
    return line.split(" | ")[0].removeprefix("| ").strip()
