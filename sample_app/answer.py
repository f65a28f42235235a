"""Answer generators: the OpenAI API when a key is configured, an offline extractive one otherwise."""

from __future__ import annotations

import os
import re
from typing import Protocol

from sample_app.embedding import tokens

__all__ = ["REFUSAL", "Answerer", "ExtractiveAnswerer", "OpenAIAnswerer", "make_answerer"]

REFUSAL = "I can't answer that from the Orbitra documentation."
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
_PRODUCT = re.compile(r"\bOrbitra (?:[0-9]+|[A-Z][a-zA-Z]+)\b")
# Words every passage shares; matching on them alone says nothing about relevance.
_GENERIC = {"orbitra", "3", "skylark", "console", "mast"}


class Answerer(Protocol):
    name: str

    def answer(self, question: str, context: list[dict[str, str]]) -> str: ...


class ExtractiveAnswerer:
    """An offline stand-in for an LLM: it quotes the retrieved sentences that best match the question.

    It has two habits of real generators on purpose, so that the diagnosis has something to find:

    - it is *chatty*: when one sentence answers, it adds the sentence that follows it in the same
      passage, whether or not anyone asked for it;
    - it *guesses* (unless `guess=False`): asked about a product the passages never mention, it
      retells what they say about another product under the name it was asked about, the way a
      model confabulates a plausible fact instead of refusing.

    Otherwise, when no sentence shares a word with the question, it refuses.
    """

    name = "extractive"

    def __init__(self, *, guess: bool = True, chatty: bool = True) -> None:
        self.guess = guess
        self.chatty = chatty

    def answer(self, question: str, context: list[dict[str, str]]) -> str:
        passages = [_SENTENCE.split(chunk["text"]) for chunk in context]
        unseen = self._unseen_product(question, context)
        if unseen:
            return self._confabulate(unseen, passages) if self.guess else REFUSAL
        wanted = set(tokens(question)) - _GENERIC
        scored = sorted(((len(wanted & set(tokens(s))), -p, -i) for p, sentences in enumerate(passages)
                         for i, s in enumerate(sentences)), reverse=True)
        if not scored or scored[0][0] == 0:
            return REFUSAL
        chosen = [(-scored[0][1], -scored[0][2])]
        covered = wanted & set(tokens(passages[chosen[0][0]][chosen[0][1]]))
        # A second sentence only when it answers words of the question the first one did not.
        for score, p, i in scored[1:]:
            if score and (wanted & set(tokens(passages[-p][-i]))) - covered:
                chosen.append((-p, -i))
                break
        p, i = chosen[0]
        if len(chosen) == 1 and self.chatty and i + 1 < len(passages[p]):
            chosen.append((p, i + 1))
        return " ".join(passages[p][i] for p, i in chosen)

    @staticmethod
    def _unseen_product(question: str, context: list[dict[str, str]]) -> str | None:
        seen = " ".join(chunk["text"] for chunk in context)
        return next((name for name in _PRODUCT.findall(question) if name not in seen), None)

    @staticmethod
    def _confabulate(product: str, passages: list[list[str]]) -> str:
        """What a model does when asked about a product it has no text for: it retells the first
        thing the passages say about another product, under the name it was asked about."""
        for sentences in passages:
            for sentence in sentences:
                if _PRODUCT.search(sentence):
                    return _PRODUCT.sub(product, sentence, count=1)
        return REFUSAL


class OpenAIAnswerer:
    """Answers with an OpenAI chat model, instructed to use only the retrieved passages."""

    name = "openai"
    _SYSTEM = ("You answer questions about the Orbitra 3 weather station using only the passages given. "
               f"If they do not contain the answer, reply exactly: {REFUSAL}")

    def __init__(self, model: str | None = None) -> None:
        from openai import OpenAI  # reads OPENAI_API_KEY and OPENAI_BASE_URL itself

        self.client = OpenAI()
        self.model = model or os.environ.get("SAMPLE_APP_MODEL", "gpt-4o-mini")

    def answer(self, question: str, context: list[dict[str, str]]) -> str:
        passages = "\n\n".join(f"[{chunk['id']}] {chunk['text']}" for chunk in context)
        reply = self.client.chat.completions.create(
            model=self.model, temperature=0,
            messages=[{"role": "system", "content": self._SYSTEM},
                      {"role": "user", "content": f"Passages:\n{passages}\n\nQuestion: {question}"}])
        return (reply.choices[0].message.content or "").strip()


def make_answerer(kind: str = "auto", *, guess: bool = True) -> Answerer:
    """`auto` uses OpenAI when OPENAI_API_KEY is set, else the offline extractive answerer."""
    if kind not in ("auto", "openai", "extractive"):
        raise ValueError(f"answerer must be auto, openai or extractive, got {kind!r}")
    if kind == "openai" or (kind == "auto" and os.environ.get("OPENAI_API_KEY")):
        return OpenAIAnswerer()
    return ExtractiveAnswerer(guess=guess)
