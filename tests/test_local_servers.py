"""Local model servers as shipped: each habit of tests/fake_openai_server.py, through the real SDK and
`veralith eval examples/traces.jsonl` (12 traces), must still classify every trace."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fake_openai_server import Reply, auto_reply, task_of
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.models import EvaluationResult

pytest.importorskip("veralith.store.repository")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "traces.jsonl"
N_EXAMPLES = sum(1 for line in EXAMPLES.read_text().splitlines() if line.strip())


@pytest.fixture
def local_env(openai_server, monkeypatch):
    for name, value in {"BACKEND": "openai", "BASE_URL": openai_server.base_url, "JUDGE_MODEL": "local-model",
                        "MAX_RETRIES": "1", "TIMEOUT_S": "20", "PRICING": '{"*": {"input": 0, "output": 0}}'}.items():
        monkeypatch.setenv(f"VERALITH_{name}", value)
    settings.reload()
    return openai_server


TWO_CLAIMS = ("How tall is the tower, and when was it built?",
              ["The tower is 330 metres tall.", "It was finished in 1889."])


def _k2_never_judged(*, k1_unsupported: bool):
    """A responder: k2's faithfulness label is invalid in every reply; k1 is (un)supported, and with
    k1 unsupported k2 only supports the answer (k1 answers the question)."""
    def responder(body):
        reply = auto_reply(body)
        if task_of(body) == "faithfulness":
            reply["items"][-1]["relation"] = "probably"
            if k1_unsupported:
                reply["items"][0].update(relation="unsupported")   # its quote grounds nothing then
        if task_of(body) == "completeness" and k1_unsupported:
            reply["claims"][-1]["role"] = "supports"
        return reply
    return responder


def _eval(tmp_path: Path) -> tuple[object, list[EvaluationResult]]:
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["eval", str(EXAMPLES), "-o", str(out)])
    lines = out.read_text().splitlines() if out.exists() else []
    return result, [EvaluationResult.model_validate_json(line) for line in lines]


@pytest.mark.parametrize("habit", ["json_schema_500", "no_grammar", "drop_system", "prose", "enum_case", "id_case",
                                   "bad_item", "slow_logprobs"])
def test_every_example_is_classified_against_each_habit(local_env, tmp_path, habit, caplog):
    local_env.habits = {habit}
    local_env.slow_logprobs_s = 0.2
    caplog.set_level(logging.INFO, logger="veralith")
    result, results = _eval(tmp_path)
    assert result.exit_code == 0, result.output
    assert len(results) == N_EXAMPLES == 12
    assert all(r.failure_cell is not None and not r.errors for r in results), [
        (r.query, [e.message for e in r.errors]) for r in results if r.failure_cell is None or r.errors]
    kinds = {r.kind for res in results for r in res.repairs}
    requests = local_env.requests
    probes = local_env.probes
    assert all(p.get("max_tokens", 99) <= 32 for p in probes)   # learning never waits for a long generation
    if habit == "json_schema_500":
        # learnt by the probes before the first judge call (llama-cpp-python: json_object + schema constrains)
        assert not any((b.get("response_format") or {}).get("type") == "json_schema" for b in requests)
        assert all(b["response_format"]["type"] == "json_object" and "schema" in b["response_format"]
                   for b in requests)
        assert all('"claim_id"' not in b["messages"][0]["content"] for b in requests)   # nothing in the prompt
        assert caplog.text.count("sent as json_object_schema") == 1
    if habit == "no_grammar":
        assert all(b["response_format"] == {"type": "json_object"} for b in requests)
        assert caplog.text.count("constrains no reply with a schema") == 1
    if habit == "drop_system":
        # learnt from two one-token probes, before any judge call: no judge call went out with a system message
        assert not any(any(m["role"] == "system" for m in b["messages"]) for b in requests)
        assert [p["max_tokens"] for p in probes[:2]] == [1, 1]
        assert caplog.text.count("drops the system message") == 1
    if habit == "prose":
        assert kinds == {"json_in_fence"}
    if habit == "enum_case":
        assert kinds == {"enum_value"}
    if habit == "id_case":
        assert kinds == {"id_case"}
    if habit == "bad_item":
        reasks = [b for b in requests if any(m["role"] == "assistant" for m in b["messages"])]
        assert reasks, "the bad items were asked again"
        for body in reasks:   # only the bad item, by its id
            assert body["messages"][-1]["content"].count("\n- ") == 1
        assert sum(len(r.faithfulness) for r in results) == sum(len(r.claims) for r in results)   # none lost
    if habit == "slow_logprobs":
        # learnt by four 16-token probes before the first judge call: no judge call asks for them
        assert caplog.text.count("slower per output token with log-probabilities") == 1
        assert [p.get("logprobs", False) for p in probes if p.get("max_tokens") == 16] == [False, True, False, True]
        assert not any("logprobs" in b for b in requests)


def test_a_persistent_bad_item_loses_only_itself_and_an_ungrounded_claim_still_decides(local_env):
    from veralith.pipeline.evaluate import evaluate

    local_env.responder = _k2_never_judged(k1_unsupported=True)
    result = evaluate(*TWO_CLAIMS, "The tower is 300 metres tall. It was finished in 1889.", persist=False)
    assert [j.claim_id for j in result.faithfulness] == ["k1"]   # k2 has no verdict; k1 kept its own
    (error,) = [e for e in result.errors if e.phase.value == "faithfulness"]
    assert error.kind == "missing_items" and "k2" in error.message and "k1" not in error.message
    # The only answer (k1) is ungrounded whatever k2 would have been: the column is ungrounded and the
    # question is not covered, so the cell and the gate are decided without k2.
    assert result.failure_cell is not None and result.failure_cell.value == "incomplete_ungrounded"
    assert result.status.quality_gate.value == "fail"
    assert result.diagnosis.faithfulness_fraction is None   # 0 or 1 of 2, unknown


def test_a_missing_verdict_that_decides_the_cell_leaves_it_indeterminate_naming_it(local_env):
    from veralith.pipeline.evaluate import evaluate

    local_env.responder = _k2_never_judged(k1_unsupported=False)
    result = evaluate(*TWO_CLAIMS, "The tower is 330 metres tall. It was finished in 1889.", persist=False)
    assert [j.claim_id for j in result.faithfulness] == ["k1"]
    assert result.failure_cell is None and result.status.quality_gate.value == "indeterminate"
    assert result.status.reason == "missing_verdicts" and "k2 (faithfulness)" in result.status.summary


def test_a_forced_label_is_low_confidence_and_flags_the_trace_for_review(local_env):
    """The real-shaped case: a grammar forced "supported" that the model gave 0.04 ("unsupported" is not
    among its top 5, which are words that begin no label). Confidence <= 0.1 and needs_review."""
    from veralith.pipeline.evaluate import evaluate

    forced = {"supported": 0.04, " The": 0.41, "\n": 0.22, " I": 0.14, "Based": 0.09}

    def responder(body):
        if task_of(body) == "faithfulness":
            return Reply.of(auto_reply(body), label_probs=[forced])
        return None
    local_env.responder = responder
    local_env.logprobs = True   # every reply carries log-probabilities (else auto mode stops asking)
    result = evaluate("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.",
                      persist=False)
    (judgment,) = result.faithfulness
    assert judgment.verdict.value == "Y" and judgment.confidence is not None and judgment.confidence <= 0.1
    assert result.needs_review and result.diagnosis.review_ids == ["k1"]


def test_logprobs_off_and_max_tokens_are_sent_as_configured(local_env):
    from veralith.pipeline.evaluate import evaluate

    with settings.override(logprobs="off"):
        evaluate("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.",
                 persist=False)
    assert not any("logprobs" in b for b in local_env.requests)
    caps = {task_of(b): b["max_tokens"] for b in local_env.requests}
    assert set(caps) == {"questions", "claims", "sufficiency", "faithfulness", "completeness"}
    assert all(256 < cap < 2000 for cap in caps.values()), caps


def test_a_server_that_returns_no_logprobs_is_not_asked_again(local_env):
    from veralith.pipeline.evaluate import evaluate

    for query in ("How tall is the tower?", "How old is the tower?"):
        evaluate(query, ["The tower is 330 metres tall and 135 years old."], "It is 330 metres tall.",
                 persist=False)
    # learnt by the probe that asked for them, before the first judge call
    assert any(p.get("logprobs") for p in local_env.probes)
    assert not any("logprobs" in b for b in local_env.requests)
    # the extraction calls never ask: they have no labels
    assert not any("logprobs" in b for b in local_env.requests if task_of(b) in ("questions", "claims"))


def _logprobs_kept(notes: Path) -> tuple[object, object]:
    (entry,) = json.loads(notes.read_text()).values()
    return entry["habits"]["logprobs"], entry["habits"]["logprobs_decided"]


def test_logprobs_that_cost_little_are_asked_for_from_the_first_judge_call(local_env, tmp_path):
    from veralith.pipeline.evaluate import evaluate

    local_env.logprobs = True   # returned when asked, at no cost in time
    evaluate("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.",
             persist=False)
    labelled = [b for b in local_env.requests if task_of(b) in ("sufficiency", "faithfulness", "completeness")]
    assert labelled and all(b.get("logprobs") is True and b.get("top_logprobs") == 5 for b in labelled)
    assert sum(1 for p in local_env.probes if p.get("logprobs")) == 2
    assert _logprobs_kept(tmp_path / "servers.json") == (True, True)


def test_slow_logprobs_are_learnt_by_probes_kept_and_not_probed_again(local_env, tmp_path):
    from veralith.llm.server import forget_servers
    from veralith.pipeline.evaluate import evaluate

    local_env.habits = {"slow_logprobs"}
    local_env.slow_logprobs_s = 0.3   # 15 ms per output token more (20 tokens per reply)
    args = ("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.")
    first = evaluate(*args, persist=False)
    assert not any("logprobs" in b for b in local_env.requests)
    assert all(j.confidence is None for j in first.faithfulness)   # no log-probabilities: no confidence
    assert _logprobs_kept(tmp_path / "servers.json") == (False, True)
    probed = len(local_env.probes)
    forget_servers()   # another process: what was learnt is read back, nothing probed again
    evaluate(*args, persist=False)
    assert len(local_env.probes) == probed and not any("logprobs" in b for b in local_env.requests)


def test_logprobs_probes_too_short_to_time_leave_it_to_the_judge_calls(local_env, tmp_path):
    from veralith.pipeline.evaluate import evaluate

    local_env.logprobs = True
    local_env.usage = {**local_env.usage, "completion_tokens": 2}   # every reply is 2 tokens: not timed
    evaluate("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.",
             persist=False)
    labelled = [b for b in local_env.requests if task_of(b) in ("sufficiency", "faithfulness", "completeness")]
    assert labelled[0].get("logprobs") is True   # asked: the judge calls' timings decide
    assert _logprobs_kept(tmp_path / "servers.json")[1] is False


@pytest.mark.parametrize(("with_s", "without_s", "slow"), [
    (0.25, 0.04, True),      # llama-cpp-python on a CPU: 250 ms against 40 ms per token
    (0.008, 0.0025, True),   # 3.2x and 5.5 ms more
    (0.003, 0.001, False),   # 3x but 2 ms: a fast server's noise
    (0.055, 0.04, False),    # 15 ms more but only 1.4x
])
def test_the_logprobs_rule_wants_both_a_ratio_and_a_difference(with_s, without_s, slow):
    from veralith.llm.learn import logprobs_too_slow

    assert logprobs_too_slow(with_s, without_s) is slow


def test_structured_json_object_is_used_from_the_start_when_set(local_env):
    from veralith.pipeline.evaluate import evaluate

    with settings.override(structured="json_object", system_prompt="user"):
        result = evaluate("How tall is the tower?", ["The tower is 330 metres tall."],
                          "The tower is 330 metres tall.", persist=False)
    assert result.failure_cell is not None
    assert {json.dumps(b["response_format"]) for b in local_env.requests} == {'{"type": "json_object"}'}
    assert not any(m["role"] == "system" for b in local_env.requests for m in b["messages"])


def test_the_local_server_benchmark_runs_against_the_fake_server(tmp_path):
    """The Must-hold command of docs/backends.md, against the scripted server with llama-cpp-python's
    habits (json_schema refused with a 500, the system message dropped) instead of the real one."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(tmp_path / "v.db"), VERALITH_SERVER_NOTES=str(tmp_path / "servers.json"))
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_server.py"), "--fake", "json_schema_500",
                           "--fake", "drop_system", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert len(rows) == N_EXAMPLES and all(r["cell"] and r["calls"] >= 3 and r["input_tokens"] > 0 for r in rows)
    assert f"{N_EXAMPLES} traces, {N_EXAMPLES} classified, 0 with judge errors" in done.stdout
    assert "malformed replies: 0; judge calls timed out: 0" in done.stdout and "whole run: " in done.stdout
    assert "requests re-sent after a timeout: 0" in done.stdout and "load average (1, 5, 15 min)" in done.stdout
    table = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()
             if line.split() and line.split()[0] in ("questions", "claims", "sufficiency", "faithfulness",
                                                     "completeness", "all")}
    assert set(table) == {"questions", "claims", "sufficiency", "faithfulness", "completeness", "all"}
    assert int(table["all"][0]) == sum(r["calls"] for r in rows)   # every request counted, per task
    assert int(table["all"][1]) == sum(r["input_tokens"] for r in rows)
    assert "sent as json_object_schema" in done.stderr and "drops the system message" in done.stderr
    assert not (tmp_path / "v.db").exists()   # nothing stored
    assert json.loads((tmp_path / "servers.json").read_text())   # what was learnt is kept for the next run


def test_the_benchmarks_tally_counts_timeouts_and_requests_resent_after_one():
    import importlib.util
    import logging

    spec = importlib.util.spec_from_file_location("local_server", REPO / "benchmarks" / "local_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tally = module.Tally()
    logger = logging.getLogger("test.tally")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(tally)
    try:
        logger.debug("faithfulness: attempt 1 failed: APITimeoutError: Request timed out.")
        logger.debug("faithfulness: attempt 2 re-sent after a timeout")
        logger.debug("%s", json.dumps({"task": "faithfulness", "seconds": 4.0, "prompt_tokens": 900,
                                       "output_tokens": 40}))
        logger.debug("claims: attempt 1 failed: InternalServerError: HTTP 500")
    finally:
        logger.removeHandler(tally)
    faith = tally.tasks["faithfulness"]
    assert (faith["requests"], faith["timeouts"], faith["resent"], faith["output_tokens"]) == (2, 1, 1, 40)
    assert (tally.tasks["claims"]["requests"], tally.tasks["claims"]["timeouts"]) == (1, 0)
    assert "requests re-sent after a timeout: 1" in tally.table()


def test_the_benchmark_asks_the_model_the_server_lists_when_none_is_named(openai_server):
    # llama-cpp-python's server echoes whatever model is asked, so asking the default would label its
    # verdicts with a hosted model's name; the one model the server lists is asked instead.
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_server", REPO / "benchmarks" / "local_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.served_model(openai_server.base_url) == "fake-model"
    assert module.served_model("http://127.0.0.1:9/v1") is None   # nothing listening: the default stays
