"""An offline embedding function for chromadb: hashed bag of words and word pairs.

Good enough to retrieve from a few dozen short documents, and it needs no model, no download and
no network. It is *registered* with chromadb because chromadb 1.x stores an embedding function's
name and config with the collection and rebuilds it when the collection is reopened; a name it
does not know makes it fall back to its default ONNX model, which it downloads. Registration
happens when this module is imported, so every process that reopens the index imports it first
(sample_app.index does).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

__all__ = ["HashingEmbeddingFunction", "tokens"]

_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")  # keeps decimals such as 2.4 whole
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i if in is it its my of on or so "
    "than that the their then there these this to was what when where which who why will with you your".split()
)


def tokens(text: str) -> list[str]:
    """Lower-cased content words; crude plural folding so 'batteries' meets 'battery'."""
    words = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if word.endswith("ies") and len(word) > 4:
            word = word[:-3] + "y"
        elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
            word = word[:-1]
        words.append(word)
    return words


@register_embedding_function
class HashingEmbeddingFunction(EmbeddingFunction[Documents]):
    """Signed feature hashing of words and adjacent word pairs, L2-normalised (use cosine space)."""

    def __init__(self, dim: int = 2048) -> None:
        if dim < 16:
            raise ValueError(f"dim must be at least 16, got {dim}")
        self.dim = dim

    def __call__(self, input: Documents) -> Embeddings:
        return [self._embed(text) for text in input]

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        words = tokens(text)
        # Each feature counts once: repeating a product name should not outweigh the words that differ.
        features = set(words) | {f"{a} {b}" for a, b in zip(words, words[1:], strict=False)}
        for feature in sorted(features):
            # sha1, not hash(): Python salts str hashes per process, and the index must survive one.
            digest = hashlib.sha1(feature.encode()).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        # An all-stopword text gets a tiny constant vector: chromadb rejects empty ones and cosine needs a norm.
        return [v / norm for v in vector] if norm else [1.0 / math.sqrt(self.dim)] * self.dim

    @staticmethod
    def name() -> str:
        return "veralith_sample_hashing"

    def get_config(self) -> dict[str, Any]:
        return {"dim": self.dim}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HashingEmbeddingFunction:
        return HashingEmbeddingFunction(dim=int(config.get("dim", 2048)))

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine"]
