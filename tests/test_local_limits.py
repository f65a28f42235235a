"""What the offline judge refuses, and that it refuses it at once: a trace too large for it
(`input_too_large`, limit VERALITH_LOCAL_MAX_CHARS) or not in English (`unsupported_language`) is
indeterminate with that reason; the checks it runs on long claims cost linear, not quadratic, time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import veralith
from veralith.config import ConfigError, settings
from veralith.llm.local import LocalClient, admit, contradiction
from veralith.llm.tasks import CLAIMS, ClaimsInput, Sentence
from veralith.models import Gate
from veralith.store import ops

CONTEXT = ["The Halvergate ferry crosses to Marrowby in 50 minutes. A return ticket costs 18 euros."]


def test_a_megabyte_response_is_refused_with_its_reason_within_ten_seconds(tmp_path):
    # In a child process with a deadline, so a judge that stalls fails the test instead of hanging it.
    script = textwrap.dedent("""
        import json, time, veralith
        sentence = "The Halvergate ferry to Marrowby leaves at 7:15 and costs {n} euros for {m} passengers. "
        response = "".join(sentence.format(n=i, m=i % 97) for i in range(12_000))[:1_000_000]
        started = time.perf_counter()
        result = veralith.evaluate("How much is the ferry?", ["The ferry costs 18 euros."], response,
                                   persist=False)
        print(json.dumps({"seconds": time.perf_counter() - started, "gate": result.status.quality_gate.value,
                          "reason": result.status.reason, "summary": result.status.summary,
                          "size": len(response)}))
    """)
    env = {"VERALITH_BACKEND": "local", "VERALITH_DB_PATH": str(tmp_path / "v.db"), "PATH": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["size"] == 1_000_000
    assert (report["gate"], report["reason"]) == ("indeterminate", "input_too_large")
    assert "VERALITH_LOCAL_MAX_CHARS" in report["summary"] and "\n" not in report["summary"]
    assert report["seconds"] < 10


def test_a_context_over_the_limit_is_refused_after_decomposition_with_the_same_reason():
    with settings.override(local_max_chars=2_000):
        result = veralith.evaluate("How much is a return ticket?", [CONTEXT[0] * 40], "It costs 18 euros.",
                                   persist=False)
    assert result.status.quality_gate is Gate.indeterminate
    assert result.status.reason == "input_too_large"
    assert {e.kind for e in result.errors} == {"input_too_large"}
    assert result.claims, "the response was decomposed; only the judges that read the context declined"


def test_the_limit_is_a_setting(monkeypatch):
    with settings.override(local_max_chars=60):
        result = veralith.evaluate("How much is a return ticket?", CONTEXT, "A return ticket costs 18 euros.",
                                   persist=False)
    assert result.status.reason == "input_too_large"
    assert veralith.evaluate("How much is a return ticket?", CONTEXT, "A return ticket costs 18 euros.",
                             persist=False).status.quality_gate is Gate.pass_
    monkeypatch.setenv("VERALITH_LOCAL_MAX_CHARS", "lots")
    with pytest.raises(ConfigError, match="VERALITH_LOCAL_MAX_CHARS"):
        settings.reload()
        _ = settings.local_max_chars


def test_a_refused_trace_is_stored_with_its_reason():
    with settings.override(local_max_chars=60):
        result = veralith.evaluate("How much is a return ticket?", CONTEXT, "A return ticket costs 18 euros.")
    from veralith.store import open_store

    stored = open_store().read(ops.load_result, result.trace_id)
    assert stored.status.reason == "input_too_large"
    assert stored == result


@pytest.mark.parametrize("query, context, response", [
    ("¿Cuánto cuesta un billete de ida y vuelta?", ["Un billete de ida y vuelta cuesta 18 euros y el ferry tarda "
                                                    "50 minutos."], "El billete de ida y vuelta cuesta 18 euros."),
    ("Wie viel kostet eine Rückfahrkarte?", ["Eine Rückfahrkarte kostet 18 Euro und die Fähre braucht 50 Minuten."],
     "Eine Rückfahrkarte kostet 18 Euro, und das ist nicht teuer."),
    ("Combien coûte un billet aller-retour ?", ["Un billet aller-retour coûte 18 euros et la traversée dure "
                                               "50 minutes."],
     "Le billet aller-retour coûte 18 euros, et il est valable dans les deux sens."),
    ("往返票多少钱？", ["往返票的价格是十八欧元，渡轮航行五十分钟。"], "往返票的价格是十八欧元。"),
])
def test_a_trace_not_in_english_is_indeterminate_with_its_reason(query, context, response):
    result = veralith.evaluate(query, context, response, persist=False)
    assert result.status.quality_gate is Gate.indeterminate
    assert result.status.reason == "unsupported_language"
    assert "English only" in result.status.summary
    assert not result.faithfulness and result.failure_cell is None


def test_english_context_in_another_language_is_not_judged_by_english_word_lists():
    result = veralith.evaluate("How much is a return ticket?",
                               ["Un billet aller-retour coûte 18 euros et la traversée dure 50 minutes. Les enfants "
                                "de moins de quatre ans voyagent gratuitement dans le bateau."],
                               "A return ticket costs 18 euros.", persist=False)
    assert result.status.reason == "unsupported_language"
    assert result.status.quality_gate is Gate.indeterminate


@pytest.mark.parametrize("text", [
    "Model | Weight | Power\nX200 | 12 kg | 300 W\nX300 | 14 kg | 450 W",       # a table: few words of any language
    "Where is the Tour de France route this year, and who designed Paseo de la Reforma?",   # names from elsewhere
    "luis fonsi - échame la culpa lyrics",                                     # a keyword query with a title
    "The 5 μm filter costs 40 euros.",                                         # a Greek letter in English text
])
def test_english_with_names_symbols_or_tables_is_judged(text):
    admit.check("claims", ClaimsInput(query="What is it?", response=text, sentences=[Sentence(id="S1", text=text)]))


def test_the_refusal_comes_from_the_backend_before_any_judging():
    client = LocalClient()
    text = "Le billet aller-retour coûte 18 euros et la traversée dure 50 minutes."
    from veralith.errors import JudgeCallError

    with pytest.raises(JudgeCallError) as caught:
        client.run(CLAIMS, ClaimsInput(query="Combien coûte le billet ?", response=text,
                                       sentences=[Sentence(id="S1", text=text)]))
    assert caught.value.kind == "unsupported_language"


def test_the_name_check_of_a_long_claim_costs_a_constant_number_of_full_coverage_sums(monkeypatch):
    # A claim naming hundreds of things against a sentence naming hundreds of others: each name is
    # tested alone, and the rest of the claim must not be re-summed for every one of them.
    calls = []
    real = contradiction._rest
    monkeypatch.setattr(contradiction, "_rest", lambda *a, **k: calls.append(1) or real(*a, **k))
    names = [f"Harbour{chr(65 + i % 26)}{chr(65 + i // 26 % 26)}" for i in range(400)]
    claim = "The ferry calls at " + ", ".join(names) + " every day at 7:15."
    source = "The ferry calls at " + ", ".join(n.replace("Harbour", "Quay") for n in names) + " every day at 7:15."
    result = veralith.evaluate("Where does the ferry call?", [source], claim, persist=False)
    assert result.faithfulness and not result.errors
    assert len(calls) <= 10
