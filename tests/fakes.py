"""Fakes for tests, named as such: never used by the service itself."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from service.filters import Clause
from service.retrieval.embedding import Matrix, PrefixedEmbedder
from service.stores.base import ScoredPoint, StorePoint, VectorQuery, VectorStore

T = TypeVar("T")


class FakeEmbedder(PrefixedEmbedder):
    """Deterministic bag-of-words vectors (hashed words, L2-normalised): texts sharing words are close.

    Fast and model-free, for tests about plumbing rather than semantics.
    """

    def __init__(self, dimension: int = 64, name: str = "fake-bow") -> None:
        super().__init__(name, dimension, query_prefix="", document_prefix="")
        self.calls = 0

    def _encode(self, texts: list[str]) -> Matrix:
        self.calls += 1
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[row, h % self._dimension] += 1.0
            # a small deterministic jitter per text: no exact ties, which engines break each their own way
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[row] += np.random.default_rng(seed).uniform(0, 1e-2, self._dimension).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class FlakyStore:
    """Wraps a store; the n-th call to `upsert` (1-based) raises, to test rollback."""

    def __init__(self, inner: VectorStore, fail_on_upsert: int) -> None:
        self.inner = inner
        self.fail_on_upsert = fail_on_upsert
        self.upserts = 0

    def ensure_schema(self, dimension: int) -> None:
        self.inner.ensure_schema(dimension)

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        self.upserts += 1
        if self.upserts == self.fail_on_upsert:
            raise OSError("fake disk failure")
        self.inner.upsert(points, durable=durable)

    def delete(self, where: Clause) -> None:
        self.inner.delete(where)

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        self.inner.set_payload(where, values)

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        return self.inner.query(queries)

    def run(self, work: Callable[..., T], *args: Any) -> T:
        return work(self, *args)  # its own calls: through this wrapper

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        return self.inner.committed(doc_ids)

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        return self.inner.retrieve(ids, fields)

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        return self.inner.scroll(where, limit, fields)

    def count(self, where: Clause) -> int:
        return self.inner.count(where)

    def page(
        self, offset: str | None, limit: int, fields: Sequence[str], where: Clause | None = None
    ) -> tuple[list[ScoredPoint], str | None]:
        return self.inner.page(offset, limit, fields, where)

    def dump(self, offset: str | None, limit: int) -> tuple[list[StorePoint], str | None]:
        return self.inner.dump(offset, limit)

    def purge(self, ids: Sequence[str]) -> None:
        self.inner.purge(ids)

    def health(self) -> str | None:
        return self.inner.health()

    def close(self) -> None:
        self.inner.close()


class FakeRecords:
    """`eval.storage.Records` in dicts: the eval library's stores without a database (the real one,
    `service.state.StateStore`, runs the same contract in tests/service/state)."""

    def __init__(self) -> None:
        self.sets: dict[str, str] = {}
        self.runs: dict[str, tuple[str, str, str, str]] = {}  # run id -> (set, created_at, summary, record)
        self.kinds: dict[str, str] = {}  # run id -> kind
        self.tenants: dict[str, str | None] = {}  # run id -> the tenant it was confined to
        self.baselines: dict[str, tuple[str, str]] = {}  # name -> (run id, record)
        self.history: list[tuple[str, str, str]] = []  # (name, run id, record)

    def get_set(self, name: str) -> str | None:
        return self.sets.get(name)

    def put_set(self, name: str, body: str) -> None:
        self.sets[name] = body

    def set_names(self) -> list[str]:
        return sorted(self.sets)

    def save_run(
        self,
        run_id: str,
        set_name: str,
        created_at: str,
        summary: str,
        record: str,
        kind: str,
        tenant: str | None = None,
    ) -> None:
        self.runs[run_id] = (set_name, created_at, summary, record)
        self.kinds[run_id] = kind
        self.tenants[run_id] = tenant

    def get_run(self, run_id: str) -> str | None:
        return self.runs[run_id][3] if run_id in self.runs else None

    def delete_run(self, run_id: str) -> bool:
        return self.runs.pop(run_id, None) is not None

    def run_summaries(
        self, limit: int, offset: int, set_name: str | None, kind: str | None, tenant: str | None = None
    ) -> list[str]:
        import json

        ids = sorted(
            (
                r
                for r, v in self.runs.items()
                if set_name in (None, v[0]) and kind in (None, self.kinds[r]) and tenant in (None, self.tenants[r])
            ),
            reverse=True,
        )[offset:][:limit]
        out = []
        for r in ids:
            set_of, created_at, summary, _ = self.runs[r]
            out.append(json.dumps({"run_id": r, "set": set_of, "created_at": created_at, **json.loads(summary)}))
        return out

    def count_runs(self, tenant: str) -> int:
        return sum(1 for r in self.runs if self.tenants[r] == tenant)

    def latest_run_ids(self, kind: str) -> list[tuple[str, str]]:
        newest: dict[str, str] = {}
        for run_id in sorted(r for r in self.runs if self.kinds[r] == kind):
            newest[self.runs[run_id][0]] = run_id
        return sorted(newest.items())

    def get_baseline(self, name: str) -> str | None:
        return self.baselines[name][1] if name in self.baselines else None

    def put_baseline(self, name: str, run_id: str, record: str, *, replace: bool) -> str | None:
        old = self.baselines.get(name)
        if old is not None:
            if not replace:
                from eval.errors import AlreadyExists

                raise AlreadyExists(f"baseline {name!r} exists")
            self.history.append((name, *old))
        self.baselines[name] = (run_id, record)
        return old[0] if old else None


class GatedFakeEmbedder(FakeEmbedder):
    """A FakeEmbedder whose batch query embeddings (an eval run's, not a single /search query's) can be held at
    a gate: `hold(n)` lets n batches through, then blocks the next until `release()`; `waiting` is set while
    one blocks. Tests use it to look at a run in the middle, without sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self._gate = threading.Event()
        self._gate.set()
        self._pass = 0
        self.waiting = threading.Event()

    def hold(self, let_through: int = 0) -> None:
        self._pass = let_through
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        if len(texts) > 1 and not self._gate.is_set():
            if self._pass > 0:
                self._pass -= 1
            else:
                self.waiting.set()
                self._gate.wait(60)
                self.waiting.clear()
        return super().embed_queries(texts)
