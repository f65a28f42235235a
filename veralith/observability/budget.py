"""The per-trace budget guard: estimate what a trace's judge calls will cost before making any.

The estimate renders the prompts the trace would send, with the pipeline's batching:

    1 questions call                        the query alone
    1 claims call                           query + the response's sentences (none for an empty response)
    ceil(S / batch_size) sufficiency calls  S sub-questions, every chunk (none without chunks)
    ceil(C / batch_size) faithfulness calls C claims, every chunk (none without chunks or claims)
    1 completeness call                     every sub-question and claim (none when S or C is 0)

With no chunks the pipeline decides sufficiency and faithfulness in code, and with no claims or
no sub-questions it decides completeness in code, so those calls cost nothing.
Sub-questions and claims are unknown before decomposition, so S = the query's sentences and
C = the response's sentences split at "; " and " and " (the claims prompt asks for one fact per
claim), each piece standing in for the model's text. Input tokens are counted as OpenAI counts
chat input: per message 3 + tokens(role + content), 3 to prime the reply, plus the strict JSON
Schema sent as `response_format` (structured outputs bill it as input).

Output is unknown too, so an allowance is added (OUTPUT_ALLOWANCE; generous on purpose, since the
guard must not let a trace through on an optimistic guess):
    questions     20 + tokens(query) + 20 per sub-question
    claims        40 + tokens(response) + 40 per claim
    sufficiency   20 per call + 160 per sub-question
    faithfulness  20 per call + 140 per claim
    completeness  40 + 50 per claim + 40 per sub-question
USD = input tokens x input price + output tokens x output price (no provider-cache discount).

Tokens come from tiktoken (o200k_base for gpt-4o / 4.1 / o-series / gpt-5 and unknown models,
cl100k_base for gpt-4 / gpt-3.5). An encoding file already in tiktoken's cache directory (with the
right checksum) is loaded at once; otherwise tiktoken's download, which has no timeout, runs in a
background thread that is waited for at most LOAD_WAIT_S once. Until an encoding is there (and for
good when it cannot be had) tokens are counted as ceil(characters / 4), with one CostWarning; the
estimate never hangs and never fails an evaluation.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from veralith.config import settings
from veralith.errors import VeralithError
from veralith.observability.pricing import CostWarning, price_of

__all__ = ["BudgetExceeded", "TraceEstimate", "count_tokens", "encoding_for", "enforce_budget", "estimate_trace",
           "prompt_tokens"]

# sha256 of each encoding file, as tiktoken itself checks it (tiktoken_ext/openai_public.py).
_ENCODINGS = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_CL100K_FAMILIES = ("gpt-4-", "gpt-3.5", "text-embedding-")

OUTPUT_ALLOWANCE = {"questions_base": 20, "questions_per_item": 20, "claims_base": 40, "claims_per_item": 40,
                    "call": 20, "sufficiency_per_item": 160, "faithfulness_per_item": 140, "completeness_base": 40,
                    "completeness_per_claim": 50, "completeness_per_sub_question": 40}


class BudgetExceeded(VeralithError):
    """The estimated judge cost of one trace is above VERALITH_PER_TRACE_BUDGET_USD."""

    def __init__(self, estimated_usd: float, budget_usd: float) -> None:
        self.estimated_usd = estimated_usd
        self.budget_usd = budget_usd
        super().__init__(
            f"estimated judge cost ${estimated_usd:.6g} for this trace exceeds the per-trace budget "
            f"${budget_usd:.6g} (setting per_trace_budget_usd, env VERALITH_PER_TRACE_BUDGET_USD); "
            "nothing was called or stored. Raise the budget, shorten the context, or use a cheaper judge_model.")


@dataclass(frozen=True)
class TraceEstimate:
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None          # None when the model's price is unknown
    method: str                # "tiktoken:<encoding>" | "chars/4" | "local" (no model is called)


# ---------------------------------------------------------------- token counting

LOAD_WAIT_S = 3.0
_encodings: dict[str, Any] = {}   # name -> Encoding, or None when it could not be loaded
_loaders: dict[str, tuple[threading.Thread, bool]] = {}  # name -> (loader, file already on disk)
_enc_lock = threading.Lock()
_fallback_warned = False


def encoding_for(model: str) -> str:
    name = model.strip().lower()
    return "cl100k_base" if name == "gpt-4" or name.startswith(_CL100K_FAMILIES) else "o200k_base"


def _cached_file_ok(encoding: str) -> bool:
    """True when tiktoken will find `encoding` in its cache without downloading (same rules as tiktoken)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:  # tiktoken treats "" as "never cache": every load would download
        return False
    path = os.path.join(cache_dir, hashlib.sha1(_URL.format(encoding).encode()).hexdigest())
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == _ENCODINGS[encoding]
    except OSError:
        return False


def _load(name: str) -> None:
    try:
        import tiktoken  # lazy: never at `import veralith`

        encoding = tiktoken.get_encoding(name)
    except Exception:  # offline, a proxy page, a broken install: the estimate falls back, never fails
        encoding = None
    with _enc_lock:
        _encodings[name] = encoding


def _encoding(name: str, wait: bool = True) -> Any | None:
    """The tiktoken encoding, or None while (or because) it cannot be had without waiting on the network.

    `wait=False` starts the load if needed but never waits for it (None until it is there).
    """
    with _enc_lock:
        if name in _encodings:
            return _encodings[name]
        first = name not in _loaders
        if first:
            loader = threading.Thread(target=_load, args=(name,), daemon=True, name=f"veralith-tiktoken-{name}")
            _loaders[name] = (loader, _cached_file_ok(name))
            loader.start()
        loader, from_disk = _loaders[name]
    # A load from disk takes about a second, so every caller waits for it; a download may hang
    # (tiktoken sets no timeout), so only its first caller waits, and only LOAD_WAIT_S.
    loader.join((LOAD_WAIT_S if first or from_disk else 0) if wait else 0)
    with _enc_lock:
        return _encodings.get(name)


def _warn_fallback(name: str) -> None:
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        warnings.warn(f"tiktoken encoding {name} is not available offline (set TIKTOKEN_CACHE_DIR to a folder "
                      "holding it); token counts for the budget are estimated as ceil(characters / 4).",
                      CostWarning, stacklevel=4)


def count_tokens(text: str, model: str, *, wait: bool = True) -> tuple[int, str]:
    """(tokens in `text` for `model`, method used).

    `wait=False` (the judge client's truncation check, which must not stall a call) counts
    characters / 4 until the encoding has loaded in the background, without a warning.
    """
    name = encoding_for(model)
    enc = _encoding(name, wait)
    if enc is None:
        if wait:
            _warn_fallback(name)
        return math.ceil(len(text) / 4), "chars/4"
    return len(enc.encode(text, disallowed_special=())), f"tiktoken:{name}"


# ---------------------------------------------------------------- estimating a trace

def _chunks(context: Sequence[Any]) -> list[Any]:
    """Context in any accepted form (str, dict, ContextChunk) as ChunkIn, ids defaulting to c0, c1, ..."""
    from veralith.llm.tasks import ChunkIn

    chunks = []
    for n, item in enumerate(context):
        if isinstance(item, str):
            text, cid, source = item, None, None
        elif isinstance(item, dict):
            text = str(item.get("text", item.get("page_content", item.get("content", ""))))
            cid, source = item.get("id"), item.get("source")
        else:
            text = getattr(item, "text", getattr(item, "page_content", ""))
            cid, source = getattr(item, "id", None), getattr(item, "source", None)
        chunks.append(ChunkIn(id=f"c{n}" if cid is None else str(cid), text=str(text),
                              source=None if source is None else str(source)))
    return chunks


def _batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _sentences(text: str) -> list[str]:
    from veralith.llm.text import sentence_spans

    return [text[start:end] for start, end in sentence_spans(text)]


# The claims prompt tells the model to split "A and B" into separate facts, so a sentence is
# assumed to yield one claim per "; " or " and " clause. Splitting at commas too over-counts
# (lists, appositions); not splitting under-counts long answers (benchmarks/budget_accuracy.py).
_CLAUSE = re.compile(r";\s+|\s+and\s+")
_LETTER = re.compile(r"[^\W\d_]")


def _claim_texts(sentences: list[str]) -> list[str]:
    """The claims a decomposer is assumed to write: each sentence's clauses that contain a letter."""
    texts = []
    for sentence in sentences:
        parts = [p for p in _CLAUSE.split(sentence) if _LETTER.search(p)]
        texts += parts or [sentence]
    return texts


def _payloads(query: str, context: Sequence[Any], response: str, as_of: str | None = None
              ) -> list[tuple[str, Any]]:
    """(task name, input model) for every call the trace would make, as the pipeline makes them."""
    from veralith.llm import tasks as t

    chunks = _chunks(context)
    sentences = _sentences(response)
    as_of = as_of or datetime.date.today().isoformat()   # the judges get a date; its tokens count
    sub_questions = [t.SubQuestionIn(id=f"q{n}", text=s) for n, s in enumerate(_sentences(query), 1)]
    claims = [t.ClaimIn(id=f"c{n}", text=s) for n, s in enumerate(_claim_texts(sentences), 1)]
    calls: list[tuple[str, Any]] = [("questions", t.QuestionsInput(query=query))]
    if sentences:  # an empty response has no claims or gaps, decided without a call
        calls.append(("claims", t.ClaimsInput(
            query=query, response=response,
            sentences=[t.Sentence(id=f"S{n}", text=s) for n, s in enumerate(sentences, 1)])))
    size = settings.batch_size
    if chunks:  # without chunks, sufficiency is "no" and every claim unsupported, decided without a call
        calls += [("sufficiency", t.SufficiencyInput(query=query, sub_questions=b, chunks=chunks, as_of=as_of))
                  for b in _batches(sub_questions, size)]
        calls += [("faithfulness", t.FaithfulnessInput(query=query, claims=b, chunks=chunks, as_of=as_of))
                  for b in _batches(claims, size)]
    if sub_questions and claims:  # otherwise the pipeline decides completeness without a call
        calls.append(("completeness", t.CompletenessInput(query=query, sub_questions=sub_questions, claims=claims)))
    return calls


@functools.lru_cache(maxsize=64)
def _count_static(text: str, model: str) -> tuple[int, str]:
    """count_tokens for texts every call repeats (system prompts, schemas), counted once each."""
    return count_tokens(text, model)


def _message_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any], model: str) -> tuple[int, str]:
    total, method = 3, ""
    for message in messages:
        content = message.get("content") or ""
        text = f"{message.get('role', '')}{content if isinstance(content, str) else json.dumps(content)}"
        if message.get("role") == "system":
            n, _ = _count_static(text, model)
        else:
            n, method = count_tokens(text, model)
        total += 3 + n
    n, _ = _count_static(json.dumps(schema, separators=(",", ":")), model)
    return total + n, method


def prompt_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any] | None, model: str
                  ) -> tuple[int, str]:
    """(prompt tokens OpenAI would bill for `messages` plus a `response_format` schema, method used).

    Never waits for tiktoken to load (see count_tokens), so the first calls of a process may be
    counted as characters / 4.
    """
    total, method = 3, "chars/4"
    for message in messages:
        content = message.get("content") or ""
        text = f"{message.get('role', '')}{content if isinstance(content, str) else json.dumps(content)}"
        n, method = _count_now(text, model, static=message.get("role") == "system")
        total += 3 + n
    if schema:
        n, method = _count_now(json.dumps(schema, separators=(",", ":")), model, static=True)
        total += n
    return total, method


_static_counts: dict[tuple[str, str], int] = {}   # (text, model) -> tiktoken count of a text every call repeats


def _count_now(text: str, model: str, *, static: bool) -> tuple[int, str]:
    if static and (text, model) in _static_counts:
        return _static_counts[(text, model)], f"tiktoken:{encoding_for(model)}"
    n, method = count_tokens(text, model, wait=False)
    if static and method != "chars/4" and len(_static_counts) < 256:
        _static_counts[(text, model)] = n
    return n, method


def _output_allowance(task: str, payload: Any, query_tokens: int, response_tokens: int) -> int:
    a = OUTPUT_ALLOWANCE
    if task == "questions":
        return a["questions_base"] + query_tokens + a["questions_per_item"] * len(_sentences(payload.query))
    if task == "claims":
        items = len(_claim_texts([s.text for s in payload.sentences]))
        return a["claims_base"] + response_tokens + a["claims_per_item"] * items
    if task == "sufficiency":
        return a["call"] + a["sufficiency_per_item"] * len(payload.sub_questions)
    if task == "faithfulness":
        return a["call"] + a["faithfulness_per_item"] * len(payload.claims)
    return (a["completeness_base"] + a["completeness_per_claim"] * len(payload.claims)
            + a["completeness_per_sub_question"] * len(payload.sub_questions))


def estimate_trace(query: str, context: Sequence[Any], response: str, *, client: Any = None,
                   model: str | None = None) -> TraceEstimate:
    """Estimated calls, tokens and USD of evaluating one trace with `client` (default: the settings')."""
    from veralith.llm import prompts
    from veralith.llm.tasks import TASKS

    model = model or getattr(client, "model", None) or settings.judge_model
    if _backend(client) == "local":
        return TraceEstimate(model=model, calls=0, input_tokens=0, output_tokens=0, usd=0.0, method="local")
    calls = _payloads(query, context, response)
    query_tokens, _ = count_tokens(query, model)
    response_tokens, _ = count_tokens(response, model)
    input_tokens = output_tokens = 0
    method = "chars/4"
    for task, payload in calls:
        schema = _schema(client, TASKS[task])
        n, method = _message_tokens(prompts.render(task, payload), schema, model)
        input_tokens += n
        output_tokens += _output_allowance(task, payload, query_tokens, response_tokens)
    price = price_of(model)
    usd = None if price is None else (input_tokens * price.input + output_tokens * price.output) / 1e6
    return TraceEstimate(model=model, calls=len(calls), input_tokens=input_tokens, output_tokens=output_tokens,
                         usd=usd, method=method)


def _schema(client: Any, task: Any) -> dict[str, Any]:
    """The response schema exactly as the OpenAI client sends it (strict form), since it is billed."""
    if hasattr(client, "schema"):
        schema: dict[str, Any] = client.schema(task)
        return schema
    from veralith.llm.client import strict_schema  # imports openai: only when an estimate is made

    return strict_schema(task)


def _backend(client: Any) -> str:
    if client is not None:
        return str(getattr(client, "backend", "openai"))
    if settings.backend != "auto":
        return str(settings.backend)
    return "openai" if settings.api_key or settings.base_url else "local"


def enforce_budget(query: str, context: Sequence[Any], response: str, *, budget_usd: float | None = None,
                   client: Any = None) -> TraceEstimate | None:
    """Raise BudgetExceeded when the trace's estimated cost is above the budget; return the estimate.

    `budget_usd` defaults to settings.per_trace_budget_usd; with no budget this returns None at once.
    A budget on a model without a known price cannot be enforced, so that fails loudly too.
    """
    budget = settings.per_trace_budget_usd if budget_usd is None else budget_usd
    if budget is None:
        return None
    estimate = estimate_trace(query, context, response, client=client)
    if estimate.usd is None:
        from veralith.config import ConfigError

        raise ConfigError(f"VERALITH_PER_TRACE_BUDGET_USD is set but the price of judge model {estimate.model!r} "
                          "is unknown, so the budget cannot be enforced; add it to VERALITH_PRICING "
                          '(e.g. {"%s": {"input": 0, "output": 0}} for a local server).' % estimate.model)
    if estimate.usd > budget:
        raise BudgetExceeded(estimate.usd, budget)
    return estimate
