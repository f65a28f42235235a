"""The six traces of issue 39, their scripted answers, one scripted server for them, and what they cost.

Shared by benchmarks/reply_cost.py (Veralith before and after a change) and benchmarks/peer_cost.py
(Veralith against the original `veralith` 0.2.7 from the package index): six traces (a definition plus a
wrong figure, a correct answer, a number swap, a two-part question answered in one sentence, a 5-chunk
context with an 8-claim response, a refusal) and one oracle per trace (ORACLES): what a careful judge says
of each sub-question, claim and gap, with its quotes, missing facts and one sentence of reasoning.

`ScriptedServer` is one OpenAI-compatible server on 127.0.0.1 (tests/fake_openai_server.py) for every
run: it finds the trace a request is about from the request's own text and answers with that trace's
oracle, written in the shape the request asks for. A Veralith request (structured outputs) gets the
oracle with every field any version's schema has, cut to the schema it sent (`answer_schema`): a field a
version no longer asks for is not written, nothing else changes. The original's requests (JSON mode,
the shape in its prompt) are answered by `peer_cost.original_answer`, the same oracle in its shape.
Every request is counted as OpenAI bills it (`counted_usage`: messages plus the strict response schema
as input, the reply as output; tiktoken o200k_base, offline), priced at PRICES.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

PRICES = {"gpt-4o": (2.50, 1.25, 10.00), "gpt-4o-mini": (0.15, 0.075, 0.60)}   # USD / 1M: in, cached in, out

NORTHWIND = [
    ("Northwind Bank's loan book grew 6 percent in 2024 to 41.2 billion euros, led by mortgages in the Netherlands "
     "and Belgium. Corporate lending was flat, as clients repaid credit lines drawn during 2022."),
    ("Net interest income rose 9 percent to 1.8 billion euros because deposit rates lagged the central bank's rate "
     "rises for most of the year. The bank expects this margin to narrow in 2025 as deposit rates catch up."),
    ("Fee income was 412 million euros, up 3 percent, mostly from payment services. Asset management fees fell "
     "slightly after two funds were closed in the spring."),
    ("Loan loss provisions were 95 million euros, down from 160 million in 2023, after the bank released reserves "
     "set aside for commercial real estate. Non-performing loans stayed at 1.9 percent of the book."),
    ("Net profit reached 720 million euros in 2024. The board proposed a dividend of 0.85 euros per share and a "
     "buyback of up to 150 million euros, subject to regulatory approval."),
]


def _yes(*quotes: tuple[int, str], why: str) -> dict[str, Any]:
    return {"sufficient": "yes", "evidence": list(quotes), "missing": [], "why": why}


def _no(*missing: str, why: str) -> dict[str, Any]:
    return {"sufficient": "no", "evidence": [], "missing": list(missing), "why": why}


def _rel(relation: str, *quotes: tuple[int, str], why: str, grounding: tuple[int, ...] = (),
         against: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"relation": relation, "evidence": list(quotes), "why": why, "grounding": grounding, "against": against}


# Per trace: the data, and what the judge says (claims by sentence number, sub-questions and claims in order).
ORACLES: list[dict[str, Any]] = [
    {"name": "definition + wrong figure",
     "query": "What is a P/E ratio and what was Apple's P/E in 2023?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides share price by earnings per share. Apple's P/E in 2023 was 42.7.",
     "sub_questions": ["What is a P/E ratio?", "What was Apple's P/E ratio in 2023?"],
     "claims": [("A P/E ratio is share price divided by earnings per share.", [1]),
                ("Apple's P/E in 2023 was 42.7.", [2])],
     "gaps": [],
     "sufficiency": [_yes((0, "share price divided by its earnings per share"), why="c0 defines the ratio."),
                     _no("Apple's P/E ratio in 2023", why="No chunk gives any figure for Apple.")],
     "faithfulness": [_rel("supported", (0, "share price divided by its earnings per share"),
                           why="c0 gives the same definition.", grounding=(0,)),
                      _rel("unsupported", why="No chunk mentions Apple or a 2023 figure.")],
     "roles": [("answers", [1]), ("answers", [2])], "gap_links": [],
     "statuses": [("answered", "k1 defines it."), ("answered", "k2 gives a figure.")]},
    {"name": "correct answer",
     "query": "What time does the last ferry leave Port Helvin on Sundays?",
     "context": ["On weekdays the last ferry from Port Helvin leaves at 21:15. On Sundays the last ferry from Port "
                 "Helvin leaves at 19:30, and the first at 08:00."],
     "response": "On Sundays the last ferry from Port Helvin leaves at 19:30.",
     "sub_questions": ["What time does the last ferry leave Port Helvin on Sundays?"],
     "claims": [("The last ferry from Port Helvin on Sundays leaves at 19:30.", [1])], "gaps": [],
     "sufficiency": [_yes((0, "On Sundays the last ferry from Port Helvin leaves at 19:30"),
                          why="c0 gives the Sunday time.")],
     "faithfulness": [_rel("supported", (0, "On Sundays the last ferry from Port Helvin leaves at 19:30"),
                           why="c0 states the same time.", grounding=(0,))],
     "roles": [("answers", [1])], "gap_links": [], "statuses": [("answered", "k1 gives the time.")]},
    {"name": "number swap",
     "query": "How long is the X200 warranty?",
     "context": ["Every X200 ships with a 24-month limited warranty covering parts and labour."],
     "response": "The X200 comes with a 36-month warranty.",
     "sub_questions": ["How long is the X200 warranty?"],
     "claims": [("The X200 comes with a 36-month warranty.", [1])], "gaps": [],
     "sufficiency": [_yes((0, "a 24-month limited warranty"), why="c0 gives the length.")],
     "faithfulness": [_rel("contradicted", (0, "a 24-month limited warranty"), why="c0 says 24 months, not 36.",
                           against=(0,))],
     "roles": [("answers", [1])], "gap_links": [], "statuses": [("answered", "k1 gives a length.")]},
    {"name": "two-part question, one sentence",
     "query": "Who founded the Marrowby Weavers' Guild, and in what year?",
     "context": ["The Marrowby Weavers' Guild was established in 1783 by Elspeth Varn, a cloth merchant."],
     "response": "Elspeth Varn founded the Marrowby Weavers' Guild in 1783.",
     "sub_questions": ["Who founded the Marrowby Weavers' Guild?", "In what year was the Marrowby Weavers' Guild "
                       "founded?"],
     "claims": [("Elspeth Varn founded the Marrowby Weavers' Guild.", [1]),
                ("The Marrowby Weavers' Guild was founded in 1783.", [1])], "gaps": [],
     "sufficiency": [_yes((0, "established in 1783 by Elspeth Varn"), why="c0 names the founder."),
                     _yes((0, "established in 1783"), why="c0 gives the year.")],
     "faithfulness": [_rel("supported", (0, "established in 1783 by Elspeth Varn"), why="c0 names her as founder.",
                           grounding=(0,)),
                      _rel("supported", (0, "established in 1783"), why="c0 gives 1783.", grounding=(0,))],
     "roles": [("answers", [1]), ("answers", [2])], "gap_links": [],
     "statuses": [("answered", "k1 names her."), ("answered", "k2 gives the year.")]},
    {"name": "5 chunks, 8 claims",
     "query": "How did Northwind Bank's lending change in 2024, and what drove its profit?",
     "context": [{"text": t, "source": s} for t, s in zip(NORTHWIND, (
         "annual-report-2024.pdf", "annual-report-2024.pdf", "results-presentation.pdf", "results-presentation.pdf",
         "press-release.html"), strict=True)],
     "response": ("Northwind Bank's loan book grew 6 percent in 2024 to 41.2 billion euros. Mortgages in the "
                  "Netherlands and Belgium led the growth. Corporate lending was flat. Profit was driven mainly by "
                  "net interest income, which rose 9 percent to 1.8 billion euros. Lower loan loss provisions of 95 "
                  "million euros also helped. Fee income grew 3 percent to 412 million euros. Net profit reached 720 "
                  "million euros. The bank plans a buyback of up to 150 million euros."),
     "sub_questions": ["How did Northwind Bank's lending change in 2024?", "What drove Northwind Bank's profit in "
                       "2024?"],
     "claims": [("Northwind Bank's loan book grew 6 percent in 2024 to 41.2 billion euros.", [1]),
                ("Mortgages in the Netherlands and Belgium led the loan growth.", [2]),
                ("Northwind Bank's corporate lending was flat.", [3]),
                ("Northwind Bank's profit was driven mainly by net interest income.", [4]),
                ("Northwind Bank's net interest income rose 9 percent to 1.8 billion euros.", [4]),
                ("Lower loan loss provisions of 95 million euros helped profit.", [5]),
                ("Northwind Bank's fee income grew 3 percent to 412 million euros.", [6]),
                ("Northwind Bank's net profit reached 720 million euros.", [7])],
     "gaps": [],
     "sufficiency": [_yes((0, "loan book grew 6 percent in 2024 to 41.2 billion euros"), why="c0 gives the change."),
                     _no("what drove the profit, as the bank states it", why="Chunks give items, none says what "
                         "drove profit.")],
     "faithfulness": [
         _rel("supported", (0, "loan book grew 6 percent in 2024 to 41.2 billion euros"), why="c0 states it.",
              grounding=(0,)),
         _rel("supported", (0, "led by mortgages in the Netherlands and Belgium"), why="c0 states it.", grounding=(0,)),
         _rel("supported", (0, "Corporate lending was flat"), why="c0 states it.", grounding=(0,)),
         _rel("unsupported", why="No chunk ranks the drivers of profit."),
         _rel("supported", (1, "Net interest income rose 9 percent to 1.8 billion euros"), why="c1 states it.",
              grounding=(1,)),
         _rel("unsupported", (3, "Loan loss provisions were 95 million euros"), why="c3 gives the figure, not that "
              "it helped profit."),
         _rel("supported", (2, "Fee income was 412 million euros, up 3 percent"), why="c2 states it.", grounding=(2,)),
         _rel("supported", (4, "Net profit reached 720 million euros"), why="c4 states it.", grounding=(4,))],
     "roles": [("answers", [1]), ("supports", [1]), ("answers", [1]), ("answers", [2]), ("supports", [2]),
               ("answers", [2]), ("supports", [2]), ("supports", [2])],
     "gap_links": [],
     "statuses": [("answered", "k1 and k3 give the change."), ("answered", "k4 and k6 name drivers.")]},
    {"name": "refusal",
     "query": "What is the battery capacity of the Orla tablet?",
     "context": ["The Orla tablet has a 10-inch screen and weighs 480 grams. It ships in grey and blue."],
     "response": "I couldn't find the battery capacity of the Orla tablet in the documents.",
     "sub_questions": ["What is the battery capacity of the Orla tablet?"],
     "claims": [], "gaps": [("the battery capacity of the Orla tablet", [1])],
     "sufficiency": [_no("the Orla tablet's battery capacity", why="c0 gives screen and weight only.")],
     "faithfulness": [], "roles": [], "gap_links": [[1]], "statuses": [("unanswered", "Only g1 declines it.")]},
]


# ---------------------------------------------------------------- the scripted answers

def _full_reply(oracle: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The oracle's answer to one request, with every field any version's schema has."""
    from fake_openai_server import blocks, task_of

    task, b = task_of(body), blocks(body)
    chunk = [a["id"] for a, _ in b.get("chunk", [])]
    sq_ids = {text.strip(): a["id"] for a, text in b.get("subq", [])}
    sq_of = {n: sq_ids.get(t, f"q{n}") for n, t in enumerate(oracle["sub_questions"], 1)}
    position = {text: n for n, (text, _) in enumerate(oracle["claims"])}
    if task == "questions":
        return {"sub_questions": [{"id": f"q{n}", "text": t} for n, t in enumerate(oracle["sub_questions"], 1)]}
    if task == "claims":
        return {"claims": [{"id": f"k{n}", "source_sentence_ids": [f"S{s}" for s in sents], "text": text, "note": ""}
                           for n, (text, sents) in enumerate(oracle["claims"], 1)],
                "gaps": [{"id": f"g{n}", "source_sentence_ids": [f"S{s}" for s in sents], "text": text}
                         for n, (text, sents) in enumerate(oracle["gaps"], 1)],
                "remarks": [], "asks_clarification": False}
    if task == "sufficiency":
        items = []
        for attrs, text in b.get("subq", []):
            v = oracle["sufficiency"][oracle["sub_questions"].index(text.strip())]
            items.append({"sub_question_id": attrs["id"], "required_facts": [],
                          "evidence": [{"chunk_id": chunk[c], "quote": q} for c, q in v["evidence"]],
                          "missing_facts": v["missing"], "reasoning": v["why"], "sufficient": v["sufficient"],
                          "supporting_chunk_ids": sorted({chunk[c] for c, _ in v["evidence"]})})
        return {"items": items}
    if task == "faithfulness":
        items = []
        for attrs, text in b.get("claim", []):
            v = oracle["faithfulness"][position[text.strip()]]
            items.append({"claim_id": attrs["id"], "evidence": [{"chunk_id": chunk[c], "quote": q}
                                                                 for c, q in v["evidence"]],
                          "dates": [], "reasoning": v["why"], "relation": v["relation"],
                          "grounding_chunk_ids": [chunk[c] for c in v["grounding"]],
                          "contradicting_chunk_ids": [chunk[c] for c in v["against"]]})
        return {"items": items}
    if task == "completeness":
        claims = []
        for attrs, text in b.get("claim", []):
            role, sqs = oracle["roles"][position[text.strip()]]
            claims.append({"claim_id": attrs["id"], "role": role, "reasoning": "",
                           "sub_question_ids": [sq_of[k] for k in sqs]})
        gaps = [{"gap_id": attrs["id"], "sub_question_ids": [sq_of[k] for k in oracle["gap_links"][n]]}
                for n, (attrs, _) in enumerate(b.get("gap", []))]
        statuses = [{"sub_question_id": attrs["id"], "reasoning": why, "status": status}
                    for (attrs, text), (status, why) in zip(
                        b.get("subq", []), [oracle["statuses"][oracle["sub_questions"].index(t.strip())]
                                            for _, t in b.get("subq", [])], strict=True)]
        return {"claims": claims, "gaps": gaps, "sub_questions": statuses}
    raise ValueError(f"no scripted answer for task {task!r}")


def _cut(value: Any, node: dict[str, Any], defs: dict[str, Any]) -> Any:
    """`value` with only what the schema `node` asks for (every key it asks for must be there)."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        node = defs[ref.rsplit("/", 1)[-1]]
    if node.get("type") == "object" or "properties" in node:
        return {k: _cut(value[k], sub, defs) for k, sub in node["properties"].items()}
    if node.get("type") == "array":
        return [_cut(v, node.get("items", {}), defs) for v in value]
    return value


def answer_schema(oracle: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A Veralith request's reply: the oracle's answer cut to the schema the request sent."""
    schema = body["response_format"]["json_schema"]["schema"]
    cut: dict[str, Any] = _cut(_full_reply(oracle, body), schema, schema.get("$defs", {}))
    return cut


def oracle_of(body: dict[str, Any]) -> dict[str, Any]:
    """The trace a request is about, read from its user message: its query, else its response, else its
    first chunk's text (every request of both packages carries one of them verbatim)."""
    user = next((str(m.get("content") or "") for m in body.get("messages") or [] if m.get("role") == "user"), "")
    for key in ("query", "response", "chunk"):
        for oracle in ORACLES:
            first = oracle["context"][0]
            text = oracle[key] if key != "chunk" else first["text"] if isinstance(first, dict) else first
            if text in user:
                return oracle
    raise ValueError(f"no trace of the six in request: {user[:120]!r}")


class ScriptedServer:
    """One scripted OpenAI-compatible server for the six traces. `answer(oracle, body)` writes a reply
    (default `answer_schema`); every request is kept with the reply it got, in order (`calls`)."""

    def __init__(self, answer: Callable[[dict[str, Any], dict[str, Any]], Any] = answer_schema) -> None:
        from fake_openai_server import FakeOpenAIServer

        self.answer = answer
        self.exchanges: list[tuple[dict[str, Any], str]] = []
        self.server = FakeOpenAIServer(auto=False, count_tokens=True)
        self.server.responder = self._respond

    def _respond(self, body: dict[str, Any]) -> str:
        reply = self.answer(oracle_of(body), body)
        content = reply if isinstance(reply, str) else json.dumps(reply, separators=(",", ":"))
        self.exchanges.append((body, content))
        return content

    def __enter__(self) -> ScriptedServer:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def base_url(self) -> str:
        return str(self.server.base_url)

    def calls(self, since: int = 0) -> list[dict[str, Any]]:
        """The exchanges from index `since` on, each counted: its trace, task, model, input and output
        tokens as OpenAI bills them, schema tokens and the static prefix (schema + system message)."""
        from fake_openai_server import counted_usage, task_of

        out = []
        for body, content in self.exchanges[since:]:
            usage = counted_usage(body, content)
            schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
            schema_tokens = tokens(json.dumps(schema, separators=(",", ":"))) if schema is not None else 0
            system = next((str(m.get("content") or "") for m in body["messages"] if m.get("role") == "system"), "")
            prefix = schema_tokens + 4 + tokens("system" + system)
            out.append({"trace": oracle_of(body)["name"], "task": task_of(body), "model": body["model"],
                        "input": usage["prompt_tokens"], "output": usage["completion_tokens"],
                        "schema": schema_tokens, "prefix": prefix, "cacheable": cacheable(prefix)})
        return out


# ---------------------------------------------------------------- counting and pricing

def tokens(text: str) -> int:
    import tiktoken

    return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))


def cacheable(prefix: int) -> int:
    """The tokens of a static prefix OpenAI's prompt cache can serve (from 1,024, in steps of 128)."""
    return 0 if prefix < 1024 else 1024 + (prefix - 1024) // 128 * 128


def usd(calls: list[dict[str, Any]], warm: bool = False) -> float:
    """USD per trace (mean of the six); `warm`: each static prefix served from the cache where it can be."""
    total = 0.0
    for c in calls:
        price_in, price_cached, price_out = PRICES[c["model"]]
        cached = c["cacheable"] if warm else 0
        total += ((c["input"] - cached) * price_in + cached * price_cached + c["output"] * price_out) / 1e6
    return total / len(ORACLES)


def row(name: str, calls: list[dict[str, Any]], *, warm: bool = True) -> str:
    """One Markdown row: calls, gpt-4o in / out, gpt-4o-mini in / out, USD per trace (and warm)."""
    sums = {m: (sum(c["input"] for c in calls if c["model"] == m), sum(c["output"] for c in calls if c["model"] == m))
            for m in PRICES}
    mini = f"{sums['gpt-4o-mini'][0]:,} / {sums['gpt-4o-mini'][1]:,}" if sums["gpt-4o-mini"][0] else "—"
    cells = [name, str(len(calls)), f"{sums['gpt-4o'][0]:,} / {sums['gpt-4o'][1]:,}", mini, f"${usd(calls):.5f}"]
    return "| " + " | ".join(cells + ([f"${usd(calls, True):.5f}"] if warm else [])) + " |"
