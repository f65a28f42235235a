"""The single-call mode (`--mode fast`, VERALITH_MODE=fast): one call per trace, results identical in
form to the full mode's and saying which mode made them, stored and shown; the cache, the dry run and
the budget guard count one call; a bad reply is salvaged; `compare` refuses to mix modes silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai_server import Reply, auto_reply, task_of
from fast_oracle import fast_oracle_client
from test_golden import HELD_OUT, TRACES
from typer.testing import CliRunner

import veralith
from veralith.cli import app
from veralith.config import settings
from veralith.llm.prompts import PROMPT_VERSIONS
from veralith.models import Phase
from veralith.pipeline.budget import BudgetExceeded, enforce_budget, estimate_trace
from veralith.store import ops

QUERY = "How tall is the Orla tower, and who designed it?"
CONTEXT = ["The Orla tower is 212 metres tall.", "The Orla tower was designed by Mira Tansel."]
RESPONSE = "The Orla tower is 212 metres tall. It was designed by Mira Tansel."
runner = CliRunner()


@pytest.fixture
def judge(openai_server):
    """The fake OpenAI server as the judge (listed after `store`, whose URL the override keeps)."""
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test",
                           judge_model="gpt-4o", max_retries=0):
        yield openai_server


def _form(result) -> dict:
    """What must not depend on the mode: everything but timings, usage, versions, repairs and the mode."""
    return result.model_dump(mode="json", exclude={"latency_ms", "usage", "prompt_versions", "mode", "trace_id"})


def test_one_call_per_trace_a_result_like_the_full_modes_and_its_mode_stored(store, judge):
    with settings.override(mode="fast"):
        fast = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    assert dict(judge.by_task()) == {"fast": 1}
    assert fast.mode == "fast" and fast.usage.calls == 1 and fast.prompt_versions == {"fast": PROMPT_VERSIONS["fast"]}
    full = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    assert full.mode == "full" and full.usage.calls >= 4
    assert _form(fast) == _form(full)                    # the fake answers both alike: so must the pipeline
    assert store.read(ops.load_result, fast.trace_id).mode == "fast"
    assert store.read(ops.load_result, full.trace_id).mode == "full"
    assert fast.usage.input_tokens < full.usage.input_tokens


def test_the_cache_keys_on_the_mode(judge):
    full = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    before = judge.count
    with settings.override(mode="fast"):
        first = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
        assert judge.count == before + 1 and first.usage.cache_hits == 0   # not served from the full mode's replies
        again = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == before + 1 and again.usage.cache_hits == 1 and again.mode == "fast"
    assert full.usage.cache_hits == 0


def test_the_offline_judge_has_no_single_call_mode_and_says_full():
    with settings.override(mode="fast", backend="local"):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert result.mode == "full" and "fast" not in result.prompt_versions


def test_the_dry_run_and_the_budget_guard_count_one_call(tmp_path):
    with settings.override(backend="openai", judge_model="gpt-4o"):
        full = estimate_trace(QUERY, CONTEXT, RESPONSE)
        with settings.override(mode="fast"):
            fast = estimate_trace(QUERY, CONTEXT, RESPONSE)
            assert enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=(fast.usd + full.usd) / 2) is not None
        with pytest.raises(BudgetExceeded):
            enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=(fast.usd + full.usd) / 2)
    assert fast.calls == 1 and full.calls >= 4
    assert [m.model for m in fast.by_model] == ["gpt-4o"]
    assert fast.usd < full.usd and fast.input_tokens < full.input_tokens
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"query": QUERY, "context": CONTEXT, "response": RESPONSE}) + "\n", encoding="utf-8")
    out = runner.invoke(app, ["eval", str(path), "--dry-run", "--backend", "openai", "--model", "gpt-4o",
                              "--mode", "fast"])
    assert out.exit_code == 0, out.output
    assert "fast mode: one call per trace" in " ".join(out.output.split())
    total = next(line for line in out.output.splitlines() if "total (1 traces)" in line)
    assert total.split("│")[2].strip() == "1"            # the calls column


def _spoil(reply: dict) -> dict:
    reply["sufficiency"][0].update(evidence=[])        # "yes" quoting nothing: its only item
    reply["faithfulness"][0].update(evidence=[])       # "supported" quoting nothing: one of two
    return reply


def _spoiled(body: dict) -> dict:
    """The call's reply spoilt, its re-ask answered right."""
    return _spoil(auto_reply(body)) if task_of(body) == "fast" else auto_reply(body)


def test_bad_verdicts_are_asked_again_once_in_one_request_saying_only_what_is_wrong(judge):
    judge.responder = _spoiled
    with settings.override(mode="fast"):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert [task_of(b) for b in judge.requests] == ["fast", "fast_reask"] and not result.errors
    reask = judge.requests[1]
    # The conversation goes on: the call as it was, its reply, then what is wrong with which item and the fix,
    # named by the reply's own claim ids, and a schema asking only for the lists that hold a bad item.
    assert reask["messages"][:2] == judge.requests[0]["messages"] and reask["messages"][2]["role"] == "assistant"
    asked = reask["messages"][3]["content"]
    assert "faithfulness claim c1: c1 is 'supported' but quotes no chunk that states it; quote the chunks" in asked
    assert "sufficiency sub-question q1: q1 is 'yes' but quotes nothing" in asked
    assert "no item for" not in asked and "c2" not in asked
    assert set(reask["response_format"]["json_schema"]["schema"]["properties"]) == {"sufficiency", "faithfulness"}
    assert [j.claim_id for j in result.faithfulness] == ["k1", "k2"] and len(result.sufficiency) == 1
    assert result.usage.calls == 2


def test_a_verdict_still_bad_after_the_re_ask_is_missing(judge):
    judge.responder = lambda body: _spoil(auto_reply(body))    # the re-ask repeats the mistakes
    with settings.override(mode="fast"):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == 2                                # the call and its one re-ask
    errors = {e.phase: e for e in result.errors}
    # Nothing usable for a judge: that judge failed, as in the full mode.
    assert result.sufficiency == [] and errors[Phase.sufficiency].kind == "malformed_reply"
    # One bad item of two: that verdict is missing, named, and the other one kept.
    assert [j.claim_id for j in result.faithfulness] == ["k2"]
    missing = errors[Phase.faithfulness]
    assert missing.kind == "missing_items" and "even after a re-ask" in missing.message and "k1" in missing.message
    assert result.completeness is not None and result.mode == "fast"


def test_json_in_a_fence_is_read_and_the_repair_recorded(judge):
    judge.responder = lambda body: Reply.of("Here it is:\n```json\n" + json.dumps(auto_reply(body)) + "\n```")
    with settings.override(mode="fast"):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == 1 and not result.errors and result.failure_cell is not None
    assert [r.kind for r in result.repairs] == ["json_in_fence"]


def test_a_bad_decomposition_is_asked_again_once_then_recorded(judge):
    def bad(body: dict) -> dict:
        reply = auto_reply(body)
        reply["claims"][0]["source_sentence_ids"] = ["S9"]   # a sentence that does not exist
        return reply

    judge.responder = bad
    with settings.override(mode="fast"):
        failed = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
        assert judge.count == 2                            # the call and its one re-ask
        assert [e.phase for e in failed.errors] == [Phase.decompose] and failed.failure_cell is None
        assert failed.status.quality_gate.value == "indeterminate" and failed.mode == "fast"
        answers = iter([bad, auto_reply])
        judge.responder = lambda body: next(answers)(body)
        fixed = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == 4 and not fixed.errors and fixed.failure_cell is not None


def _eval(path: Path, *args: str):
    return runner.invoke(app, ["eval", str(path), "--backend", "openai", *args])


def test_fast_on_the_offline_judge_says_it_runs_full_and_compares_as_full(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "query": f"{QUERY} ({i})", "context": CONTEXT,
                                        "response": RESPONSE}) + "\n" for i in range(2)), encoding="utf-8")
    full = runner.invoke(app, ["eval", str(path), "--backend", "local", "--run-name", "full"])
    assert full.exit_code == 0 and "mode fast" not in full.stderr
    fast = runner.invoke(app, ["eval", str(path), "--backend", "local", "--mode", "fast", "--run-name", "fast",
                               "--rejudge"])
    assert fast.exit_code == 0, fast.output
    (note,) = [line for line in fast.stderr.splitlines() if line.startswith("note: mode fast")]
    assert "offline judge (backend local)" in note and "judged in full mode" in note
    # Both runs were judged in full mode: docs/compare.md refuses runs *judged* in different modes only.
    compared = runner.invoke(app, ["compare", "full", "fast", "--json"])
    assert compared.exit_code == 0, compared.output
    data = json.loads(compared.stdout)
    assert (data["modes_a"], data["modes_b"], data["mixed_modes"]) == (["full"], ["full"], False)
    with settings.override(mode="fast"):   # VERALITH_MODE=fast says the same
        resumed = runner.invoke(app, ["eval", str(path), "--backend", "local", "--rejudge", "--no-persist"])
    assert resumed.exit_code == 0 and "note: mode fast" in resumed.stderr


def test_compare_refuses_to_mix_modes_unless_told_and_then_says_so(judge, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "query": f"{QUERY} ({i})", "context": CONTEXT,
                                        "response": RESPONSE}) + "\n" for i in range(3)), encoding="utf-8")
    assert _eval(path, "--run-name", "full").exit_code == 0
    before = judge.count
    # Not "unchanged": the stored results were judged in the other mode.
    second = _eval(path, "--mode", "fast", "--run-name", "fast")
    assert second.exit_code == 0, second.output
    assert judge.count - before == 3
    refused = runner.invoke(app, ["compare", "full", "fast"])
    assert refused.exit_code == 2
    assert "different modes (A: full, B: fast" in refused.output and "--allow-mixed-modes" in refused.output
    allowed = runner.invoke(app, ["compare", "full", "fast", "--allow-mixed-modes"])
    assert allowed.exit_code == 0 and "modes differ" in allowed.output
    data = json.loads(runner.invoke(app, ["compare", "full", "fast", "--allow-mixed-modes", "--json"]).output)
    assert data["mixed_modes"] is True and (data["modes_a"], data["modes_b"]) == (["full"], ["fast"])
    markdown = runner.invoke(app, ["compare", "full", "fast", "--allow-mixed-modes", "--format", "markdown"]).output
    assert "**Note:** modes differ" in markdown
    again = _eval(path, "--mode", "fast", "--run-name", "fast-again")
    assert again.exit_code == 0 and judge.count - before == 3     # same mode: unchanged, not judged again
    assert runner.invoke(app, ["compare", "fast", "fast-again"]).exit_code == 0


def test_inspect_and_the_web_page_show_the_mode(judge, tmp_path):
    from starlette.testclient import TestClient

    from veralith.store import store_url
    from veralith.web import create_app

    with settings.override(mode="fast"):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    shown = runner.invoke(app, ["inspect", str(result.trace_id)])
    assert shown.exit_code == 0 and "mode fast: one call decomposed and judged at once" in " ".join(shown.output.split())
    page = TestClient(create_app(store_url()), base_url="http://127.0.0.1").get(f"/traces/{result.trace_id}")
    assert page.status_code == 200
    assert "<dt>mode</dt><dd>fast (one call decomposed and judged at once, for screening)</dd>" in page.text


@pytest.mark.parametrize("suite", ["golden", "held_out"])
def test_with_the_same_labels_the_fast_mode_gives_every_golden_cell_and_gate(suite):
    """The oracle's labels as one fast reply must give what they give as five calls: every expected cell,
    gate and reason (test_golden pins the full mode to the same expectations)."""
    traces = TRACES if suite == "golden" else HELD_OUT
    wrong = []
    for trace in traces:
        client = fast_oracle_client(trace)
        with settings.override(mode="fast"):
            result = veralith.evaluate(trace["query"], trace["context"], trace["response"], persist=False,
                                       client=client)
        got = (result.failure_cell.value if result.failure_cell else None, result.status.quality_gate.value,
               result.status.reason)
        want = (trace["expected"]["cell"], trace["expected"]["gate"], trace["expected"]["reason"])
        assert [t for t, _ in client.history] == ["fast"] and result.mode == "fast"
        if got != want or result.errors:
            wrong.append((trace["id"], want, got, [e.message for e in result.errors]))
    assert not wrong, wrong


def test_a_copied_history_keeps_the_mode(store, judge, tmp_path):
    from veralith.store import open_store
    from veralith.work.migrate import copy as copy_history

    with settings.override(mode="fast"):
        fast = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    full = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    report = copy_history(store, target)
    assert report.traces == 2 and not report.mismatches
    assert target.read(ops.load_result, fast.trace_id) == store.read(ops.load_result, fast.trace_id)
    assert [target.read(ops.load_result, r.trace_id).mode for r in (fast, full)] == ["fast", "full"]
