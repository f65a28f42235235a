"""What the judge client learns about a server of one's own, through the real SDK against the fake
server: learnt once with tiny probes, kept across processes (veralith.llm.notes), learnt again when the
server changes; slots read where the server says them; deadlines and max_tokens that fit its speed and
replies (veralith.llm.pace); the schema narrowed to the call for a llama.cpp grammar (veralith.llm.grammar)."""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_openai_server import Reply

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm import pace
from veralith.llm.client import OpenAIClient, strict_schema
from veralith.llm.grammar import bounded, numbers_only_from, text_chars
from veralith.llm.notes import notes_path
from veralith.llm.server import Habits, forget_servers
from veralith.llm.tasks import (
    CLAIMS,
    FAITHFULNESS,
    QUESTIONS,
    ChunkIn,
    ClaimIn,
    ClaimsInput,
    FaithfulnessInput,
    QuestionsInput,
    Sentence,
)


def _payload(n: int = 1) -> FaithfulnessInput:
    return FaithfulnessInput(query="How tall is the tower?",
                             claims=[ClaimIn(id=f"k{i}", text=f"Claim {i}.") for i in range(1, n + 1)],
                             chunks=[ChunkIn(id="c0", text="The tower is 330 metres tall.", source=None)])


def _client(server, **kw) -> OpenAIClient:
    return OpenAIClient(base_url=server.base_url, api_key="test", model="fake-model", **kw)


def test_habits_are_learnt_once_by_probes_and_read_back_by_the_next_process(openai_server, caplog):
    openai_server.habits = {"json_schema_500", "drop_system"}   # llama-cpp-python's server with --chat_format gemma
    client = _client(openai_server)
    client.run(FAITHFULNESS, _payload())
    probes = len(openai_server.probes)
    assert probes >= 3 and all(p["max_tokens"] <= 32 for p in openai_server.probes)
    assert (client.habits.structured, client.habits.system) == ("json_object_schema", "user")
    kept = json.loads(notes_path().read_text())   # type: ignore[union-attr]
    assert [entry["habits"]["structured"] for entry in kept.values()] == ["json_object_schema"]

    forget_servers()   # what a new process knows
    caplog.set_level(logging.INFO, logger="veralith")
    again = _client(openai_server)
    again.run(FAITHFULNESS, _payload())
    assert len(openai_server.probes) == probes   # nothing probed again
    assert (again.habits.structured, again.habits.system) == ("json_object_schema", "user")
    assert "using what was learnt" in caplog.text
    (sent,) = [b for b in openai_server.requests[-1:]]
    assert sent["response_format"]["type"] == "json_object" and not any(m["role"] == "system" for m in sent["messages"])


def test_a_server_that_changed_is_learnt_again(openai_server):
    openai_server.habits = {"json_schema_500"}
    _client(openai_server).run(FAITHFULNESS, _payload())
    probes = len(openai_server.probes)
    openai_server.habits = set()            # a new build: json_schema works now ...
    openai_server.instance = "another-build"   # ... and its model list says it is another server
    forget_servers()
    client = _client(openai_server)
    client.run(FAITHFULNESS, _payload())
    assert len(openai_server.probes) > probes and client.habits.structured == "json_schema"


def test_notes_off_learns_in_every_process(openai_server):
    with settings.override(server_notes="off"):
        _client(openai_server).run(FAITHFULNESS, _payload())
        forget_servers()
        probes = len(openai_server.probes)
        _client(openai_server).run(FAITHFULNESS, _payload())
        assert notes_path() is None and len(openai_server.probes) == 2 * probes


def _most_in_flight(server, calls: int = 6) -> int:
    server.latency_s = 0.2
    client = _client(server)
    with ThreadPoolExecutor(calls) as pool:
        list(pool.map(lambda _: client.run(FAITHFULNESS, _payload()), range(calls)))
    return server.max_in_flight


def test_a_llama_cpp_server_is_given_the_slots_its_props_say(openai_server):
    openai_server.slots = 3
    assert _most_in_flight(openai_server) == 3


def test_server_concurrency_still_wins_over_what_the_server_says(openai_server, monkeypatch):
    openai_server.slots = 3
    monkeypatch.setenv("VERALITH_SERVER_CONCURRENCY", "2")   # the calls run on threads of their own
    settings.reload()
    assert _most_in_flight(openai_server) == 2


@pytest.mark.parametrize(("owned_by", "ollama", "slots"), [("vllm", None, 256), ("fake", "0.12.0", 1), ("fake", None, None)])
def test_vllm_and_ollama_are_known_by_what_they_answer(openai_server, owned_by, ollama, slots):
    openai_server.owned_by, openai_server.ollama_version = owned_by, ollama
    client = _client(openai_server)
    client.run(FAITHFULNESS, _payload())
    assert client.server.slot_count == slots


def test_a_timed_out_request_to_a_local_server_is_not_sent_again(openai_server):
    openai_server.enqueue(Reply.hang(3))
    client = _client(openai_server, timeout_s=0.5, max_retries=3)
    with pytest.raises(JudgeCallError) as info:
        client.run(FAITHFULNESS, _payload())
    assert info.value.kind == "timeout" and "not sent again" in info.value.message
    assert openai_server.count == 1


def test_a_local_servers_timeout_says_not_sent_again_whichever_timer_fires_first(openai_server):
    # Under load the SDK's own read timeout can fire before the whole-reply deadline: same rule, same words.
    import httpx
    import openai

    from veralith.llm.transport import _Attempts
    from veralith.usage import CallUsage

    client = _client(openai_server, timeout_s=0.5, max_retries=3)
    client.run(FAITHFULNESS, _payload())   # habits learnt
    attempt = _Attempts(client.transport, FAITHFULNESS, _payload(), {}, [], CallUsage(), 800)
    sdk_timeout = openai.APITimeoutError(request=httpx.Request("POST", openai_server.base_url))
    with pytest.raises(JudgeCallError) as info:
        attempt.failed(sdk_timeout, {"max_tokens": 800}, [{"role": "user", "content": "x"}])
    assert info.value.kind == "timeout" and "not sent again" in info.value.message
    assert info.value.attempts == 1


def test_a_local_servers_deadline_grows_with_its_measured_speed_unless_set():
    habits = Habits()
    # Nothing timed yet: long enough for a CPU server's first long call (it is not sent again if it times out).
    assert pace.deadline(habits, 60.0, adaptive=True, prompt_tokens=3000, max_tokens=800) == pace.UNMEASURED_S
    for prompt, out, seconds in ((300, 40, 5.0), (2500, 300, 40.0), (1200, 120, 17.0)):
        pace.note_speed(habits, prompt, out, seconds)
    a, b = pace.fit(habits.speed) or (0, 0)
    assert a >= 0 and b > 0
    slow = pace.deadline(habits, 60.0, adaptive=True, prompt_tokens=3000, max_tokens=800)
    assert slow > 2 * (b * 800)   # room for a reply as long as its cap, twice over
    assert pace.deadline(habits, 60.0, adaptive=False, prompt_tokens=3000, max_tokens=800) == 60.0


def test_a_timed_out_request_lengthens_the_next_deadline(openai_server):
    from veralith.llm import retry
    from veralith.llm.transport import _Attempts
    from veralith.usage import CallUsage

    client = _client(openai_server)   # the timeout not set: paced
    client.run(FAITHFULNESS, _payload())   # learnt; the fake's replies are fast, so the deadline is the configured one
    messages = [{"role": "user", "content": "x" * 3000}]
    before = client.transport._deadline(messages, {"max_tokens": 800})
    attempt = _Attempts(client.transport, FAITHFULNESS, _payload(), {}, [], CallUsage(), 800)
    with pytest.raises(JudgeCallError) as info:   # a local server's timeout: not sent again
        attempt.failed(retry.DeadlinePassed(before), {"max_tokens": 800}, messages)
    assert info.value.kind == "timeout"
    assert client.transport._deadline(messages, {"max_tokens": 800}) > 1.5 * before


def test_a_local_server_gets_the_longer_deadline_in_its_requests(openai_server):
    client = _client(openai_server)
    client.run(FAITHFULNESS, _payload())
    habits = client.server.habits("fake-model")
    habits.speed = [[1000.0, 100.0, 30.0], [2000.0, 300.0, 80.0]]   # a slow CPU server
    messages = [{"role": "user", "content": "x" * 3000}]
    assert client.transport._deadline(messages, {"max_tokens": 1000}) > 120
    fixed = _client(openai_server, timeout_s=60.0)   # set explicitly: kept as it is
    assert fixed.transport._deadline(messages, {"max_tokens": 1000}) == 60.0


def test_max_tokens_falls_to_what_the_servers_replies_needed(openai_server):
    openai_server.usage = {"prompt_tokens": None, "completion_tokens": 30, "cached_tokens": 0}
    client = _client(openai_server)
    for _ in range(pace.OUTPUTS_NEEDED + 1):
        client.run(FAITHFULNESS, _payload(3))
    caps = [b["max_tokens"] for b in openai_server.requests]
    assert caps[0] == caps[pace.OUTPUTS_NEEDED - 1] and pace.CAP_FLOOR <= caps[-1] < caps[0]


def test_a_reply_cut_at_its_cap_lets_the_cap_grow_back():
    habits = Habits()
    for _ in range(pace.OUTPUTS_NEEDED):
        pace.note_output(habits, "faithfulness", 100, 500, cut_off=False)
    low = pace.max_tokens(habits, "faithfulness", 500, 1256)
    pace.note_output(habits, "faithfulness", low, 500, cut_off=True)
    assert pace.max_tokens(habits, "faithfulness", 500, 1256) > low


def test_a_llama_cpp_grammar_gets_the_schema_narrowed_to_the_call():
    faith = bounded(FAITHFULNESS, _payload(2), strict_schema(FAITHFULNESS))
    items = faith["properties"]["items"]
    assert items["minItems"] == items["maxItems"] == 2
    item = faith["$defs"]["FaithfulnessItem"]["properties"]
    assert item["claim_id"]["enum"] == ["k1", "k2"] and item["contradicting_chunk_ids"]["items"]["enum"] == ["c0"]
    questions = bounded(QUESTIONS, QuestionsInput(query="Who built it and when?"), strict_schema(QUESTIONS))
    listed = questions["properties"]["sub_questions"]
    assert listed["minItems"] == 1 and listed["maxItems"] == 3
    assert questions["$defs"]["QuestionItem"]["properties"]["id"]["enum"] == ["q1", "q2", "q3"]
    said = ClaimsInput(query="q", response="It is tall.", sentences=[Sentence(id="S1", text="It is tall.")])
    claims = bounded(CLAIMS, said, strict_schema(CLAIMS))
    assert claims["properties"]["claims"]["maxItems"] == 2 and claims["properties"]["gaps"]["maxItems"] == 1
    assert claims["$defs"]["ExtractedClaim"]["properties"]["source_sentence_ids"]["items"]["enum"] == ["S1"]
    unnumbered = claims["$defs"]["ExtractedClaim"]["properties"]["text"]["pattern"]   # no number to copy
    assert unnumbered == numbers_only_from("q", text_chars("text", said)) and not re.fullmatch(unnumbered, "It is 3.")
    numbered = ClaimsInput(query="Built in 1889?", response="It is 330 m. It is old.",
                           sentences=[Sentence(id="S1", text="It is 330 m."), Sentence(id="S2", text="It is old.")])
    anyof = bounded(CLAIMS, numbered, strict_schema(CLAIMS))["$defs"]["ExtractedClaim"]["anyOf"]
    assert len(anyof) == 2   # any sentences cited, and S1 (the only one with digits of its own) alone
    (generic, own) = [v["properties"]["text"]["pattern"] for v in anyof]
    assert anyof[1]["properties"]["source_sentence_ids"]["prefixItems"] == [{"type": "string", "enum": ["S1"]}]
    assert own == numbers_only_from("Built in 1889? It is 330 m.", text_chars("text", numbered))
    assert re.fullmatch(own, "It was built in 1889 and is 330 m tall.")
    assert not re.fullmatch(generic, "It is 330 m tall.") and re.fullmatch(generic, "It was built in 1889.")
    assert not re.fullmatch(own, "It is 300 m tall.") and not re.fullmatch(own, 'A "quote"')
    assert strict_schema(FAITHFULNESS)["properties"]["items"].get("maxItems") is None   # the task's own is untouched


def test_the_narrowed_schema_is_sent_only_to_a_llama_cpp_grammar(openai_server):
    openai_server.habits = {"json_schema_500"}   # llama-cpp-python: json_object + schema
    _client(openai_server).run(FAITHFULNESS, _payload(2))
    sent = openai_server.requests[-1]["response_format"]["schema"]
    assert sent["properties"]["items"]["maxItems"] == 2
