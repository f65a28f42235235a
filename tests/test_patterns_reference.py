"""`veralith patterns`' reference sections (issue 42): expected chunks and reference facts the retriever
keeps missing, on both stores, through the CLI's three outputs and the web page, with untrusted text
escaped and every empty section saying why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.patterns import patterns_view
from veralith.patterns import find_patterns, to_markdown

HOSTILE = "<script>alert(1)</script> [red]x[/red] @team \x1b[31m"
CHUNKS = [{"id": "doc-1", "text": "Acme makes anvils and rockets."},
          {"id": "doc-2", "text": "Acme ships worldwide from Ohio."}]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _line(id, query, response, reference=None, contexts=None, kb="shop"):
    line = {"id": id, "knowledge_base": kb, "query": query, "context": CHUNKS, "response": response}
    if reference is not None:
        line["reference"] = reference
    if contexts is not None:
        line["reference_contexts"] = contexts
    return line


def _golden(path: Path) -> Path:
    lines = []
    for i in range(4):   # a fact and an expected chunk the retriever never returns, in four traces
        lines.append(_line(f"founded-{i}", f"When was Acme founded? (asked {i})", "Acme was founded in 1947.",
                           "Acme was founded in 1947.", ["doc-9", "doc-1"]))
    for i in range(3):   # facts that differ in their words but share a topic
        lines.append(_line(f"export-{i}", f"How do I export my invoices as CSV, way {i}?", "Use the export button.",
                           f"Invoices export to CSV from the billing page, option {i}."))
    for i in range(2):   # a hostile fact text, missed twice; an expected text chunk retrieved at rank 0
        lines.append(_line(f"hostile-{i}", f"What is the motto? ({i})", "Acme makes anvils and rockets.",
                           HOSTILE, ["Acme makes anvils and rockets.", "c3"]))
    lines.append(_line("once", "Who runs Acme?", "Ruth Calder runs Acme.", "Ruth Calder runs Acme.", ["doc-7"]))
    lines.append(_line("ok", "What does Acme make?", "Acme makes anvils and rockets.",
                       "Acme makes anvils and rockets."))
    lines.append(_line("other-kb", "When was Acme founded?", "In 1947.", "Acme was founded in 1947.", ["doc-9"],
                       kb="other"))
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def golden_store(store, tmp_path):
    assert _cli("eval", str(_golden(tmp_path / "golden.jsonl")), "--run-name", "golden").exit_code in (0, 1)
    return store


def _keys(found, kind):
    return [g.key for g in found.section(kind).groups]


def test_what_the_retriever_keeps_missing_ranks_first_with_figures_examples_and_a_retrieval_fix(golden_store):
    found = find_patterns(golden_store, kb="shop")
    chunks = found.section("missed_chunk")
    assert _keys(found, "missed_chunk") == ["doc-9"] and chunks.unit == "traces with a reference"
    [doc9] = chunks.groups
    assert doc9.traces == 4 and doc9.figures["expected"] == 4 and doc9.figures["best_rank"] is None
    assert "never retrieved" in doc9.detail and doc9.fix.startswith("Retrieval (index, chunking, query rewrite)")
    assert [e.trace_id for e in doc9.examples] == [4, 3, 2]        # newest first, `examples` of them
    # doc-7 is missed once (under the minimum); "c3" is a position, which names no chunk across traces.
    assert "doc-7 (1)" in chunks.below and "c0, c1" in chunks.below
    facts = found.section("missed_fact")
    keys = _keys(found, "missed_fact")
    assert keys[0] == "Acme was founded in 1947." and facts.groups[0].traces == 4
    assert facts.groups[0].figures["answer"] == {"stated": 4}      # stated though never retrieved
    assert "states it anyway" in facts.groups[0].examples[0].reason
    topic = next(g for g in facts.groups if g.key.startswith("about "))
    assert "export" in topic.terms and topic.traces == 3 and "export" in topic.fix
    assert any(HOSTILE.split()[0] in k for k in keys)               # grouped by the text as written
    assert all(g.fix.startswith("Retrieval") for g in facts.groups)
    # Another knowledge base's traces stay out of a --kb scope, and come in without one.
    assert find_patterns(golden_store).section("missed_chunk").groups[0].traces == 5


def test_a_passing_trace_counts_and_failing_ones_are_said(golden_store):
    found = find_patterns(golden_store, kb="shop")
    hostile = next(g for g in found.section("missed_fact").groups if "script" in g.key)
    assert hostile.traces == 2 and hostile.figures["failing"] < 2   # the answers pass: the miss still counts
    assert f"({hostile.figures['failing']} failing the gate)" in hostile.detail


def test_every_empty_section_says_why(store, tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps(_line("a", "What does Acme make?", "Acme makes anvils and rockets.")) + "\n")
    assert _cli("eval", str(path)).exit_code in (0, 1)
    found = find_patterns(store)
    for kind in ("missed_chunk", "missed_fact"):
        assert found.section(kind).none_found.startswith("no judged trace here has a reference")
    path.write_text(json.dumps(_line("b", "What does Acme make?", "Acme makes anvils and rockets.",
                                     "Acme makes anvils and rockets.", ["doc-1"])) + "\n")
    assert _cli("eval", str(path)).exit_code in (0, 1)
    found = find_patterns(store)
    assert found.section("missed_chunk").none_found == "none missed: all 1 expected chunk(s) of 1 trace(s) were retrieved"
    assert found.section("missed_fact").none_found.startswith("none missed: the retrieved context supported all 1")
    text = _cli("patterns", "--format", "markdown").output
    assert "None missed: all 1 expected chunk" in text


def test_every_output_carries_the_sections_and_escapes_the_fact_text(golden_store):
    found = find_patterns(golden_store, kb="shop")
    data = json.loads(_cli("patterns", "--kb", "shop", "--json").output)
    kinds = [s["kind"] for s in data["sections"]]
    assert kinds[-2:] == ["missed_chunk", "missed_fact"]
    assert [g["key"] for g in data["sections"][-1]["groups"]] == _keys(found, "missed_fact")
    md = to_markdown(found)
    assert "### Reference facts the retriever keeps missing" in md and "| # | group | traces with a reference |" in md
    assert "<script>" not in md and "\\<script\\>" in md and "\x1b" not in md and "@\u200bteam" in md
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(patterns_view(found))
    text = console.export_text()
    assert "Expected chunks the retriever keeps missing" in text and "<script>alert(1)</script>" in text
    assert "[red]x[/red]" in text and "\x1b" not in text and "\\x1b[31m" in text   # markup and ESC shown, not obeyed


def test_the_web_patterns_page_shows_the_sections_escaped(golden_store):
    pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'veralith[web]')")
    from starlette.testclient import TestClient

    from veralith.store import store_url
    from veralith.web import create_app

    page = TestClient(create_app(store_url()), base_url="http://127.0.0.1:8765").get("/patterns?kb=shop")
    assert page.status_code == 200
    html = page.text
    assert "Expected chunks the retriever keeps missing: 1" in html and "Reference facts the retriever keeps missing" in html
    assert "4 traces with a reference" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html and "\x1b" not in html
