"""Trace-specific explanations (`--explain`, issue 29 item 2) through the real OpenAI SDK against the fake
server, on the offline backend, and in both stores."""

from __future__ import annotations

import json

import pytest
from fake_openai_server import task_of
from typer.testing import CliRunner
from work_support import save_result

import veralith
from veralith.cli import app
from veralith.config import settings
from veralith.llm.prompts import PROMPT_VERSIONS
from veralith.llm.tasks import EXPLAIN, quote_in
from veralith.models import Explanation, ExplanationQuote, Usage
from veralith.pipeline.budget import BudgetExceeded, estimate_trace
from veralith.pipeline.explain import DROPPED_QUOTE, explain_input
from veralith.store import open_store, ops

QUERY = "How tall is the Eiffel Tower?"
CONTEXT = ["The Eiffel Tower is 300 metres tall, without its antennas.", "It opened in 1889."]
RESPONSE = "The Eiffel Tower is 330 metres tall."
GOOD = {"quotes": [{"source": "chunk", "chunk_id": "c0", "quote": "The Eiffel Tower is 300   metres\ntall"},
                   {"source": "response", "chunk_id": "", "quote": "330 metres tall"}],
        "missing_fact": "", "what_went_wrong": "k1 says 330 metres; chunk c0 says 300 metres.",
        "change_to_try": "Tell the generator to copy heights exactly from chunk c0."}
INVENTED = {**GOOD, "quotes": [{"source": "chunk", "chunk_id": "c0", "quote": "The tower is 324 metres tall"}]}


def _judge(server, **extra):
    return settings.override(backend="openai", base_url=server.base_url, api_key="test", judge_model="gpt-4o",
                             max_retries=0, **extra)


def _script(server, *explain_replies):
    """The faithfulness judge finds the claim contradicted by c0 (a failing trace); the explain task gets
    `explain_replies` in turn; everything else is the server's auto reply."""
    replies = list(explain_replies)

    def responder(body):
        task = task_of(body)
        if task == "faithfulness":
            ids = [line.split('id="')[1].split('"')[0] for line in body["messages"][1]["content"].splitlines()
                   if line.startswith("<claim-")]
            return {"items": [{"claim_id": i, "evidence": [], "reasoning": "300 is not 330",
                               "relation": "contradicted", "grounding_chunk_ids": [],
                               "contradicting_chunk_ids": ["c0"]} for i in ids]}
        if task == "explain" and replies:
            return replies.pop(0)
        return None

    server.responder = responder


def test_a_failing_trace_is_explained_with_every_quote_found_in_the_trace(openai_server):
    _script(openai_server, GOOD)
    with _judge(openai_server):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
    assert result.status.quality_gate.value == "fail" and result.failure_cell is not None
    e = result.explanation
    assert e is not None and e.dropped is None and openai_server.by_task()["explain"] == 1
    # The quote with other whitespace was found after normalisation and is kept as the judge wrote it.
    assert [(q.source, q.chunk_id) for q in e.quotes] == [("chunk", "c0"), ("response", None)]
    assert all(quote_in(q.text, CONTEXT[0] if q.source == "chunk" else RESPONSE) for q in e.quotes)
    assert e.what_went_wrong == GOOD["what_went_wrong"] and e.change_to_try == GOOD["change_to_try"]
    assert result.suggestion is not None   # beside the rule-based suggestion, never instead of it
    # Priced: the call's own usage, and the trace's total includes it.
    assert e.model == "gpt-4o" and e.usage.calls == 1 and e.usage.usd and e.usage.usd > 0
    assert result.usage.calls == openai_server.count and result.prompt_versions["explain"] == PROMPT_VERSIONS["explain"]
    stored = open_store().read(ops.load_result, result.trace_id)
    assert stored.explanation == e and stored.suggestion == result.suggestion
    shown = CliRunner().invoke(app, ["inspect", str(result.trace_id)])
    assert shown.exit_code == 0, shown.output
    assert "Explanation (this trace)" in shown.output and "copy heights exactly" in shown.output
    assert "gpt-4o" in shown.output and f"${e.usage.usd:.4f}" in shown.output
    as_json = json.loads(CliRunner().invoke(app, ["inspect", str(result.trace_id), "--json"]).output)
    assert as_json["explanation"]["quotes"][1]["text"] == "330 metres tall"


def test_an_invented_quote_is_asked_again_once_then_dropped_with_a_note(openai_server):
    _script(openai_server, INVENTED, INVENTED)
    with _judge(openai_server):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
    assert openai_server.by_task()["explain"] == 2
    reask = [b for b in openai_server.requests if task_of(b) == "explain"][1]
    assert "is not in the trace" in reask["messages"][-1]["content"]
    e = result.explanation
    assert e is not None and e.dropped == DROPPED_QUOTE and e.quotes == [] and e.what_went_wrong == ""
    assert e.usage.calls == 2   # both replies were paid for
    assert open_store().read(ops.load_result, result.trace_id).explanation == e
    shown = CliRunner().invoke(app, ["inspect", str(result.trace_id)])
    assert DROPPED_QUOTE in shown.output and result.suggestion.title in shown.output


def test_a_quote_fixed_in_the_reask_is_kept(openai_server):
    _script(openai_server, INVENTED, GOOD)
    with _judge(openai_server):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
    assert openai_server.by_task()["explain"] == 2
    assert result.explanation is not None and result.explanation.dropped is None
    assert result.explanation.quotes[0].text == GOOD["quotes"][0]["quote"]


def test_a_quote_of_a_chunk_that_does_not_exist_is_an_invented_quote():
    payload = explain_input(veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False))
    wrong = EXPLAIN.output_model.model_validate({**GOOD, "quotes": [
        {"source": "chunk", "chunk_id": "c9", "quote": "The Eiffel Tower"},
        {"source": "response", "chunk_id": "", "quote": "300 metres tall"}]})   # in a chunk, not the response
    problems = EXPLAIN.check(payload, wrong)
    assert len(problems) == 2 and all("is not in the trace" in p for p in problems)
    empty = EXPLAIN.output_model.model_validate({**GOOD, "quotes": [], "what_went_wrong": " "})
    assert len(EXPLAIN.check(payload, empty)) == 2   # neither a quote nor a missing fact; no diagnosis


def test_the_same_trace_again_is_explained_from_the_cache_without_a_call(openai_server):
    _script(openai_server, GOOD)
    with _judge(openai_server):
        first = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
        calls = openai_server.count
        again = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
    assert openai_server.count == calls and openai_server.by_task()["explain"] == 1
    assert again.explanation is not None and again.explanation.usage.cache_hits == 1
    assert again.explanation.usage.calls == 0 and again.explanation.usage.usd == 0
    assert again.explanation.quotes == first.explanation.quotes


def test_a_passing_trace_makes_no_extra_call(openai_server):
    with _judge(openai_server):   # the auto replies: every claim supported, every sub-question answered
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
    assert result.status.quality_gate.value == "pass"
    assert result.explanation is None and openai_server.by_task()["explain"] == 0
    shown = CliRunner().invoke(app, ["inspect", str(result.trace_id), "--explain"])
    assert shown.exit_code == 0 and "nothing to explain" in shown.stderr
    assert openai_server.by_task()["explain"] == 0


def test_explain_is_off_by_default(openai_server):
    _script(openai_server, GOOD)
    with _judge(openai_server):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    assert result.status.quality_gate.value == "fail"
    assert result.explanation is None and openai_server.by_task()["explain"] == 0


def test_the_budget_guard_counts_the_explain_call_and_stops_it(openai_server):
    with _judge(openai_server):
        without = estimate_trace(QUERY, CONTEXT, RESPONSE)
        with settings.override(explain=True):
            with_explain = estimate_trace(QUERY, CONTEXT, RESPONSE)
    assert with_explain.calls == without.calls + 1 and with_explain.usd > without.usd
    between = (without.usd + with_explain.usd) / 2
    _script(openai_server, GOOD)
    with _judge(openai_server, per_trace_budget_usd=between):
        with pytest.raises(BudgetExceeded):
            veralith.evaluate(QUERY, CONTEXT, RESPONSE, explain=True)
        assert openai_server.count == 0
        assert veralith.evaluate(QUERY, CONTEXT, RESPONSE).explanation is None   # within budget without it


def test_eval_dry_run_counts_the_explain_call(openai_server, tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"query": QUERY, "context": CONTEXT, "response": RESPONSE}) + "\n")
    for name, value in (("BACKEND", "openai"), ("BASE_URL", openai_server.base_url), ("API_KEY", "test"),
                        ("JUDGE_MODEL", "gpt-4o")):
        monkeypatch.setenv(f"VERALITH_{name}", value)
    settings.reload()
    plain = CliRunner().invoke(app, ["eval", str(path), "--dry-run"])
    explained = CliRunner().invoke(app, ["eval", str(path), "--dry-run", "--explain"])
    assert plain.exit_code == explained.exit_code == 0, explained.output
    assert "explain" in explained.output and "explain" not in plain.output
    assert openai_server.count == 0


def _openai_env(server, monkeypatch, **extra):
    for name, value in (("BACKEND", "openai"), ("BASE_URL", server.base_url), ("API_KEY", "test"),
                        ("JUDGE_MODEL", "gpt-4o"), ("MAX_RETRIES", "0"), *extra.items()):
        monkeypatch.setenv(f"VERALITH_{name}", value)
    settings.reload()


def test_inspect_explain_explains_a_stored_failing_trace_once(openai_server, tmp_path, monkeypatch):
    _script(openai_server, GOOD)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "query": QUERY, "context": CONTEXT, "response": RESPONSE}) + "\n")
    _openai_env(openai_server, monkeypatch)
    done = CliRunner().invoke(app, ["eval", str(path)])
    assert done.exit_code == 0, done.output
    assert openai_server.by_task()["explain"] == 0   # off without --explain
    trace_id = open_store().read(ops.resolve, "a")
    assert open_store().read(ops.load_result, trace_id).explanation is None
    shown = CliRunner().invoke(app, ["inspect", "a", "--explain"])
    assert shown.exit_code == 0, shown.output
    assert openai_server.by_task()["explain"] == 1 and "copy heights exactly" in shown.output
    stored = open_store().read(ops.load_result, trace_id)
    assert stored.explanation is not None and stored.explanation.dropped is None
    assert stored.usage.calls == openai_server.count - 1   # the trace's own judgments are as they were
    again = CliRunner().invoke(app, ["inspect", "a", "--explain", "--json"])
    assert again.exit_code == 0 and openai_server.by_task()["explain"] == 1   # kept: shown, no call
    assert json.loads(again.output)["explanation"]["change_to_try"] == GOOD["change_to_try"]


def test_eval_explain_explains_new_and_unchanged_failing_records(openai_server, tmp_path, monkeypatch):
    _script(openai_server, GOOD, GOOD)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "query": QUERY, "context": CONTEXT, "response": RESPONSE}) + "\n")
    _openai_env(openai_server, monkeypatch)
    assert CliRunner().invoke(app, ["eval", str(path)]).exit_code == 0
    trace_id = open_store().read(ops.resolve, "a")
    assert open_store().read(ops.load_result, trace_id).explanation is None
    # Unchanged, so not judged again, but failing without an explanation: explained now.
    rerun = CliRunner().invoke(app, ["eval", str(path), "--explain"])
    assert rerun.exit_code == 0, rerun.output
    assert openai_server.by_task()["explain"] == 1
    assert open_store().read(ops.load_result, trace_id).explanation.change_to_try == GOOD["change_to_try"]
    again = CliRunner().invoke(app, ["eval", str(path), "--explain"])
    assert again.exit_code == 0 and openai_server.by_task()["explain"] == 1   # explained already
    fresh = tmp_path / "u.jsonl"
    fresh.write_text(json.dumps({"id": "b", "query": QUERY, "context": CONTEXT[:1], "response": RESPONSE}) + "\n")
    new = CliRunner().invoke(app, ["eval", str(fresh), "--explain"])
    assert new.exit_code == 0, new.output
    assert openai_server.by_task()["explain"] == 2
    assert open_store().read(ops.load_result, open_store().read(ops.resolve, "b")).explanation is not None


def test_inspect_explain_stays_within_the_budget(openai_server, monkeypatch):
    _script(openai_server, GOOD)
    with _judge(openai_server):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    for name, value in (("BACKEND", "openai"), ("BASE_URL", openai_server.base_url), ("API_KEY", "test"),
                        ("JUDGE_MODEL", "gpt-4o"), ("PER_TRACE_BUDGET_USD", str(result.usage.usd * 1.01))):
        monkeypatch.setenv(f"VERALITH_{name}", value)
    settings.reload()
    before = openai_server.count
    refused = CliRunner().invoke(app, ["inspect", str(result.trace_id), "--explain"])
    assert refused.exit_code == 2 and "exceeds the per-trace budget" in refused.stderr
    assert "Traceback" not in refused.output and openai_server.count == before
    assert open_store().read(ops.load_result, result.trace_id).explanation is None


def test_the_offline_backend_explains_from_its_own_verdicts_deterministically():
    context = ["The Eiffel Tower is 300 metres tall.", "It opened in 1889."]
    first = veralith.evaluate(QUERY, context, RESPONSE, explain=True)
    assert first.status.quality_gate.value == "fail"
    e = first.explanation
    assert e is not None and e.dropped is None and e.backend == "local" and e.usage.usd == 0
    assert ("response", None) in [(q.source, q.chunk_id) for q in e.quotes]
    for q in e.quotes:   # verified the same way as a model's quotes
        assert quote_in(q.text, RESPONSE if q.source == "response" else {"c0": context[0], "c1": context[1]}[q.chunk_id])
    assert "k1" in e.what_went_wrong and e.change_to_try
    second = veralith.evaluate(QUERY, context, RESPONSE, explain=True, persist=False)
    assert second.explanation == e


def test_the_offline_backend_names_a_missing_fact():
    result = veralith.evaluate("Who designed the Eiffel Tower?", ["It opened in 1889."],
                               "The Eiffel Tower was designed by Gustave Eiffel.", explain=True, persist=False)
    assert result.status.quality_gate.value == "fail"
    e = result.explanation
    assert e is not None and e.dropped is None
    assert e.missing_fact or e.quotes
    assert "Retrieve" in e.change_to_try or "chunks" in e.change_to_try


def test_explanations_are_stored_replaced_and_copied(store, tmp_path):
    result = veralith.evaluate(QUERY, ["The Eiffel Tower is 300 metres tall."], RESPONSE, persist=False)
    trace_id = save_result(store, result)
    assert store.read(ops.load_result, trace_id).explanation is None
    note = Explanation(dropped=DROPPED_QUOTE, backend="openai", model="gpt-4o", prompt_version="explain-v1",
                       usage=Usage(calls=2, usd=None))
    store.write(ops.save_explanation, trace_id, note)
    assert store.read(ops.load_result, trace_id).explanation == note
    kept = Explanation(what_went_wrong="k1 is contradicted.", change_to_try="Copy from c0.", backend="local",
                       quotes=[ExplanationQuote(source="chunk", chunk_id="c0", text="300 metres")], model="m",
                       prompt_version="local-explain-1")
    store.write(ops.save_explanation, trace_id, kept)   # replaces, one per trace
    loaded = store.read(ops.load_result, trace_id)
    assert loaded.explanation == kept and loaded.suggestion == result.suggestion
    # A re-evaluation replaces the explanation with the trace's other judgments.
    save_result(store, loaded.model_copy(update={"explanation": None}))
    assert store.read(ops.load_result, trace_id).explanation is None
    store.write(ops.save_explanation, trace_id, kept)
    from veralith.work.migrate import copy as copy_history

    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    report = copy_history(store, target)
    assert not report.mismatches
    assert target.read(ops.load_result, trace_id).explanation == kept


def test_the_web_trace_page_shows_the_explanation_escaped(tmp_path):
    pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'veralith[web]')")
    pytest.importorskip("jinja2", reason="the web extra is not installed (pip install 'veralith[web]')")
    from starlette.testclient import TestClient

    from veralith.web import create_app

    result = veralith.evaluate(QUERY, ["The Eiffel Tower is 300 metres tall."], RESPONSE)
    hostile = Explanation(what_went_wrong="k1 <script>alert(1)</script> is contradicted.",
                          change_to_try="Copy the height from c0.", backend="openai", model="gpt-4o",
                          prompt_version="explain-v1", usage=Usage(calls=1, usd=0.0123),
                          quotes=[ExplanationQuote(source="chunk", chunk_id="c0", text="300 metres tall")])
    open_store().write(ops.save_explanation, result.trace_id, hostile)
    page = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765").get(
        f"/traces/{result.trace_id}")
    assert page.status_code == 200
    assert "This trace, explained" in page.text and "Copy the height from c0." in page.text
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text
    assert "$0.0123" in page.text and result.suggestion.title in page.text
    open_store().write(ops.save_explanation, result.trace_id, Explanation(dropped=DROPPED_QUOTE, model="gpt-4o"))
    page = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765").get(
        f"/traces/{result.trace_id}")
    assert DROPPED_QUOTE in page.text
