"""Claim ids are k1, k2, ... (schema 1.2): they never read like the default chunk ids c0, c1, ...

Older results keep reading: a 1.0/1.1 result (a JSON export or a stored row) is renumbered on read,
and migration 0005 renumbers stored rows, with every reference to a claim following it.
"""

from __future__ import annotations

import json
import shutil

import veralith
from veralith.models import SCHEMA_VERSION, EvaluationResult
from veralith.store import migrate, repository
from veralith.store.db import connect

CONTEXT = ["The Skylark kettle costs 189 euros.", "It holds 1.7 litres."]
RESPONSE = "The Skylark kettle costs 189 euros. It holds 1.7 litres."


def test_a_fresh_evaluation_numbers_claims_k1_and_keeps_chunk_ids():
    # The default backend is the offline one.
    result = veralith.evaluate("How much is the Skylark kettle and how much does it hold?", CONTEXT, RESPONSE,
                               persist=False)
    assert result.schema_version == SCHEMA_VERSION == "1.5"
    assert [c.id for c in result.claims] == ["k1", "k2"]
    assert [c.id for c in result.context] == ["c0", "c1"]
    referenced = {j.claim_id for j in result.faithfulness}
    assert referenced == {"k1", "k2"}
    for ids in result.completeness.mappings.values():
        assert set(ids) <= {"k1", "k2"}
    for j in result.faithfulness:
        assert set(j.grounding_chunk_ids) <= {"c0", "c1"}


def _old_result(version: str) -> dict:
    return {
        "schema_version": version, "query": "Who and when?", "response": "Ann did. In 1990. It is blue.",
        "context": [{"id": "c0", "text": "Ann did it in 1990."}],
        "sub_questions": [{"id": "q1", "text": "Who?"}, {"id": "q2", "text": "When?"}],
        "claims": [{"id": "c1", "text": "Ann did."}, {"id": "c2", "text": "In 1990."}, {"id": "c3", "text": "Blue."}],
        "faithfulness": [
            {"claim_id": "c1", "verdict": "Y", "relation": "supported", "reasoning": "r", "grounding_chunk_ids": ["c0"]},
            {"claim_id": "c2", "verdict": "Y", "relation": "supported", "reasoning": "r", "grounding_chunk_ids": ["c0"]},
            {"claim_id": "c3", "verdict": "N", "relation": "unsupported", "reasoning": "r"}],
        "completeness": {"mappings": {"q1": ["c1"], "q2": ["c2"]}, "supports": {"q1": ["c2"]},
                         "extra_claim_ids": ["c3"]},
        "status": {"execution": "success", "availability": "assessed", "quality_gate": "fail",
                   "reason": "extra_ungrounded", "summary": "s"},
        "backend": "openai", "judge_model": "m",
    }


def test_a_1_1_json_result_reads_back_with_renumbered_claims():
    result = EvaluationResult.model_validate(_old_result("1.1"))
    assert result.schema_version == SCHEMA_VERSION  # upgraded to the current shape
    assert [c.id for c in result.claims] == ["k1", "k2", "k3"]
    assert [j.claim_id for j in result.faithfulness] == ["k1", "k2", "k3"]
    assert result.faithfulness[0].grounding_chunk_ids == ["c0"]
    assert result.completeness.mappings == {"q1": ["k1"], "q2": ["k2"]}
    assert result.completeness.supports == {"q1": ["k2"]}
    assert result.completeness.extra_claim_ids == ["k3"]
    # Reading the upgraded result again changes nothing.
    assert EvaluationResult.model_validate(json.loads(result.model_dump_json())) == result


def test_a_1_2_result_is_never_renumbered():
    data = _old_result("1.2")
    result = EvaluationResult.model_validate(data)
    assert [c.id for c in result.claims] == ["c1", "c2", "c3"]


def test_migration_0005_renumbers_stored_claims_and_every_reference(tmp_path):
    before = tmp_path / "mig"
    before.mkdir()
    for file in migrate.discover():
        if file.name < "0005":
            shutil.copy(migrate.MIGRATIONS_DIR / f"{file.name}.sql", before / f"{file.name}.sql")
    path = tmp_path / "v11.db"
    db = connect(path, migrate=False)
    migrate.apply_migrations(db, before)
    with db.conn:
        db.execute("INSERT INTO traces (id, created_at, updated_at, status, schema_version, failure_cell, quality_gate,"
                   " execution, availability, status_reason, status_summary, refusal, has_diagnosis,"
                   " sufficiency_level, sufficiency_fraction, faithfulness_fraction, threshold, threshold_source,"
                   " n_sub_questions, n_claims, n_uncovered_sub_questions, n_extra_claims, backend, judge_model,"
                   " calls, cache_hits, input_tokens, cached_input_tokens, output_tokens, latency_ms, prompt_versions, review_ids, query, response) VALUES (1, 't', 't', 'done', '1.1', 'extra_ungrounded', 'fail',"
                   " 'success', 'assessed', 'extra_ungrounded', 's', 0, 1, 'high', 1.0, 0.5, 0.5, 'fallback', 1, 2,"
                   " 0, 1, 'openai', 'm', 0, 0, 0, 0, 0, '{}', '{}',"
                   " '[\"c7\", \"q1\"]', 'Who?', 'Ann. Blue.')")
        db.execute("INSERT INTO context_chunks (trace_id, position, chunk_id, text) VALUES (1, 0, 'c7', 'Ann.')")
        db.execute("INSERT INTO sub_questions VALUES (1, 0, 'q1', 'Who?')")
        # Ids as a model might have chosen them: position, not the old number, decides the new id.
        db.execute("INSERT INTO claims VALUES (1, 0, 'c7', 'Ann.', 0, 4)")
        db.execute("INSERT INTO claims VALUES (1, 1, 'c9', 'Blue.', 5, 10)")
        db.execute("INSERT INTO faithfulness_judgments (trace_id, position, claim_id, verdict, relation, reasoning)"
                   " VALUES (1, 0, 'c7', 'Y', 'supported', 'r')")
        db.execute("INSERT INTO faithfulness_judgments (trace_id, position, claim_id, verdict, relation, reasoning)"
                   " VALUES (1, 1, 'c9', 'N', 'unsupported', 'r')")
        db.execute("INSERT INTO grounding VALUES (1, 0, 'supports', 0, 'c7', 'c7')")
        db.execute("INSERT INTO completeness (trace_id, reasoning, uncovered_sub_question_ids, supports)"
                   " VALUES (1, 'm', '[]', '{\"q1\": [\"c9\"]}')")
        db.execute("INSERT INTO completeness_mappings VALUES (1, 0, 0, 'q1', 'c7')")
        db.execute("INSERT INTO completeness_extras VALUES (1, 0, 'c9')")
    db.conn.close()

    result = repository.load_result(1, connect(path))   # connect applies 0005 and everything after it
    assert [c.id for c in result.claims] == ["k1", "k2"]
    assert [j.claim_id for j in result.faithfulness] == ["k1", "k2"]
    assert result.faithfulness[0].grounding_chunk_ids == ["c7"]     # the chunk keeps its id
    assert result.context[0].id == "c7"
    assert result.completeness.mappings == {"q1": ["k1"]}
    assert result.completeness.supports == {"q1": ["k2"]}
    assert result.completeness.extra_claim_ids == ["k2"]
    assert result.diagnosis.review_ids == ["k1", "q1"]
