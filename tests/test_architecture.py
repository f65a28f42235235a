"""The layering table in docs/architecture.md is the import rule: every module under veralith/ must be
placed by it and import only the parts its own part may (lazy and TYPE_CHECKING imports included)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "veralith"


@dataclass(frozen=True)
class Part:
    name: str
    patterns: tuple[str, ...]          # "veralith.x" (one module) or "veralith.x.*" (the package and all in it)
    may_import: frozenset[str]         # other parts
    never: frozenset[str]              # top-level third-party packages it must not import


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _names(cell: str) -> list[str]:
    return [] if cell in ("—", "-", "") else [n.strip().strip("`") for n in cell.split(",") if n.strip()]


def parse_table(text: str) -> dict[str, Part]:
    """The parts of the one table under '## Layering' (header row, separator, then one row per part)."""
    section = text.split("## Layering", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) > 2, "docs/architecture.md: no layering table under '## Layering'"
    header = _cells(rows[0])
    assert header[:3] == ["Part", "Modules", "May import"], header
    parts = {}
    for line in rows[2:]:
        cells = _cells(line)
        name = cells[0]
        parts[name] = Part(name, tuple(_names(cells[1])), frozenset(_names(cells[2])),
                           frozenset(_names(cells[3]) if len(cells) > 3 else []))
    return parts


def part_of(module: str, parts: dict[str, Part]) -> Part | None:
    """The part whose pattern matches `module` most specifically (an exact module beats a package)."""
    best: tuple[int, Part] | None = None
    for part in parts.values():
        for pattern in part.patterns:
            if pattern.endswith(".*"):
                package = pattern[:-2]
                score = len(package) if module == package or module.startswith(package + ".") else -1
            else:
                score = 10_000 + len(pattern) if module == pattern else -1
            if score >= 0 and (best is None or score > best[0]):
                best = (score, part)
    return None if best is None else best[1]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def imported_names(module: str, source: str, is_package: bool = False) -> set[str]:
    """Every module `source` imports, anywhere in it; `from pkg import sub` counts as pkg.sub when sub is a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                names.add(sub if _is_module(sub) else origin)
    return names


def _is_module(name: str) -> bool:
    if not name.startswith("veralith."):
        return False
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(module: str, source: str, parts: dict[str, Part], is_package: bool = False) -> list[str]:
    own = part_of(module, parts)
    if own is None:
        return [f"{module} is not placed by any part of the layering table in docs/architecture.md"]
    found = []
    for name in sorted(imported_names(module, source, is_package)):
        top = name.split(".")[0]
        if top in own.never:
            found.append(f"{module} ({own.name}) imports {name}, which {own.name} never imports")
        if top != "veralith":
            continue
        target = part_of(name, parts)
        if target is None:
            found.append(f"{module} ({own.name}) imports {name}, which no part of the table places")
        elif target is not own and target.name not in own.may_import:
            found.append(f"{module} ({own.name}) imports {name} ({target.name}); "
                         f"{own.name} may import only {sorted(own.may_import) or 'nothing else'}")
    return found


PARTS = parse_table(DOC.read_text(encoding="utf-8"))


def test_the_table_is_well_formed():
    assert {"core", "data", "observability", "llm", "pipeline", "store", "sdk", "cli"} <= set(PARTS)
    for part in PARTS.values():
        assert part.patterns, f"part {part.name} lists no modules"
        assert all(re.fullmatch(r"veralith(\.[a-z_]+)*(\.\*)?", p) for p in part.patterns), part.patterns
        unknown = part.may_import - set(PARTS)
        assert not unknown, f"part {part.name} may import unknown parts {sorted(unknown)}"
        assert part.name not in part.may_import, f"part {part.name} lists itself"
    assert not any("cli" in part.may_import for part in PARTS.values() if part.name != "cli"), \
        "nothing may import the command line"


def test_every_module_imports_only_what_its_part_may():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50   # the walk really covers the package
    found = []
    for path in modules:
        found += violations(module_name(path), path.read_text(encoding="utf-8"), PARTS,
                            is_package=path.name == "__init__.py")
    assert not found, "\n".join(found)


def test_observability_never_imports_llm():
    # The cost tracker prices and tracks; the judge clients report to it, never the other way round.
    assert "llm" not in PARTS["observability"].may_import
    assert "observability" in PARTS["llm"].may_import   # the clients report to the tracker


@pytest.mark.parametrize(("module", "source", "expected"), [
    ("veralith.observability.cost", "from veralith.llm.base import CallUsage", "imports veralith.llm.base (llm)"),
    ("veralith.observability.cost", "def f():\n    from veralith.llm import prompts", "veralith.llm.prompts (llm)"),
    ("veralith.pipeline.judges.sufficiency", "import sqlite3", "never imports"),
    ("veralith.store.db", "from veralith.pipeline import evaluate", "veralith.pipeline.evaluate (pipeline)"),
    ("veralith.sdk.log", "from veralith.cli import app", "veralith.cli.app (cli)"),
    ("veralith.observability.pricing", "from . import cost\nfrom ..llm import tasks", "veralith.llm.tasks (llm)"),
    ("veralith.newpart.thing", "", "is not placed by any part"),
])
def test_the_check_catches_what_it_should(module, source, expected):
    found = violations(module, source, PARTS)
    assert any(expected in line for line in found), found


def test_allowed_imports_pass_the_check():
    assert violations("veralith.llm.client", "from veralith.observability.cost import record_call", PARTS) == []
    assert violations("veralith.llm.cache", "from veralith.store.db import open_db", PARTS) == []
    assert violations("veralith.pipeline.evaluate", "from veralith.pipeline.judges import sufficiency", PARTS) == []


# `openai` as the top-level package (not veralith.adapters.openai, whose private modules are ours).
_PRIVATE = re.compile(r"(?<![\w.])openai\.(?:lib\.)?_\w+|(?<![\w.])openai\._|threading\._register_atexit|"
                      r"_register_atexit")


def test_no_private_api_of_another_library():
    found = [f"{module_name(path)}: {match.group()}" for path in sorted(PACKAGE.rglob("*.py"))
             for match in _PRIVATE.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_journey_names_only_modules_that_exist():
    section = DOC.read_text(encoding="utf-8").split("## Where a trace goes", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"(?<![\w/])((?:[a-z_]+/)*[a-z_]+\.py)\b", section)) | {
        path.rstrip("/") for path in re.findall(r"(?<![\w/])((?:[a-z_]+/)+)(?=[\s),])", section)}
    assert len(named) > 20, named
    missing = sorted(p for p in named if not ((REPO if p.startswith(("veralith/", "tests/")) else PACKAGE) / p).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


# A claim is the SQL that makes a trace `running` under a lease, or a call of the work layer's claims.
_CLAIMS = re.compile(r"status\s*=\s*'running'\s*,\s*lease_|\.claim(?:_batch)?\(|take_reserved\(")


def test_only_the_work_layer_claims_traces():
    found = [module_name(path) for path in sorted(PACKAGE.rglob("*.py"))
             if not module_name(path).startswith("veralith.work") and _CLAIMS.search(path.read_text(encoding="utf-8"))]
    assert not found, f"only veralith.work claims traces; these modules do too: {found}"


def test_the_claim_check_catches_a_claim_outside_the_work_layer():
    assert _CLAIMS.search("db.execute(\"UPDATE traces SET status = 'running', lease_host = ?\")")
    assert _CLAIMS.search("claims_for(store).claim(trace_id, again=True)")
    assert not _CLAIMS.search("UPDATE traces SET status = 'pending', lease_host = NULL")
