"""BENCHMARKS.md is shared by several benchmarks: each owns one `## <title>` section and rewrites only it."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

HEADER = (
    "# Benchmarks\n\nEvery figure below was measured by the script named in its section, on the machine it names.\n"
)


ROOT = Path(__file__).resolve().parents[1]
NO_WRITE = "MS_BENCH_NO_WRITE"
"""Set (to anything), a bench prints its tables and writes no report: the smoke runs of tests/bench."""


def write_section(path: Path, title: str, body: str) -> None:
    if os.environ.get(NO_WRITE):
        print(f"{NO_WRITE} is set: {path.name} section {title!r} not written")
        return
    text = path.read_text() if path.exists() else HEADER
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = f"## {title}\n\nMeasured {stamp}.\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    path.write_text(text.rstrip() + "\n")


def shown_path(path: Path) -> Path:
    """A path as a report shows it: relative to the project when inside it."""
    return path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path


def machine() -> str:
    """The CPU's model, architecture, speed flags and cores: every section names the CPU it ran on, as ratios to peers
    depend on it (txtai's PyTorch gains more from AVX-512 than ONNX Runtime does)."""
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
