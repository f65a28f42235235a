"""The app's own latency (log(latency_ms=...)) and the retriever's rank and score on chunks: checked
on the way in, stored, read back, and shown by inspect, stats, export and the web view."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from typer.testing import CliRunner
from work_support import create_trace, ship

from veralith.cli import app
from veralith.errors import InputError
from veralith.models import ContextChunk
from veralith.pipeline.inputs import check_latency, normalize_context
from veralith.sdk.log import log, shutdown
from veralith.store import open_store, ops
from veralith.store.histogram import RELATIVE_ERROR, app_latency_percentiles
from veralith.store.protocol import TraceInput

QUERY = "When was Acme founded?"
CONTEXT = [{"text": "Acme was founded in 1947.", "id": "d1", "rank": 1, "score": 0.91},
           {"text": "Acme sells anvils.", "id": "d2", "rank": 2, "score": 0.42}]
RESPONSE = "Acme was founded in 1947."


@pytest.fixture(autouse=True)
def _fresh_worker():
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def test_latency_is_a_number_or_named_parts():
    assert check_latency(None) == {}
    assert check_latency(812) == {"total": 812.0}
    assert check_latency({"total": 900, "retrieval": 120.5}) == {"total": 900.0, "retrieval": 120.5}
    assert check_latency({"generation": 0}) == {"generation": 0.0}


@pytest.mark.parametrize(("value", "error", "words"), [
    ("fast", TypeError, "latency_ms must be a number"),
    (True, TypeError, "latency_ms must be a number"),
    (-1, InputError, ">= 0"),
    (math.nan, InputError, "finite"),
    (math.inf, InputError, "finite"),
    ({"total": 1, "network": 2}, InputError, "['network']"),
    ({"retrieval": "x"}, TypeError, "latency_ms['retrieval']"),
])
def test_a_bad_latency_is_refused_before_anything_is_written(value, error, words):
    with pytest.raises(error, match=None) as caught:
        log(QUERY, CONTEXT, RESPONSE, latency_ms=value)
    assert words in str(caught.value)
    assert not (open_store().read(ops.stats)["traces"])


@pytest.mark.parametrize(("chunk", "words"), [
    ({"text": "a", "rank": 0}, "context[0] rank must be an int >= 1"),
    ({"text": "a", "rank": "1"}, "context[0] rank must be an int >= 1"),
    ({"text": "a", "rank": True}, "context[0] rank must be an int >= 1"),
    ({"text": "a", "score": math.nan}, "context[0] score must be a finite number"),
    ({"text": "a", "score": "high"}, "context[0] score must be a finite number"),
])
def test_a_bad_rank_or_score_names_the_chunk(chunk, words):
    with pytest.raises(InputError, match=None) as caught:
        normalize_context([chunk])
    assert words in str(caught.value)


def test_rank_score_and_latency_round_trip_through_the_store():
    result = log(QUERY, CONTEXT, RESPONSE, sync=True, latency_ms={"total": 812.5, "retrieval": 120.25,
                                                                   "generation": 690.0})
    store = open_store()
    assert [(c.rank, c.score) for c in result.context] == [(1, 0.91), (2, 0.42)]
    assert store.read(ops.load_result, result.trace_id) == result
    assert store.read(ops.trace_info, result.trace_id).app_latency_ms == {"total": 812.5, "retrieval": 120.25,
                                                                  "generation": 690.0}
    loaded = store.read(ops.load_input, result.trace_id)
    assert loaded.context == result.context and loaded.app_latency_ms["total"] == 812.5
    plain = log(QUERY, ["no rank here"], RESPONSE, sync=True)
    assert plain.context[0].rank is None and plain.context[0].score is None
    assert store.read(ops.trace_info, plain.trace_id).app_latency_ms == {}


def test_a_spooled_trace_keeps_its_latency(store_url):
    import veralith
    from veralith.work.spooler import spooler_for

    chunk = ContextChunk(id="c0", text="Acme was founded in 1947.", rank=3, score=0.5)
    trace_id = spooler_for(store_url).append(
        TraceInput(query=QUERY, context=[chunk], response=RESPONSE, app_latency_ms={"total": 55.0}),
        run=None, evaluate_here=False)
    store = open_store()
    assert ship(store) == []                      # shipped; not this process's to judge
    assert store.read(ops.trace_info, trace_id).app_latency_ms == {"total": 55.0}
    assert store.read(ops.load_input, trace_id).context == [chunk]
    veralith.shutdown()


def test_stats_gives_nearest_rank_p50_and_p95_per_knowledge_base(store_url):
    store = open_store()
    for ms in range(100, 0, -1):  # 1..100 ms, written in reverse order
        create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE, knowledge_base="fast",
                                      app_latency_ms={"total": float(ms)}))
    create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE, knowledge_base="fast"))
    create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE, knowledge_base="slow",
                                  app_latency_ms={"total": 4000.0}))
    create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE, knowledge_base="untimed"))
    figures = store.read(ops.stats)["app_latency"]
    # Read from the histogram: within RELATIVE_ERROR of the exact nearest-rank values, and said so.
    exact = {"fast": {"n": 100, "p50": 50.0, "p95": 95.0}, "slow": {"n": 1, "p50": 4000.0, "p95": 4000.0}}
    assert set(figures) == set(exact)
    for kb, want in exact.items():
        assert figures[kb]["n"] == want["n"] and figures[kb]["relative_error"] == RELATIVE_ERROR < 0.01
        for name in ("p50", "p95"):
            assert figures[kb][name] == pytest.approx(want[name], rel=RELATIVE_ERROR)
    with store.connection() as db:  # type: ignore[attr-defined]
        assert app_latency_percentiles(db, "untimed") is None
    assert store.read(ops.stats, kb="slow")["app_latency"] == {"slow": figures["slow"]}
    out = " ".join(CliRunner().invoke(app, ["stats"]).stdout.split())
    assert "App latency" in out and "from a histogram, within 1%" in out
    assert f"{figures['fast']['p50']:,.0f} ms" in out and "3,987 ms" in out

def test_inspect_export_and_the_web_page_show_them(tmp_path):
    result = log(QUERY, CONTEXT, RESPONSE, sync=True, latency_ms={"total": 812.5, "retrieval": 120.0})
    runner = CliRunner()
    shown = runner.invoke(app, ["inspect", str(result.trace_id)], env={"COLUMNS": "160"}).stdout
    assert "app latency 812 ms (retrieval 120 ms)" in " ".join(shown.split())
    assert "rank" in shown and "0.91" in shown and "0.42" in shown
    line = json.loads(runner.invoke(app, ["export"]).stdout)
    assert line["app_latency_ms"] == {"total": 812.5, "retrieval": 120.0}
    assert [(c["rank"], c["score"]) for c in line["context"]] == [(1, 0.91), (2, 0.42)]
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["export", "--format", "csv"]).stdout)))
    assert (rows[0]["app_latency_ms"], rows[0]["app_retrieval_ms"], rows[0]["app_generation_ms"]) == \
        ("812.5", "120.0", "")
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from veralith.web.app import create_app

    client = TestClient(create_app(str(tmp_path / "veralith.db")), base_url="http://127.0.0.1:8765")
    page = client.get(f"/traces/{result.trace_id}").text
    assert "rank 1" in page and "score 0.91" in page and "812 ms" in page and "retrieval 120 ms" in page
    overview = client.get("/").text
    shown_p50 = re.search(r"p50 ≈ ([\d,]+) ms", overview)
    assert shown_p50 and float(shown_p50[1].replace(",", "")) == pytest.approx(812.5, rel=RELATIVE_ERROR, abs=0.5)
    assert "from a histogram, within 1%" in overview
