"""`veralith import` of hostile and large files (issue 35, fault 13): a deeply nested file and OTLP
containers of the wrong type are one line and exit 2 with nothing stored; a file is read span by span
(memory of one trace, not the file), with a trace's spans found wherever they are in it."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from conftest import subprocess_env
from otlp_synthetic import SPANS_PER_TRACE, answer, export, question
from typer.testing import CliRunner

from veralith.cli import app
from veralith.importers import BadShape, read_file
from veralith.store import open_store, ops

FIXTURES = Path(__file__).parent / "import_fixtures"


def _import(path: Path, *extra: str):
    return CliRunner().invoke(app, ["import", str(path), "--backend", "local", *extra])


def _stored() -> int:
    from veralith.config import settings

    if not Path(settings.db_path).exists():
        return 0
    return int(open_store().read(ops.stats)["traces"])


# What a hostile file holds -> the words its one error line must contain.
HOSTILE = {
    "[" * 100_000 + "]" * 100_000: "nested deeper than 64 levels",
    '{"resourceSpans": ' + "[" * 5_000 + "]" * 5_000 + "}": "is a list, not an object",
    '{"x": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}": "nested deeper than 64 levels",
    '{"resourceSpans": "not a list"}': '"resourceSpans" is a string, not a list',
    '{"resourceSpans": [7]}': '"resourceSpans.item" is a number, not an object',
    '{"resourceSpans": [{"scopeSpans": {"spans": []}}]}': '"resourceSpans.item.scopeSpans" is an object, not a list',
    '{"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}': "is a string, not a list",
    '{"resourceSpans": [{"scopeSpans": [{"spans": [null]}]}]}': "is null, not an object",
    '{"data": [{"context": "not an object", "span_kind": "LLM"}]}': "has a field of the wrong type",
}


@pytest.mark.parametrize("text", list(HOSTILE), ids=range(len(HOSTILE)))
def test_a_hostile_file_is_one_line_exit_2_and_nothing_stored(tmp_path, text):
    words = HOSTILE[text]
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(BadShape) as caught:
        read_file(path)
    assert words in str(caught.value)
    done = _import(path)
    assert done.exit_code == 2, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and "nothing was imported" in lines[0], lines
    assert "Traceback" not in done.output
    assert _stored() == 0


def test_a_bad_span_at_the_end_of_a_good_file_stores_nothing(tmp_path):
    good = export(30, blocks=3, seed=2)
    good["resourceSpans"].append({"scopeSpans": [{"spans": ["not a span"]}]})
    path = tmp_path / "late.json"
    path.write_text(json.dumps(good))
    done = _import(path)
    assert done.exit_code == 2 and "is a string, not an object" in done.output
    assert _stored() == 0


def test_json_lines_of_requests_stream_and_group_across_lines(tmp_path):
    # Spans of each trace scattered over 6 requests, one per line; the service names come from the
    # resource even when a block lists "resource" after its spans.
    blocks = export(60, blocks=6, seed=3)["resourceSpans"]
    lines = [json.dumps({"resourceSpans": [{"scopeSpans": b["scopeSpans"], "resource": b["resource"]}]})
             for b in blocks]
    path = tmp_path / "lines.jsonl"
    path.write_text("\n".join(lines) + "\n")
    imported = read_file(path)
    assert (imported.format, imported.spans, imported.count, imported.judgeable) == (
        "otlp", 60 * SPANS_PER_TRACE, 60, 60)
    records = list(imported.traces)
    assert [(r["query"], r["response"]) for r in records] == [(question(i), answer(i)) for i in range(60)]
    assert all(r["metadata"]["service"].startswith("svc-") for r in records)
    imported.close()


def test_memory_is_one_trace_not_the_file(tmp_path):
    """Reading a 2,000-trace file and a 200-trace file peaks at about the same (traced) memory."""
    peaks = []
    for traces in (200, 2000):
        path = tmp_path / f"spans{traces}.json"
        path.write_text(json.dumps(export(traces, blocks=7, seed=1)))
        tracemalloc.start()
        imported = read_file(path)
        assert sum(1 for _ in imported.traces) == traces
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        imported.close()
    size = (tmp_path / "spans2000.json").stat().st_size
    assert peaks[1] < 2 * peaks[0] + 1_000_000, peaks   # ten times the traces, not ten times the memory
    assert peaks[1] < size / 2, (peaks, size)


def test_the_command_streams_a_file_and_judges_every_trace(tmp_path):
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(export(40, blocks=5, seed=4)))
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "import", str(path), "--backend", "local"],
                          env=subprocess_env(VERALITH_DB_PATH=str(tmp_path / "v.db")), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode in (0, 3), done.stderr   # 3: the quality gate, as eval's
    assert "otlp, 200 spans in 40 traces" in done.stdout
    assert open_store(tmp_path / "v.db").read(ops.stats)["traces"] == 40
