"""A verdict's confidence: the probability the judge model gave its label, read from the reply's tokens.

Where the server returns token log-probabilities, a label's confidence is the product of the
probabilities of the tokens that spell the label's value in the reply (`"relation": "supported"`),
from the token holding its first character to the one holding its last. That is the probability the
model gave the label along the path it took. It is never renormalised over rival labels: a forced
label (a grammar or a schema made the model write "yes" when it gave "yes" 0.04 and preferred text
that is no label at all) keeps its 0.04, and a rival missing from the top log-probabilities counts as
unknown, not as zero. A token that rival labels share (the "con" of contradicted and conflicting)
counts in full: the model had to take it to reach the label. Other tokenisations of the same label
are not added, so the figure is a lower bound on what the model gave the label, never more.

Without log-probabilities, when the tokens do not spell the reply, or when the reply's text for the
label is not the label itself (a value read leniently, "Supported" for "supported"), there is no
confidence: it is measured or absent (None downstream), never guessed.
"""

from __future__ import annotations

import math
import re
from typing import Any

from veralith.llm.tasks import Task

__all__ = ["LABEL_FIELDS", "label_confidence"]

# item list -> label field whose value gets a confidence
LABEL_FIELDS = {("sufficiency", "items"): "sufficient", ("faithfulness", "items"): "relation",
                ("completeness", "sub_questions"): "status"}


def label_confidence(task: Task, content: str, tokens: list[Any] | None,
                     labels: dict[tuple[str, str], str]) -> dict[str, float]:
    """Item id -> probability of its label, for the items `labels` names ((list field, id) -> label),
    read from the tokens of the reply `content` they were taken from. Items whose label cannot be
    read off the tokens are left out."""
    if not tokens or not labels:
        return {}
    spans: list[tuple[int, int, float]] = []
    position = 0
    for token in tokens:
        data = _token_bytes(token)
        spans.append((position, position + len(data), float(token.logprob)))
        position += len(data)
    text = content.encode("utf-8")
    if b"".join(_token_bytes(t) for t in tokens) != text:
        return {}
    confidence: dict[str, float] = {}
    for spec in task.items:
        field = LABEL_FIELDS.get((task.name, spec.field))
        if field is None:
            continue
        ids = {k[1]: k for k in labels if k[0] == spec.field}
        lowered = {i.lower(): k for i, k in ids.items()}
        # A key inside a string value is escaped (\"), so an unescaped one is the field itself.
        for key in re.finditer(rb'(?<!\\)"' + field.encode() + rb'"\s*:\s*"', text):
            owner = _owner(text[:key.start()], spec.id_field)
            if owner is None:
                continue
            item = ids.get(owner) or lowered.get(owner.lower())   # the reply may echo an id in another case
            if item is None:
                continue
            label = labels[item].encode("utf-8")
            end = key.end() + len(label)
            if text[key.end():end] != label or text[end:end + 1] != b'"':
                continue
            covered = [lp for a, b, lp in spans if a < end and b > key.end()]
            if covered:
                confidence[item[1]] = min(1.0, max(0.0, math.exp(sum(covered))))
    return confidence


def _owner(before: bytes, id_field: str) -> str | None:
    """The id of the item a label belongs to: the last `"<id_field>": "..."` before it."""
    found = None
    for match in re.finditer(rb'(?<!\\)"' + id_field.encode() + rb'"\s*:\s*"((?:[^"\\]|\\.)*)"', before):
        found = match
    return found.group(1).decode("utf-8", "replace") if found else None


def _token_bytes(token: Any) -> bytes:
    data = getattr(token, "bytes", None)
    return bytes(data) if data is not None else str(token.token).encode("utf-8")
