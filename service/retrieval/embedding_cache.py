"""A document-embedding cache: re-ingesting a chunk whose text has not changed does not run the model again.

Keyed on the model, the document prefix and the exact text the model sees (SHA-256), so a new model or a changed
chunk is a miss, never a stale vector. It lives in SQLite beside the index (`<data_dir>/embeddings.db`), one row of
float32 bytes per text (about 1.5 KB for 384 dimensions). It is a cache: losing it costs time, not data, so it is
written without fsync and a damaged file is replaced with an empty one. Queries are not cached.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.retrieval.embedding import Embedder, Matrix

log = logging.getLogger("plumbline")


class CachedEmbedder:
    """An `Embedder` that answers `embed_documents` from the cache where it can and asks `inner` for the rest,
    in one call.

    Example:
        >>> e = CachedEmbedder(OnnxEmbedder(PACKAGED_MODEL, cache=models), Path("data/embeddings.db"))  # doctest: +SKIP
        >>> _ = e.embed_documents(["a chunk"]), e.embed_documents(["a chunk"])  # doctest: +SKIP
        >>> e.hits, e.misses  # doctest: +SKIP
        (1, 1)
    """

    def __init__(self, inner: Embedder, path: Path, *, variant: str = "") -> None:
        self.inner = inner
        self.path = path
        self._salt = f"{inner.name}\0{inner.dimension}\0{variant}\0".encode()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            log.warning("the embedding cache %s is unreadable (%s): starting an empty one", path.name, exc)
            path.unlink(missing_ok=True)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
        return db

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        return self.inner.embed_queries(texts)

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        keys = [hashlib.sha256(self._salt + t.encode()).digest() for t in texts]
        found = self._lookup(set(keys))
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in found}.items())
        if todo:
            vectors = self.inner.embed_documents([t for _, t in todo])
            new = {k: v for (k, _), v in zip(todo, vectors, strict=True)}
            self._store(new)
            found.update(new)
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out

    def _lookup(self, keys: set[bytes]) -> dict[bytes, Matrix]:
        found: dict[bytes, Matrix] = {}
        wanted = list(keys)
        with self._lock:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                ).fetchall()
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape == (self.dimension,):
                        found[key] = vector
        return found

    def seed(self, path: Path) -> int:
        """Add the vectors of a seed file (`export`), keeping any already here; how many were new. The demo ships
        one for the handbook, so the first `make run` ingests it through the real path without running the model
        over every chunk."""
        with np.load(path) as seed:
            keys, vectors = seed["keys"], seed["vectors"]
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            log.warning(
                "the embedding seed %s holds %s vectors, the model makes %d: not used",
                path,
                vectors.shape,
                self.dimension,
            )
            return 0
        rows = [(bytes(k), np.asarray(v, dtype=np.float32).tobytes()) for k, v in zip(keys, vectors, strict=True)]
        with self._lock:
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)", rows)
            return self._db.total_changes - before

    def export(self, path: Path) -> None:
        """Write every cached vector to `path` (NumPy .npz: `keys`, 32 bytes each, and float32 `vectors`)."""
        with self._lock:
            rows = self._db.execute("SELECT key, vector FROM vectors ORDER BY key").fetchall()
        keys = np.array([np.frombuffer(k, dtype=np.uint8) for k, _ in rows], dtype=np.uint8).reshape(-1, 32)
        vectors = np.array([np.frombuffer(v, dtype=np.float32) for _, v in rows], dtype=np.float32)
        with path.open("wb") as f:
            np.savez_compressed(f, keys=keys, vectors=vectors.reshape(len(rows), self.dimension))

    def _store(self, vectors: dict[bytes, Matrix]) -> None:
        rows = [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in vectors.items()]
        try:
            with self._lock:
                self._db.executemany("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", rows)
        except sqlite3.Error as exc:  # a full disk: the vectors are still returned, only not kept
            log.warning("the embedding cache could not keep %d vector(s): %s", len(rows), exc)
