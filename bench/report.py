"""BENCHMARKS.md is shared by several benchmarks: each owns one `## <title>` section and rewrites only it."""

from __future__ import annotations

import re
import time
from pathlib import Path

HEADER = (
    "# Benchmarks\n\nEvery figure below was measured by the script named in its section, on the machine it names.\n"
)


def write_section(path: Path, title: str, body: str) -> None:
    text = path.read_text() if path.exists() else HEADER
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = f"## {title}\n\nMeasured {stamp}.\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    path.write_text(text.rstrip() + "\n")
