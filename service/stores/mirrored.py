"""Two copies of the embedded shard, each in an engine process of its own: writes leave the serving process, and a
search never waits for one (`PLUMBLINE_INDEX_COPIES=2`).

The binding holds the GIL through every engine call, and the segment conversion after a write (`optimize()`) takes
1.5-2 s at 10k chunks, so with the shard in the serving process (`EdgeStore`) every search, and `/health/live`,
waits that long now and then while an ingest runs. One shard cannot be opened by two processes, so this store keeps
two copies, `<data dir>/index` and `<data dir>/index-copy`, each opened by an `EdgeStore` in a spawned process that
first locks it (`<copy>.lock`: a restarted server waits for the engine processes of a killed one to finish their
write and exit). A write is applied to the first copy, then to the second, under one lock; a read goes to a copy
not being written (an idle one first). So a search never waits behind a write, and reads never see the index go
back: while the second copy is written, reads go to the first, which has the write already. (A new index's first
write, its schema, goes to both at once: nothing can be read before it.)

Nothing acknowledged is lost if the serving process dies between the two copies: each write is logged
(`<data dir>/index-writes.log`, replaced atomically, fsync'd when durable) before the first copy gets it and
removed once both have it; the next start applies the logged write to both copies again (every write is
idempotent: upsert, delete or set payload by filter, purge by id, schema). A copy whose write failed, or whose
process died, is read no more and the store refuses writes (readiness false) until a restart, which replays the
write. The first start with two copies makes the second from the first (a temporary directory, then a rename);
copies whose point counts differ at a start (written apart) get the second made again from the first; a start with one
copy (`single_copy`) replays a logged write and removes a second copy, stale from then on.

Costs: twice the memory and disk, every write applied twice, a pickled round trip per engine call.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from service.errors import PlumblineError, StoreUnavailable, public
from service.filters import Clause
from service.infra.faults import crash_point
from service.infra.files import write_atomic
from service.stores.base import ScoredPoint, StorePoint, VectorQuery
from service.stores.edge import EdgeStore
from service.stores.edge_layout import GRAPH_FROM

log = logging.getLogger("plumbline")
R = TypeVar("R")

# how long a copy's engine process waits for the one of a killed server to let go of it
LOCK_WAIT_SECONDS = 120.0


def copy_paths(index: Path) -> tuple[Path, Path, Path]:
    """The first copy (`index`, where a one-copy store keeps its shard), the second, and the write log."""
    return index, index.with_name(index.name + "-copy"), index.with_name(index.name + "-writes.log")


def single_copy(index: Path, *, graph_from: int = GRAPH_FROM) -> EdgeStore:
    """The shard opened in this process, after a write logged by a two-copy store is applied to it; a second copy,
    stale once this store writes, is removed."""
    first, second, write_log = copy_paths(index)
    with _locked(first, wait=LOCK_WAIT_SECONDS):
        store = EdgeStore(first, graph_from=graph_from)
        if write_log.exists():
            _dispatch(store, write_log.read_bytes())
            write_log.unlink()
    if second.exists():
        with _locked(second, wait=LOCK_WAIT_SECONDS):  # an engine process of a killed server may still hold it
            _remove(second)
        log.info("removed %s: with one copy of the index, the second is no longer kept", second.name)
    return store


class MirroredStore:
    """A `VectorStore` on two copies of an Edge shard, `index` and `index-copy`, each in its own engine process.

    Example:
        >>> store = MirroredStore(Path(tempfile.mkdtemp()) / "index")  # doctest: +SKIP
        >>> store.ensure_schema(384)  # doctest: +SKIP
    """

    def __init__(self, index: Path, *, lock_wait: float = LOCK_WAIT_SECONDS, graph_from: int = GRAPH_FROM) -> None:
        first, second, self._log = copy_paths(index)
        self._paths = (first, second)
        self._lock_wait = lock_wait
        self._graph_from = graph_from
        self._write_lock = threading.Lock()
        self._failure: str | None = None
        _complete(first, second, lock_wait)
        self._copies = self._start()
        if self._log.exists():
            self._recover(self._log.read_bytes())
        self._agree()

    def _start(self) -> list[_Copy]:
        copies: list[_Copy] = []
        try:
            for path in self._paths:
                copies.append(_Copy(path, self._lock_wait, self._graph_from))
            for c in copies:
                c.started()
        except BaseException:
            for c in copies:
                c.close()
            raise
        return copies

    def _recover(self, call: bytes) -> None:
        """Apply the write logged before the last stop to both copies. A copy that cannot take it (the engine
        refuses it the same way each time) is made again from one that could; if neither could, the write is
        dropped and the second copy made from the first, so that the two agree."""
        log.warning("applying the write logged before the last stop to both copies of the index")
        refused = []
        for copy in self._copies:
            try:
                with copy.lock:
                    copy.call(call)
            except StoreUnavailable as exc:
                log.error("%s could not apply the logged write: %s", copy.path.name, exc)
                refused.append(copy)
            except PlumblineError as exc:  # refused before the engine wrote anything, as it was the first time
                log.warning("the logged write is not valid here, so nothing is to be replayed: %s", exc)
        if refused:
            source = next((c for c in self._copies if c not in refused), self._copies[0])
            if len(refused) == len(self._copies):
                log.error("neither copy of the index could apply the logged write: it is dropped")
            self._remake(source.path, [c.path for c in refused if c is not source])
        self._log.unlink()

    def _agree(self) -> None:
        """Make the second copy again from the first if they hold different numbers of points: written apart, as when
        a version that knew one copy only wrote the first while the second stayed behind."""
        if not _holds_shard(self._paths[0]):  # a new index: both copies are created by its first write
            return
        count = pickle.dumps(("count", (Clause(),), {}), protocol=pickle.HIGHEST_PROTOCOL)
        counts = []
        for c in self._copies:
            with c.lock:
                counts.append(c.call(count))
        if counts[0] != counts[1]:
            log.error(
                "the copies of the index differ (%d and %d points): making the second again from the first", *counts
            )
            self._remake(self._paths[0], [self._paths[1]])

    def _remake(self, source: Path, targets: list[Path]) -> None:
        """Stop both engine processes, copy `source` over each of `targets`, and start them again."""
        for c in self._copies:
            c.close()
        for target in targets:
            _copy_shard(source, target, self._lock_wait)
        self._copies = self._start()

    # writes: logged, then applied to each copy in turn

    def ensure_schema(self, dimension: int) -> None:
        self._write("ensure_schema", dimension)

    def upsert(self, points: Sequence[StorePoint], *, durable: bool = True) -> None:
        self._write("upsert", points, durable=durable)

    def delete(self, where: Clause) -> None:
        self._write("delete", where)

    def set_payload(self, where: Clause, values: Mapping[str, Any]) -> None:
        self._write("set_payload", where, dict(values))

    def purge(self, ids: Sequence[str]) -> None:
        self._write("purge", list(ids))

    def _write(self, name: str, *args: Any, **kwargs: Any) -> None:
        call = pickle.dumps((name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)  # once: the log and both pipes
        with self._write_lock:
            if failure := self.health():
                raise StoreUnavailable(failure)
            write_atomic(self._log, call, sync=kwargs.get("durable", True), crash_at=None)
            self._apply(call)

    def _apply(self, call: bytes) -> None:
        """Apply a logged write to each copy in turn (the caller holds the write lock), then drop the log; a copy
        that fails is read no more, and the log stays for the next start. The first write of a new index (its schema,
        which creates both copies) goes to both at once: neither can be read before it, and its twelve field indexes,
        each flushed by the engine, cost half the wait in parallel (0.2 s instead of 0.4 per new index)."""
        if _holds_shard(self._paths[0]):
            self._in_turn(call)
        else:
            self._at_once(call)
        self._log.unlink(missing_ok=True)

    def _in_turn(self, call: bytes) -> None:
        first, second = self._copies
        first.writing = True
        try:
            with first.lock:
                self._on(first, call)
                second.writing = True  # before the first is readable again: no read after this one sees the old index
        finally:
            first.writing = False
        crash_point("copies:first-written")
        try:
            with second.lock:
                self._on(second, call)
        finally:
            second.writing = False

    def _at_once(self, call: bytes) -> None:
        def on(copy: _Copy) -> None:
            with copy.lock:
                self._on(copy, call)

        with ThreadPoolExecutor(len(self._copies), thread_name_prefix="plumbline-copies") as pool:
            first, second = (pool.submit(on, c) for c in self._copies)
            first.result()  # raises the first copy's error, having waited for the second's answer (the pool's exit)
            crash_point("copies:first-written")
        second.result()

    def _on(self, copy: _Copy, call: bytes) -> None:
        try:
            copy.call(call)
        except StoreUnavailable as exc:
            copy.failed = True
            self._failure = self._failure or (
                f"{exc}; {copy.path.name} is no longer read and writes are refused: restart the service, which "
                "applies the write to both copies again"
            )
            raise
        except PlumblineError:  # refused before the engine wrote anything (no schema yet): nothing to replay
            self._log.unlink(missing_ok=True)
            raise

    # reads: on a copy not being written

    def query(self, queries: Sequence[VectorQuery]) -> list[list[ScoredPoint]]:
        return self._read("query", queries)  # type: ignore[no-any-return]

    def retrieve(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        return self._read("retrieve", ids, fields)  # type: ignore[no-any-return]

    def committed(self, doc_ids: Collection[str]) -> dict[str, int]:
        return self._read("committed", list(doc_ids))  # type: ignore[no-any-return]

    def run(self, work: Callable[..., R], *args: Any) -> R:
        return self._read("run", work, *args)  # type: ignore[no-any-return]

    def scroll(self, where: Clause, limit: int, fields: Sequence[str] | None = None) -> list[ScoredPoint]:
        return self._read("scroll", where, limit, fields)  # type: ignore[no-any-return]

    def count(self, where: Clause) -> int:
        return self._read("count", where)  # type: ignore[no-any-return]

    def page(
        self, offset: str | None, limit: int, fields: Sequence[str], where: Clause | None = None
    ) -> tuple[list[ScoredPoint], str | None]:
        return self._read("page", offset, limit, fields, where)  # type: ignore[no-any-return]

    def dump(self, offset: str | None, limit: int) -> tuple[list[StorePoint], str | None]:
        return self._read("dump", offset, limit)  # type: ignore[no-any-return]

    def _read(self, name: str, *args: Any) -> Any:
        request = pickle.dumps((name, args, {}), protocol=pickle.HIGHEST_PROTOCOL)
        while True:
            with self._reader() as copy:
                try:
                    return copy.call(request)
                except StoreUnavailable:
                    if not copy.failed:  # the engine's own error: the other copy would give the same
                        raise
            log.error("the engine process of %s exited: reading the other copy", copy.path.name)

    @contextmanager
    def _reader(self) -> Iterator[_Copy]:
        """A copy to read, its lock held: one not being written (so never one whose write is in flight or about to
        be), idle if there is one; while one copy cannot be read, the other, between its writes."""
        while True:
            usable = [c for c in self._copies if not c.failed]
            if not usable:
                raise StoreUnavailable(self._failure or "no copy of the index can be read: restart the service")
            candidates = [c for c in usable if not c.writing] or usable
            chosen = next((c for c in candidates if c.lock.acquire(blocking=False)), None)
            if chosen is None and candidates[0].lock.acquire(timeout=0.002):
                chosen = candidates[0]
            if chosen is not None:
                break
        try:
            yield chosen
        finally:
            chosen.lock.release()

    def health(self) -> str | None:
        if self._failure:
            return self._failure
        for c in self._copies:
            if c.process.poll() is not None:
                c.failed = True
                self._failure = (
                    f"the engine process of {c.path.name} exited (code {c.process.returncode}): restart the service"
                )
        return self._failure

    def close(self) -> None:
        with self._write_lock:
            for c in self._copies:  # both engine processes close their shards at once
                c.stop()
            for c in self._copies:
                c.join()


class _Copy:
    """One copy's engine process and the pipe to it; `lock` held for each call (one at a time)."""

    def __init__(self, path: Path, lock_wait: float, graph_from: int) -> None:
        # A fresh interpreter (not multiprocessing's spawn, which would import the caller's main module again) with
        # one end of a socket pair as its pipe.
        ours, theirs = socket.socketpair()
        self.path = path
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(path), str(theirs.fileno()), str(lock_wait), str(graph_from)],
            pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self.lock = threading.Lock()
        self.writing = False
        self.failed = False

    def started(self) -> None:
        """Wait until the engine process has opened its copy; raise what it could not (a damaged index)."""
        with self.lock:
            self._reply()

    def call(self, request: bytes) -> Any:
        """Send a pickled `(method, args, kwargs)` of `EdgeStore`; the caller holds `lock`."""
        try:
            self._conn.send_bytes(request)
        except OSError as exc:
            raise self._gone() from exc
        return self._reply()

    def _reply(self) -> Any:
        try:
            ok, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise self._gone() from exc
        if not ok:
            raise value
        return value

    def _gone(self) -> StoreUnavailable:
        self.failed = True
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)
        return StoreUnavailable(f"the engine process of {self.path.name} exited (code {self.process.returncode})")

    def stop(self) -> None:
        """Ask the engine process to close its shard and exit (`join` waits for it)."""
        with self.lock, suppress(OSError):  # already gone
            self._conn.send_bytes(b"")

    def close(self) -> None:
        self.stop()
        self.join()

    def join(self) -> None:
        """Wait for the engine process to exit (killing it after 60 s), then close the pipe."""
        with self.lock:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                log.error("the engine process of %s did not stop in 60 s: killing it", self.path.name)
                self.process.kill()
                self.process.wait()
            self._conn.close()


def _engine_process(path: str, conn: Connection, lock_wait: float, graph_from: int) -> None:
    """An engine process: lock the copy, open it, answer calls until an empty message or the pipe closes (the
    serving process died: the call in hand is finished first), then close the shard."""
    for stop in (signal.SIGINT, signal.SIGTERM):  # sent to a whole process group: the server stops, then closes this
        signal.signal(stop, signal.SIG_IGN)
    copy = Path(path)
    try:
        lock = _lock(copy, wait=lock_wait)
        store = EdgeStore(copy, graph_from=graph_from)
    except Exception as exc:
        conn.send((False, _portable(exc)))
        return
    conn.send((True, None))
    try:
        while request := conn.recv_bytes():
            try:
                conn.send((True, _dispatch(store, request)))
            except Exception as exc:
                conn.send((False, _portable(exc)))
    except EOFError:
        log.warning("the serving process went away: closing %s", copy.name)
    finally:
        store.close()
        os.close(lock)  # lets a restarted server's engine process open the copy


# where the classes a logged write may hold lived before the service was grouped by job: a write logged by an older
# version before a crash is still applied after an upgrade
MOVED = {("service.sparse", "SparseVector"): ("service.stores.base", "SparseVector")}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(*MOVED.get((module, name), (module, name)))


def _dispatch(store: EdgeStore, request: bytes) -> Any:
    """Run a pickled `(method, args, kwargs)` call (a logged write, or a request over the pipe) on `store`."""
    name, args, kwargs = _Unpickler(io.BytesIO(request)).load()
    return getattr(store, name)(*args, **kwargs)


def _portable(exc: Exception) -> PlumblineError:
    """An error fit to cross the pipe: the service's own as it is, an engine's as `StoreUnavailable`."""
    return exc if isinstance(exc, PlumblineError) else StoreUnavailable(f"the engine failed: {public(str(exc))}")


def _lock(copy: Path, *, wait: float) -> int:
    """Take `<copy>.lock` (an exclusive `flock`, held until its descriptor is closed), waiting up to `wait` seconds
    for a process that holds it."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(copy.with_name(copy.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise StoreUnavailable(
                    f"{copy.name} is still held by an engine process of an earlier server after {wait:.0f} s: "
                    "stop it, then restart the service"
                ) from None
            time.sleep(0.05)


@contextmanager
def _locked(copy: Path, *, wait: float) -> Iterator[None]:
    fd = _lock(copy, wait=wait)
    try:
        yield
    finally:
        os.close(fd)


def _complete(first: Path, second: Path, lock_wait: float) -> None:
    """Make a missing copy from the other: the second at the first start with two copies, or either after a start
    that died remaking it (none is needed while neither holds a shard)."""
    held = [_holds_shard(first), _holds_shard(second)]
    if held == [True, False]:
        _copy_shard(first, second, lock_wait)
    elif held == [False, True]:
        _copy_shard(second, first, lock_wait)


def _holds_shard(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _copy_shard(source: Path, target: Path, lock_wait: float) -> None:
    """Replace `target` with a copy of `source` (not open: its lock is taken), built aside and renamed into place."""
    log.info("making %s of the index from %s", target.name, source.name)
    building = target.with_name(target.name + ".building")
    shutil.rmtree(building, ignore_errors=True)  # left by a start that died copying
    with _locked(source, wait=lock_wait):
        shutil.copytree(source, building, copy_function=_copy_sparse)
    if target.exists():
        _remove(target)  # a start that dies now finds `target` missing, and copies again
    os.replace(building, target)


def _copy_sparse(source: str, target: str) -> None:
    """`shutil.copy2` that keeps a file's holes: the engine's files are sparse (memory maps, a preallocated log), and
    a plain copy wrote them out whole (a 100k-chunk copy took 1,349 MB of disk instead of 516)."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size, offset = os.fstat(src.fileno()).st_size, 0
        while offset < size:
            try:
                offset = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # no data after `offset`: the rest is a hole
                break
            end = os.lseek(src.fileno(), offset, os.SEEK_HOLE)
            src.seek(offset)
            dst.seek(offset)
            while offset < end:
                block = src.read(min(2**20, end - offset))
                dst.write(block)
                offset += len(block)
        dst.truncate(size)
    shutil.copystat(source, target)


def _remove(copy: Path) -> None:
    """Delete a copy: renamed first, so that a process killed half-way leaves no partial copy in its place."""
    retired = copy.with_name(copy.name + ".retired")
    shutil.rmtree(retired, ignore_errors=True)
    os.replace(copy, retired)
    shutil.rmtree(retired)


if __name__ == "__main__":  # an engine process, started by `_Copy`
    _engine_process(sys.argv[1], Connection(int(sys.argv[2])), float(sys.argv[3]), int(sys.argv[4]))
