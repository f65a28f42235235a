"""What a judge server's replies say about it, learnt once per server and model (veralith.llm.server).

* What it read. The server's `usage.prompt_tokens` is compared with the count expected for the
  messages sent (veralith.llm.tokens). Under TRUNCATION_RATIO of it, either the chat template dropped
  the system message (what it read matches the messages without it: llama.cpp's `gemma` chat format
  does this) or the context window cut the start of the prompt. In auto mode the first is answered by
  sending the instructions in the user turn from then on, and the call is sent again; otherwise the
  call is a `context_truncated` judge error whose message names the likely cause and its fix. The
  0.6 leaves room for other model families' tokenizers, which count the same text differently from
  o200k by tens of percent, so only a real cut trips it; a cut of less than about 40 % goes unseen.
* Log-probabilities, in auto mode: a server that returns none when asked is not asked again. A local
  server is timed with and without them before its first judge call, by small probes of the same
  prompt (veralith.llm.probe), and not asked for them when they make it markedly slower per output
  token (`logprobs_too_slow`: at least LOGPROBS_PROBE_RATIO times and LOGPROBS_PROBE_EXTRA_S more;
  llama-cpp-python computes them in Python, over the whole vocabulary, for every token). When the
  probes could not tell (replies too short), judge calls are compared instead (calls without come
  free: the decomposition calls never ask); their prompts differ, so the bar is higher there:
  LOGPROBS_SLOWER times slower.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm.server import Habits, Server

__all__ = ["LOGPROBS_PROBE_EXTRA_S", "LOGPROBS_PROBE_RATIO", "LOGPROBS_SLOWER", "TRUNCATION_RATIO", "learn_logprobs",
           "TOP_LOGPROBS", "logprobs_too_slow", "read_too_little", "returned_none", "want_logprobs"]

TRUNCATION_RATIO = 0.6    # reported / expected prompt tokens below this: the server did not read the whole prompt
TOP_LOGPROBS = 5          # alternatives asked for with each token's log-probability
LOGPROBS_SLOWER = 3.0     # judge calls: a local server this many times slower per output token with them: not asked
LOGPROBS_PROBE_RATIO = 1.5      # probes of one prompt: this many times slower per output token with them ...
LOGPROBS_PROBE_EXTRA_S = 0.005  # ... and at least this many seconds more per output token: not asked
_CONTEXT_SIZES = tuple(n * 1024 for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32))


def read_too_little(server: Server, model: str, completion: Any, messages: list[dict[str, str]],
                    schema: dict[str, Any] | None, habits: Habits) -> bool:
    """True when the server dropped the system message and the call should be sent again in the
    user turn (auto mode); raise context_truncated when it read too little for another reason."""
    reported = completion.usage.prompt_tokens if completion.usage is not None else None
    if not reported:
        return False   # a server that reports no usage cannot be checked
    from veralith.llm.tokens import most_prompt_tokens, prompt_tokens

    if reported >= TRUNCATION_RATIO * most_prompt_tokens(messages, schema, model):
        return False   # it read enough of any count the prompt can have: no need to tokenize it
    expected, method = prompt_tokens(messages, schema, model)
    if reported >= TRUNCATION_RATIO * expected:
        return False
    user_only = [m for m in messages if m["role"] != "system"]
    if len(user_only) < len(messages):
        without, _ = prompt_tokens(user_only, schema, model)
        if reported >= TRUNCATION_RATIO * without:   # what it read is about the messages without the system one
            if settings.current.system_prompt == "auto":
                habits.system = "user"
                server.warn_once(f"system:{model}", "veralith: the judge server at %s drops the system message "
                                 "for model %s (it read %s of about %s prompt tokens); sending the instructions in "
                                 "the user turn from now on (VERALITH_SYSTEM_PROMPT)", server.shown, model, reported,
                                 expected)
                return True
            raise JudgeCallError("context_truncated", (
                f"the judge server read {reported} prompt tokens of the about {expected} sent ({method}), about "
                f"what the messages hold without the system message ({without}): its chat template drops the "
                "system message, where the instructions are (llama.cpp's gemma chat format does). Set "
                "VERALITH_SYSTEM_PROMPT=user (or auto)."), attempts=1)
    window = next((n for n in _CONTEXT_SIZES if n * 0.9 <= reported <= n), None)
    cause = (f"its context window (about {window} tokens) is smaller than the prompt" if window else
             "its context window is smaller than the prompt, or its chat template dropped part of the messages")
    raise JudgeCallError("context_truncated", (
        f"the judge server read {reported} prompt tokens of the about {expected} sent ({method}): {cause}, so "
        "it cut the start of the prompt, where the instructions are. Raise its context length (Ollama: "
        "OLLAMA_CONTEXT_LENGTH=16384, or PARAMETER num_ctx 16384 in a Modelfile; vLLM: --max-model-len; "
        "llama.cpp: --ctx-size) or lower VERALITH_BATCH_SIZE."), attempts=1)

def logprobs_too_slow(with_s: float, without_s: float) -> bool:
    """Whether seconds per output token with log-probabilities (`with_s`) against without (`without_s`),
    timed on the same prompt, make them not worth asking for: markedly slower, both relatively and in
    absolute terms (a fast server's noise is a large ratio of nothing)."""
    return with_s >= LOGPROBS_PROBE_RATIO * without_s and with_s - without_s >= LOGPROBS_PROBE_EXTRA_S


def want_logprobs(server: Server, habits: Habits) -> bool:
    """Whether a call with labels asks for log-probabilities now (VERALITH_LOGPROBS, and what was learnt)."""
    choice = settings.current.logprobs
    if choice != "auto":
        return choice == "on"
    if not habits.logprobs:
        return False
    if server.local and not habits.logprobs_decided:
        # No call without them to compare with yet (every decomposition call came from the cache):
        # one labelled call goes without.
        return not (len(habits.timings[True]) >= 4 and not habits.timings[False])
    return True


def returned_none(server: Server, model: str, habits: Habits, completion: Any) -> bool:
    """Whether `completion`, asked for log-probabilities, came back without them; if so the server is not
    asked for them again (a probe's reply and a judge call's alike)."""
    choice = completion.choices[0] if completion.choices else None
    if choice is None or choice.logprobs is not None:
        return False
    habits.logprobs, habits.logprobs_decided = False, True
    server.warn_once(f"nologprobs:{model}", "veralith: the judge server at %s returns no log-probabilities "
                     "for model %s; not asking for them (verdicts carry no confidence)", server.shown, model,
                     level=logging.INFO)
    return True


def learn_logprobs(server: Server, model: str, habits: Habits, asked: bool, completion: Any, elapsed: float) -> None:
    """Learn from a completion whether log-probabilities are worth asking this server for (auto mode)."""
    if settings.current.logprobs != "auto":
        return
    if asked and returned_none(server, model, habits, completion):
        return
    out = completion.usage.completion_tokens if completion.usage is not None else 0
    if not server.local or habits.logprobs_decided or not out:
        return
    with server.lock:
        habits.timings[asked].append(elapsed / out)
        with_, without = habits.timings[True], habits.timings[False]
        if len(with_) < 2 or len(without) < 2:
            return
        ratio = statistics.median(with_) / max(statistics.median(without), 1e-9)
        habits.logprobs_decided = True
        habits.logprobs = ratio < LOGPROBS_SLOWER
    if not habits.logprobs:
        server.warn_once(f"slowlogprobs:{model}", "veralith: the judge server at %s is %.1fx slower per output "
                         "token with log-probabilities; not asking for them (verdicts carry no confidence; "
                         "VERALITH_LOGPROBS=on asks anyway)", server.shown, ratio)
