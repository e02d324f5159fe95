"""A store whose engine calls are timed where they run, for `speed.py`'s split of a search into embedding, engine and
the pipeline's own work.

A search's engine calls run inside `VectorStore.run` (in a copy's engine process with two copies of the index), so
`TimedStore.run` times them there, with a `TimedStore` around the engine process's own store, and brings the sum back
with the answer: what is left of the search (the round trip to that process, the pickling, the Python around the
calls) counts as the pipeline's own. Its own module so that the engine process can import `timed` by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from service.stores.base import ScoredPoint, VectorQuery, VectorStore

R = TypeVar("R")


class TimedStore:
    """A store whose engine calls are timed: `seconds` sums them."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner, self.seconds = inner, 0.0

    def run(self, work: Callable[..., R], *args: Any) -> R:
        answer, seconds = self.inner.run(timed, work, *args)
        self.seconds += seconds
        return answer  # type: ignore[no-any-return]

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        return self._timed(self.inner.query, queries)

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        return self._timed(self.inner.retrieve, ids, fields)

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        return self._timed(self.inner.committed, doc_ids)

    def _timed(self, call: Callable[..., R], *args: Any) -> R:
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.seconds += time.perf_counter() - start


def timed(store: VectorStore, work: Callable[..., R], *args: Any) -> tuple[R, float]:
    """`work(store, *args)` with its engine calls timed: its answer and their seconds."""
    clocked = TimedStore(store)
    return work(clocked, *args), clocked.seconds
