"""The reference a team gives with a trace: checked and normalised, every entry point alike.

`reference` is the answer a person wrote (RAGAS `reference` / `ground_truth`, DeepEval
`expected_output`); `reference_contexts` the chunks that should have been retrieved, as texts or as
ids (RAGAS `reference_contexts`, DeepEval `expected_context`). Neither changes how the six cells are
judged; both only add the correctness layer (veralith.pipeline.reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from veralith.errors import InputError
from veralith.models import Reference
from veralith.pipeline.inputs import MAX_CHUNKS, check_text
from veralith.validate import check_unicode

__all__ = ["check_reference"]

_TEXT_KEYS = ("text", "page_content", "content")


def check_reference(reference: Any = None, reference_contexts: Any = None) -> Reference | None:
    """The reference as a `Reference`, or None when neither part is given (an empty or blank answer and
    an empty list count as not given). Raises TypeError/InputError naming the argument."""
    answer = None
    if reference is not None:
        answer = check_text("reference", reference)
        check_unicode("reference", answer)
        answer = answer if answer.strip() else None
    contexts = _contexts(reference_contexts)
    if answer is None and not contexts:
        return None
    return Reference(answer=answer, contexts=contexts)


def _contexts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        hint = "; wrap a single text as [text]" if isinstance(value, str) else ""
        raise TypeError(f"reference_contexts must be a list of chunk texts or ids, got {type(value).__name__}{hint}")
    if len(value) > MAX_CHUNKS:
        raise InputError(f"reference_contexts has {len(value):,} items; the limit is {MAX_CHUNKS:,}")
    out = []
    for i, item in enumerate(value):
        where = f"reference_contexts[{i}]"
        if isinstance(item, Mapping):   # a chunk as a dict: its id names it best, else its text
            key = "id" if item.get("id") is not None else next((k for k in _TEXT_KEYS if k in item), None)
            if key is None:
                raise InputError(f"{where} is a dict without an id or any of the keys {list(_TEXT_KEYS)}")
            item = item[key]
        elif hasattr(item, "page_content"):
            item = item.page_content
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            raise TypeError(f"{where} must be a chunk text or id (str), got {type(item).__name__}")
        check_text(where, item)
        check_unicode(where, item)
        if item.strip():
            out.append(item)
    return out
