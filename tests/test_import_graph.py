"""Who may import whom (ARCHITECTURE.md): the core stands on nothing else of metricsearch; the encoder on the core;
service, trainer, export and evaluation on those two, and on one another only through a package's public face (the
names in its `__init__`'s `__all__`); the offline parts never import the service, nor the service torch or the
offline parts; the Python client stands on the core alone and loads nothing of the service's runtime; and no module
of metricsearch imports itself back through others (an import circle). Read from the source with `ast`, so a lazy
import inside a function, or one for type checking only, counts too. No module is over MAX_LINES lines."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "metricsearch"
PARTS = ("core", "encoder", "service", "trainer", "export", "evaluation", "client")
# The parts each part may import (any module of core and encoder; the others through their public face only).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "encoder": {"core"},
    "service": {"core", "encoder"},
    "export": {"core", "encoder"},
    "trainer": {"core", "export"},
    "evaluation": {"core", "encoder"},
    "client": {"core"},
    "cli": {"core", "encoder", "service", "trainer", "export", "evaluation", "client"},
    "bench": {"core", "encoder", "service", "export", "evaluation", "client"},
    "loadtests": set(),
}
OPEN_PARTS = {"core", "encoder"}
OFFLINE_ONLY = ("torch", "transformers", "sentence_transformers")
SERVICE_RUNTIME = ("onnxruntime", "openvino", "tokenizers", "qdrant_client", "qdrant_edge", "fastapi", "uvicorn")
"""What the service installs (the `service` extra) and a client application need not."""


def part_of(path: Path) -> str:
    relative = path.relative_to(ROOT).parts
    if relative[0] != "metricsearch":
        return relative[0]
    return Path(relative[1]).stem if len(relative) > 1 else "metricsearch"


def imports(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, imported names) of every import statement in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def public_names(part: str) -> set[str]:
    """The `__all__` of metricsearch/<part>/__init__.py."""
    tree = ast.parse((PACKAGE / part / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def sources() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *(ROOT / "loadtests").rglob("*.py")]
    return sorted(f for f in files if "__pycache__" not in f.parts)


def violations(path: Path) -> list[str]:
    part = part_of(path)
    if part == "metricsearch":  # the package's own __init__
        return []
    return check(path.read_text(), part, str(path.relative_to(ROOT)))


def check(source: str, part: str, name: str) -> list[str]:
    """What in `source`, a module of `part`, breaks the rules above."""
    problems = []
    for line, module, names in imports(source):
        where = f"{name}:{line}"
        pieces = module.split(".")
        if pieces[0] in ("service", "trainer", "export", "evaluation"):
            problems.append(f"{where}: imports {module!r}; everything imports as metricsearch.<part>")
            continue
        if part in ("core", "encoder", "service", "client") and pieces[0] in OFFLINE_ONLY:
            problems.append(f"{where}: {part} imports {module}, which only the offline side installs")
        if part == "client" and pieces[0] in SERVICE_RUNTIME:
            problems.append(f"{where}: the client imports {module}, which only the service installs")
        if pieces[0] != "metricsearch" or len(pieces) < 2:
            continue
        target = pieces[1]
        if target == part or target not in PARTS:
            continue
        if target not in ALLOWED.get(part, set()):
            problems.append(f"{where}: {part} may not import {target} ({module})")
        elif target not in OPEN_PARTS and (len(pieces) > 2 or not set(names) <= public_names(target)):
            problems.append(f"{where}: {part} imports {module} {names}: use metricsearch.{target}'s public names")
    return problems


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the metricsearch modules it imports, from their sources by module name (`from package import name`
    counts as importing the submodule `name` where there is one, else the package)."""
    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        graph[name] = set()
        for _, module, names in imports(source):
            targets = [f"{module}.{n}" if f"{module}.{n}" in modules else module for n in names] or [module]
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def circle(modules: dict[str, str]) -> list[str]:
    """An import circle among `modules` (name -> source) as the modules along it, the first one again at its end;
    empty where there is none."""
    try:
        graphlib.TopologicalSorter(import_graph(modules)).prepare()
    except graphlib.CycleError as found:
        return found.args[1]
    return []


def test_no_module_imports_itself_back():
    modules = {module_name(p): p.read_text() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert circle(modules) == []


def test_the_circle_check_finds_a_circle_through_a_type_checking_import():
    modules = {
        "metricsearch.service.rollout": "from metricsearch.service.runtime import Runtime\n",
        "metricsearch.service.runtime": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from metricsearch.service import rollout\n"
        ),
        "metricsearch.service": "",
    }
    found = circle(modules)
    assert sorted(set(found)) == ["metricsearch.service.rollout", "metricsearch.service.runtime"]


MAX_LINES = 500
"""A module longer than this holds more than one job: split it along its seams."""


def test_no_module_is_longer_than_max_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_part_imports_only_what_the_architecture_allows():
    problems = [problem for path in sources() for problem in violations(path)]
    assert problems == []


def test_public_faces_name_what_they_export():
    for part in ("service", "trainer", "export", "evaluation", "client"):
        names = public_names(part)
        assert names, f"metricsearch/{part}/__init__.py has no __all__"
        tree = ast.parse((PACKAGE / part / "__init__.py").read_text())
        bound = {
            alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
        }
        assert names == bound, f"metricsearch.{part}: __all__ and its imports differ"


@pytest.mark.parametrize(
    ("source", "part", "expected"),
    [
        ("from metricsearch.service.engine import Engine\n", "bench", "use metricsearch.service's public names"),
        ("from metricsearch.service import Engine, _private\n", "bench", "use metricsearch.service's public names"),
        ("from metricsearch.service import Engine\n", "evaluation", "evaluation may not import service"),
        ("from metricsearch.trainer import train\n", "core", "core may not import trainer"),
        ("import service.bundle\n", "bench", "everything imports as metricsearch"),
        ("import torch\n", "service", "only the offline side installs"),
        ("from qdrant_client import QdrantClient\n", "client", "only the service installs"),
        ("from metricsearch.service import Engine\n", "client", "client may not import service"),
    ],
)
def test_the_check_catches_what_it_forbids(source, part, expected):
    """The rule, not just today's tree: each forbidden shape is caught."""
    problems = check(source, part, "probe.py")
    assert any(expected in p for p in problems), problems


def test_the_check_lets_through_what_it_allows():
    assert (
        check("from metricsearch.service import Engine\nfrom metricsearch.core.scoring import pack\n", "bench", "x")
        == []
    )


def test_the_client_loads_nothing_of_the_service():
    """What the import statements above cannot see: the modules the client's imports load in turn."""
    probe = (
        "import sys, metricsearch.client\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVICE_RUNTIME + OFFLINE_ONLY!r}"
        " or m.startswith('metricsearch.service')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"
