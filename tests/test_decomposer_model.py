"""VERALITH_DECOMPOSER_MODEL: the two decomposition calls go to their own model, and every figure
(requests, cache keys, usage, cost, the budget guard, the dry run) says which model did what."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from typer.testing import CliRunner

import veralith
from veralith.cli import app
from veralith.config import ConfigError, settings
from veralith.observability.cost import CostWarning, get_tracker
from veralith.observability.pricing import price_usd
from veralith.pipeline.budget import BudgetExceeded, enforce_budget, estimate_trace

QUERY = "When was the Eiffel Tower finished, and how tall is it?"
CONTEXT = ["The Eiffel Tower was completed in 1889.", "It is 330 metres tall."]
RESPONSE = "The Eiffel Tower was finished in 1889. It is 330 metres tall. It is in Paris."
DECOMPOSITION = {"questions", "claims"}
JUDGES = {"sufficiency", "faithfulness", "completeness"}


def _judge(server, **extra):
    values = {"backend": "openai", "base_url": server.base_url, "api_key": "test", "judge_model": "gpt-4o",
              "max_retries": 0, **extra}
    return settings.override(**values)


def _models_by_task(server, since: int = 0) -> dict[str, set[str]]:
    from fake_openai_server import task_of

    seen: dict[str, set[str]] = {}
    for body in server.requests[since:]:
        seen.setdefault(task_of(body), set()).add(body["model"])
    return seen


def _evaluate(server, **extra):
    before = server.count
    with _judge(server, **extra):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    return result, _models_by_task(server, before)


def test_decomposition_is_sent_to_the_decomposer_model_and_judging_to_the_judge_model(openai_server):
    _, alone = _evaluate(openai_server, cache=False)
    assert set(alone) == DECOMPOSITION | JUDGES and all(m == {"gpt-4o"} for m in alone.values())
    _, split = _evaluate(openai_server, cache=False, decomposer_model="gpt-4o-mini")
    assert set(split) == DECOMPOSITION | JUDGES
    assert {task: models for task, models in split.items() if task in DECOMPOSITION} == {
        "questions": {"gpt-4o-mini"}, "claims": {"gpt-4o-mini"}}
    assert all(split[task] == {"gpt-4o"} for task in JUDGES)


def test_results_are_identical_in_form_with_a_decomposer_model(openai_server):
    one, _ = _evaluate(openai_server, cache=False)
    two, _ = _evaluate(openai_server, cache=False, decomposer_model="gpt-4o-mini")
    assert two.diagnosis is not None and one.diagnosis is not None
    assert two.diagnosis.failure_cell == one.diagnosis.failure_cell is not None
    assert two.status.quality_gate == one.status.quality_gate
    varying = {"latency_ms", "usage"}   # timings, and the price of the decomposition share
    assert two.model_dump(mode="json", exclude=varying) == one.model_dump(mode="json", exclude=varying)
    assert set(two.usage.model_dump()) == set(one.usage.model_dump())
    assert two.judge_model == "gpt-4o"   # results name the judge model, as before
    assert (two.usage.calls, two.usage.input_tokens, two.usage.output_tokens) == (
        one.usage.calls, one.usage.input_tokens, one.usage.output_tokens)


def test_each_call_is_priced_at_its_own_models_price_and_the_cost_per_trace_falls(openai_server):
    tracker = get_tracker()
    tracker.reset()
    baseline, _ = _evaluate(openai_server, cache=False)
    single = tracker.by_model()
    tracker.reset()
    cheaper, _ = _evaluate(openai_server, cache=False, decomposer_model="gpt-4o-mini")
    split = tracker.by_model()
    tracker.reset()
    assert set(single) == {"gpt-4o"} and set(split) == {"gpt-4o", "gpt-4o-mini"}
    decomposer, judges = split["gpt-4o-mini"], split["gpt-4o"]
    assert decomposer.calls == 2 and judges.calls == baseline.usage.calls - 2

    def usd(model: str, used) -> float:
        value = price_usd(model, used.input_tokens, used.cached_input_tokens, used.output_tokens)
        assert value is not None
        return value

    assert decomposer.usd == pytest.approx(usd("gpt-4o-mini", decomposer))
    assert judges.usd == pytest.approx(usd("gpt-4o", judges))
    assert cheaper.usage.usd == pytest.approx(decomposer.usd + judges.usd)
    # The same tokens as the baseline: the decomposition share alone is repriced.
    saving = usd("gpt-4o", decomposer) - usd("gpt-4o-mini", decomposer)
    assert saving > 0
    assert cheaper.usage.usd == pytest.approx(baseline.usage.usd - saving)


def test_changing_only_the_decomposer_model_asks_only_decomposition_again(openai_server):
    _evaluate(openai_server, cache=True, decomposer_model="gpt-4o-mini")
    again, _ = _evaluate(openai_server, cache=True, decomposer_model="gpt-4o-mini")
    assert again.usage.calls == 0 and again.usage.cache_hits == 5
    changed, asked = _evaluate(openai_server, cache=True)   # the decomposer is the judge model again
    assert asked == {"questions": {"gpt-4o"}, "claims": {"gpt-4o"}}
    assert changed.usage.calls == 2 and changed.usage.cache_hits == 3
    judge_changed, asked = _evaluate(openai_server, cache=True, judge_model="gpt-4.1",
                                     decomposer_model="gpt-4o-mini")
    assert asked == {task: {"gpt-4.1"} for task in JUDGES}   # the decomposition replies are still cached
    assert judge_changed.usage.cache_hits == 2


def _estimates(**models):
    with settings.override(backend="openai", api_key="test", judge_model="gpt-4o", **models):
        return estimate_trace(QUERY, CONTEXT, RESPONSE)


def test_the_estimate_prices_each_models_share_at_its_own_price():
    single = _estimates()
    split = _estimates(decomposer_model="gpt-4o-mini")
    assert [m.model for m in single.by_model] == ["gpt-4o"]
    assert [(m.model, m.calls) for m in split.by_model] == [("gpt-4o-mini", 2), ("gpt-4o", single.calls - 2)]
    assert (split.calls, split.input_tokens, split.output_tokens) == (
        single.calls, single.input_tokens, single.output_tokens)
    for part in split.by_model:
        assert part.usd == pytest.approx(price_usd(part.model, part.input_tokens, 0, part.output_tokens))
    assert split.usd == pytest.approx(sum(m.usd for m in split.by_model))
    decomposition = split.by_model[0]
    saving = (price_usd("gpt-4o", decomposition.input_tokens, 0, decomposition.output_tokens)
              - decomposition.usd)
    assert split.usd == pytest.approx(single.usd - saving) and saving > 0
    assert split.decomposer_model == "gpt-4o-mini" and single.decomposer_model == "gpt-4o"


def test_the_budget_guard_uses_the_decomposer_models_price():
    single = _estimates().usd
    split = _estimates(decomposer_model="gpt-4o-mini").usd
    budget = (single + split) / 2
    with settings.override(backend="openai", api_key="test", judge_model="gpt-4o"):
        with pytest.raises(BudgetExceeded):
            enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=budget)
        with settings.override(decomposer_model="gpt-4o-mini"):
            assert enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=budget).usd == pytest.approx(split)
        with settings.override(decomposer_model="my-small-llama"), warnings.catch_warnings():
            warnings.simplefilter("ignore", CostWarning)
            with pytest.raises(ConfigError, match="decomposer model 'my-small-llama'"):
                enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=budget)


def _row(output: str, label: str) -> list[str]:
    line = next(line for line in output.splitlines() if label in line)
    return [cell.strip() for cell in re.split(r"[│|]", line) if cell.strip()]


def test_the_dry_run_shows_both_models_and_their_costs(tmp_path, openai_server, monkeypatch):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"id": "t1", "query": QUERY, "context": CONTEXT, "response": RESPONSE}) + "\n",
                    encoding="utf-8")
    env = {"VERALITH_BASE_URL": openai_server.base_url, "COLUMNS": "200"}
    args = ["eval", str(path), "--dry-run", "--backend", "openai", "--model", "gpt-4o"]
    alone = CliRunner().invoke(app, args, env=env)
    monkeypatch.setenv("VERALITH_DECOMPOSER_MODEL", "gpt-4o-mini")
    settings.reload()
    split = CliRunner().invoke(app, args, env=env)
    monkeypatch.delenv("VERALITH_DECOMPOSER_MODEL")
    settings.reload()
    assert alone.exit_code == 0 == split.exit_code, alone.output + split.output
    assert "decomposer (" not in alone.stdout and "decomposer model" not in alone.stdout
    estimate = _estimates(decomposer_model="gpt-4o-mini")
    rows = (("decomposer (gpt-4o-mini)", estimate.by_model[0]), ("judges (gpt-4o)", estimate.by_model[1]))
    for label, part in rows:
        assert _row(split.stdout, label)[1:] == [str(part.calls), f"{part.input_tokens:,}",
                                                 f"{part.output_tokens:,}", f"${part.usd:.6f}"]
    assert _row(split.stdout, "total (1 traces)")[4] == f"${estimate.usd:.6f}"
    assert _row(alone.stdout, "total (1 traces)")[4] == f"${_estimates().usd:.6f}"
    assert "judge model gpt-4o, decomposer model gpt-4o-mini" in " ".join(split.stdout.split())
    assert openai_server.count == 0


def test_a_decomposer_reply_never_names_the_judge_model(openai_server):
    """With a server of one's own and no judge model set, results are labelled with the model the
    judge replies name; a trace that makes only a decomposition call must not take the decomposer's."""
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test", cache=False,
                           decomposer_model="small-extractor"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        result = veralith.evaluate(QUERY, [], "", persist=False)   # no context, no response: questions only
    assert _models_by_task(openai_server) == {"questions": {"small-extractor"}}
    assert result.judge_model == settings.judge_model == "gpt-4o"
