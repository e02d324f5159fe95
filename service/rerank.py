"""Cross-encoder reranking: sentence-transformers `CrossEncoder` from a configured name or path.

Reranking is the costliest stage (a MiniLM-L6 cross-encoder over 30 passages of 256 tokens took about
1 s on two cores), so depth and passage length are bounded, and a semaphore caps how many rerank calls
run at once: the others wait for a slot instead of starving every other request of CPU.
With no model configured there is no reranker at all; responses say so. It is never faked.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol


class Reranker(Protocol):
    """Scores (query, passage) pairs; higher is more relevant."""

    @property
    def name(self) -> str: ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class CrossEncoderReranker:
    """A `Reranker` over a sentence-transformers cross-encoder.

    Example:
        >>> r = CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L-6-v2", max_tokens=256)  # doctest: +SKIP
        >>> r.score("refund window", ["Refunds are possible within 30 days."])  # doctest: +SKIP
        [5.1]
    """

    def __init__(self, model: str, *, max_tokens: int = 256, concurrency: int = 1, device: str = "cpu") -> None:
        from sentence_transformers import CrossEncoder

        self._name = model
        self._model: Any = CrossEncoder(model, device=device, max_length=max_tokens)
        self._slots = threading.BoundedSemaphore(concurrency)

    @property
    def name(self) -> str:
        return self._name

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        with self._slots:
            scores = self._model.predict([(query, p) for p in passages], convert_to_numpy=True)
        return [float(s) for s in scores]
