"""A verdict's probability, read from the judge reply's token log-probabilities.

Where the server returns log-probabilities (`logprobs`, `top_logprobs`), the probability of a
label is that of the token that starts the label's value inside the JSON reply, normalised over
the alternatives at that position that would begin a valid label, and followed through the next
tokens until no other label shares the prefix ("con" could still become contradicted or
conflicting). Without log-probabilities, or when the tokens do not line up with the reply text,
there is no confidence: it is measured or absent, never guessed (MiniCheck and G-Eval read scores
from token probabilities the same way, PROMPTS.md §7).
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any

from pydantic import BaseModel

from veralith.llm.tasks import Task

__all__ = ["label_confidence"]

# task -> (list field, id field, label field) of the items whose label gets a confidence
_LABELLED = {"faithfulness": ("items", "claim_id", "relation"),
             "sufficiency": ("items", "sub_question_id", "sufficient"),
             "completeness": ("sub_questions", "sub_question_id", "status")}


def label_confidence(task: Task, output: BaseModel, content: str, tokens: list[Any] | None) -> dict[str, float]:
    """Item id -> probability of the label the reply gave it, read from the reply's token log-probabilities.

    Empty when the task has no labels, there are no log-probabilities, or the tokens cannot be
    aligned with the reply text: a confidence is measured or absent, never guessed.
    """
    spec = _LABELLED.get(task.name)
    if spec is None or not tokens:
        return {}
    list_field, id_field, label_field = spec
    items = getattr(output, list_field)
    if not items:
        return {}
    labels = typing.get_args(type(items[0]).model_fields[label_field].annotation)
    spans: list[tuple[int, int, Any]] = []
    position = 0
    for token in tokens:
        data = _token_bytes(token)
        spans.append((position, position + len(data), token))
        position += len(data)
    text = content.encode("utf-8")
    if b"".join(_token_bytes(t) for _, _, t in spans) != text:
        return {}
    # A key inside a string value is escaped (\"), so an unescaped one is the field itself.
    keys = list(re.finditer(rb'(?<!\\)"' + label_field.encode() + rb'"\s*:\s*"', text))
    if len(keys) != len(items):
        return {}
    confidence = {}
    for item, key in zip(items, keys, strict=True):
        label = getattr(item, label_field)
        if text[key.end():key.end() + len(label)] != label.encode():
            return {}
        p = _label_probability(spans, key.end(), label, labels)
        if p is not None:
            confidence[getattr(item, id_field)] = p
    return confidence


def _token_bytes(token: Any) -> bytes:
    data = getattr(token, "bytes", None)
    return bytes(data) if data is not None else str(token.token).encode("utf-8")


def _label_probability(spans: list[tuple[int, int, Any]], start: int, label: str, labels: tuple[str, ...]
                       ) -> float | None:
    """P(label) from the token that holds the value's first byte onward (see the module doc)."""
    index = next((i for i, (a, b, _) in enumerate(spans) if a <= start < b), None)
    if index is None:
        return None
    first_start, _, first = spans[index]
    prefix = _token_bytes(first)[:start - first_start]   # e.g. the opening quote, when one token holds both

    def value_part(data: bytes) -> str | None:
        """The label text an alternative token would start (None: it begins no valid label)."""
        if not data.startswith(prefix):
            return None
        rest = data[len(prefix):].decode("utf-8", "ignore")
        value, closed = rest.split('"', 1)[0], '"' in rest
        if not value or (closed and value not in labels) or not any(lab.startswith(value) for lab in labels):
            return None
        return value

    chosen = value_part(_token_bytes(first))
    if chosen is None:
        return None
    p_first = math.exp(first.logprob)
    alternatives = {}
    for alt in getattr(first, "top_logprobs", None) or []:
        value = value_part(_token_bytes(alt))
        if value is not None:
            alternatives[_token_bytes(alt)] = math.exp(alt.logprob)
    alternatives[_token_bytes(first)] = p_first
    probability = p_first / sum(alternatives.values())
    # Follow the value until no other label shares its prefix ("con" could still be contradicted or conflicting).
    seen = chosen
    for _, _, token in spans[index + 1:]:
        if [lab for lab in labels if lab.startswith(seen)] == [label] or len(seen) >= len(label):
            break
        probability *= math.exp(token.logprob)
        seen += _token_bytes(token).decode("utf-8", "ignore").split('"', 1)[0]
    return min(1.0, max(0.0, probability))
