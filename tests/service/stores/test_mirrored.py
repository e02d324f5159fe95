"""The two-copy store beyond the contract suite (which it also runs): where reads go while a write is in flight, what
a crash between the two copies leaves, the copies' locks, a dead engine process, and moving between one copy and two.

Writes are held up for real: the engine process of one copy is stopped (SIGSTOP) while a write is sent to it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.errors import StoreUnavailable
from service.filters import Clause, Match
from service.runtime import build_store
from service.settings import Settings
from service.stores import mirrored
from service.stores.base import DENSE, SparseVector, StorePoint, VectorQuery
from service.stores.edge import EdgeStore
from service.stores.mirrored import MirroredStore, copy_paths, single_copy
from tests.waiting import until

pytestmark = pytest.mark.engine

CHUNKS = Clause(must=(Match("kind", "chunk"),))
ROOT = Path(__file__).resolve().parents[3]


def point(i: int, doc: str = "d") -> StorePoint:
    return StorePoint(f"00000000-0000-0000-0000-{i:012d}", {"kind": "chunk", "doc_id": doc}, dense=[1.0, i, 0.0, 0.5])


def docs_of(store: Any) -> dict[str, str]:
    return {p.id: p.payload["doc_id"] for p in store.scroll(Clause(), 100)}


def contents(copy: Path) -> dict[str, Any]:
    """Every point of one copy, read with the shard opened in this process."""
    store = EdgeStore(copy)
    try:
        points, _ = store.dump(None, 1000)
        return {p.id: (dict(p.payload), p.dense) for p in points}
    finally:
        store.close()


def disk_used(copy: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in copy.rglob("*") if f.is_file())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MirroredStore]:
    s = MirroredStore(tmp_path / "index")
    s.ensure_schema(4)
    s.upsert([point(1), point(2)])
    yield s
    s.close()


def closed_two_copies(index: Path, *points: StorePoint) -> tuple[Path, Path, Path]:
    """A two-copy index holding `points`, closed; its two copies and write log."""
    two = MirroredStore(index)
    two.ensure_schema(4)
    two.upsert(list(points))
    two.close()
    return copy_paths(index)


def pid_of(store: MirroredStore, copy: int) -> int:
    return store._copies[copy].process.pid


@pytest.fixture
def stopped() -> Iterator[Callable[[int], None]]:
    """Stop a process (SIGSTOP); every one stopped is continued at the end, also when the test fails."""
    pids: list[int] = []

    def stop(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        pids.append(pid)

    yield stop
    for pid in pids:
        with suppress(ProcessLookupError):  # continued and gone already
            os.kill(pid, signal.SIGCONT)


def in_thread(work: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=work, daemon=True)
    t.start()
    return t


def _raised(work: Callable[..., object], *args: Any, into: list[StoreUnavailable]) -> None:
    """Run `work(*args)`, keeping the `StoreUnavailable` it raises in `into`."""
    try:
        work(*args)
    except StoreUnavailable as exc:
        into.append(exc)


def answered_within(seconds: float, work: Callable[[], Any]) -> Any:
    """`work()`'s result, failing the test if it has not come within `seconds` (it waits on a stopped process)."""
    out: list[Any] = []
    in_thread(lambda: out.append(work())).join(seconds)
    assert out, f"no answer within {seconds} s: the read waited for a copy being written"
    return out[0]


def test_reads_go_to_the_other_copy_while_one_is_being_written(
    store: MirroredStore, stopped: Callable[[int], None]
) -> None:
    stopped(pid_of(store, 0))  # the first copy's write will not finish until it is continued
    writer = in_thread(lambda: store.upsert([point(3)]))
    writer.join(0.5)
    assert writer.is_alive()
    for _ in range(5):  # every read answered, by the second copy, which has not had the write yet
        assert answered_within(10, lambda: docs_of(store)) == {point(1).id: "d", point(2).id: "d"}
    os.kill(pid_of(store, 0), signal.SIGCONT)
    writer.join(30)
    assert not writer.is_alive()
    assert set(docs_of(store)) == {point(i).id for i in (1, 2, 3)}


def test_once_the_first_copy_has_a_write_no_read_sees_the_index_without_it(
    store: MirroredStore, stopped: Callable[[int], None]
) -> None:
    stopped(pid_of(store, 1))  # the write reaches the first copy, then waits on the second
    writer = in_thread(lambda: store.delete(Clause(must=(Match("doc_id", "d"),))))
    writer.join(1.0)
    assert writer.is_alive()
    with ThreadPoolExecutor(4) as pool:  # reads at once: the first copy is busy with one when the next comes
        for _ in range(5):
            assert answered_within(10, lambda: list(pool.map(lambda _: store.count(CHUNKS), range(4)))) == [0] * 4
    os.kill(pid_of(store, 1), signal.SIGCONT)
    writer.join(30)
    assert not writer.is_alive()
    store.close()
    first, second, write_log = copy_paths(store._copies[0].path)
    assert contents(first) == contents(second) == {}
    assert not write_log.exists()


def test_a_new_index_sends_its_schema_to_both_copies_at_once(tmp_path: Path, stopped: Callable[[int], None]) -> None:
    store = MirroredStore(tmp_path / "index")
    first, second, write_log = copy_paths(tmp_path / "index")
    stopped(pid_of(store, 0))  # the first copy takes the write and does not answer (a dead one would refuse it)
    failed: list[StoreUnavailable] = []
    writer = in_thread(lambda: _raised(store.ensure_schema, 4, into=failed))
    assert until(lambda: mirrored._holds_shard(second), 30)  # in turn, the second would wait for the first's answer
    store._copies[0].process.kill()  # then the first copy fails its write
    writer.join(30)
    assert not writer.is_alive()
    assert len(failed) == 1
    store.close()
    assert not mirrored._holds_shard(first)
    assert mirrored._holds_shard(second)
    assert write_log.exists()  # the next start makes the first copy from the second and applies the write to both
    again = MirroredStore(tmp_path / "index")
    again.upsert([point(1)])
    again.close()
    assert contents(first) == contents(second) != {}


def test_between_the_two_copies_reads_see_the_write(store: MirroredStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # the writer held where the first copy has the write, its lock is free, and the second is not yet taken
    between, go_on = threading.Event(), threading.Event()

    def hold(name: str) -> None:
        if name == "copies:first-written":
            between.set()
            go_on.wait(30)

    monkeypatch.setattr(mirrored, "crash_point", hold)
    writer = in_thread(lambda: store.upsert([point(3)]))
    assert between.wait(30)
    try:
        with ThreadPoolExecutor(4) as pool:  # reads at once: the first copy is busy with one when the next comes
            for _ in range(10):
                seen = list(pool.map(lambda _: store.count(CHUNKS), range(4)))
                assert seen == [3] * 4
    finally:
        go_on.set()
    writer.join(30)
    assert not writer.is_alive()


# A process writes through a two-copy store and dies by SIGKILL between the copies of its second write
# (`copies:first-written`, reached once per write: the schema, then the upsert).
_DIE_BETWEEN_COPIES = """
import sys
from pathlib import Path
from service.stores.base import StorePoint
from service.stores.mirrored import MirroredStore
store = MirroredStore(Path(sys.argv[1]))
store.ensure_schema(4)
points = [StorePoint(f"00000000-0000-0000-0000-{i:012d}", {"kind": "chunk", "doc_id": "d"}, dense=[1.0, i, 0.0, 0.5])
          for i in (1, 2)]
store.upsert(points, durable=False)
print("not reached", flush=True)
"""


def test_a_write_cut_off_between_the_copies_is_applied_to_both_at_the_next_start(tmp_path: Path) -> None:
    index = tmp_path / "index"
    child = subprocess.run(
        [sys.executable, "-c", _DIE_BETWEEN_COPIES, str(index)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PLUMBLINE_CRASH_AT": "copies:first-written#2"},
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    first, second, write_log = copy_paths(index)
    assert write_log.exists()
    again = MirroredStore(index)  # waits for the dead process's engine processes to let go of the copies
    try:
        assert set(docs_of(again)) == {point(1).id, point(2).id}
        assert again.health() is None
    finally:
        again.close()
    assert contents(first) == contents(second)
    assert len(contents(second)) == 2
    assert not write_log.exists()


def test_a_copy_held_by_a_live_engine_process_is_waited_for_then_refused(store: MirroredStore, tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="still held by an engine process"):
        MirroredStore(tmp_path / "index", lock_wait=0.3)
    store.close()
    again = MirroredStore(tmp_path / "index", lock_wait=0.3)
    try:
        assert again.count(CHUNKS) == 2
    finally:
        again.close()


def test_a_dead_engine_process_leaves_reads_to_the_other_copy_and_refuses_writes(store: MirroredStore) -> None:
    os.kill(pid_of(store, 0), signal.SIGKILL)
    store._copies[0].process.wait(10)
    assert store.count(CHUNKS) == 2  # read from the second copy
    failure = store.health()
    assert failure is not None
    assert "engine process of index exited" in failure
    assert "restart the service" in failure
    with pytest.raises(StoreUnavailable, match="engine process of index exited"):
        store.upsert([point(3)])
    assert store.count(CHUNKS) == 2


def test_the_second_copy_is_made_from_a_one_copy_index_and_dropped_when_back_to_one(tmp_path: Path) -> None:
    index = tmp_path / "index"
    one = single_copy(index)
    one.ensure_schema(4)
    one.upsert([point(1), point(2)])
    one.close()
    two = MirroredStore(index)
    two.upsert([point(3)])
    query = VectorQuery(DENSE, [1.0, 3.0, 0.0, 0.5], CHUNKS, 1)
    assert [p.id for p in two.query([query])[0]] == [point(3).id]
    two.close()
    first, second, _ = copy_paths(index)
    assert contents(first) == contents(second)
    assert len(contents(second)) == 3
    assert disk_used(second) <= disk_used(first) * 1.1  # the engine's sparse files copied as sparse
    back = single_copy(index)  # the second copy would be stale once this store writes
    try:
        assert not second.exists()
        assert back.count(CHUNKS) == 3
    finally:
        back.close()


def test_one_copy_applies_a_write_logged_by_two(tmp_path: Path) -> None:
    index = tmp_path / "index"
    two = MirroredStore(index)
    two.ensure_schema(4)
    two.close()
    _, _, write_log = copy_paths(index)
    # what a two-copy store leaves when killed before its first copy had the write
    write_log.write_bytes(pickle.dumps(("upsert", ([point(7)],), {"durable": True})))
    one = single_copy(index)
    try:
        assert set(docs_of(one)) == {point(7).id}
        assert not write_log.exists()
    finally:
        one.close()


def test_a_write_logged_before_the_regrouping_is_applied(tmp_path: Path) -> None:
    index = tmp_path / "index"
    first, second, write_log = closed_two_copies(index, point(1))
    sparse = StorePoint(
        point(2).id, point(2).payload, dense=[1.0, 2, 0.0, 0.5], sparse=SparseVector((3, 9), (0.5, 1.5))
    )
    call = pickle.dumps(("upsert", ([sparse],), {"durable": True}), protocol=0)
    # as the version before the service was grouped by job pickled it: BM25 vectors were service.sparse's
    assert b"cservice.stores.base\nSparseVector\n" in call
    write_log.write_bytes(call.replace(b"cservice.stores.base\nSparseVector\n", b"cservice.sparse\nSparseVector\n"))
    again = MirroredStore(index)
    try:
        assert again.health() is None
        assert set(docs_of(again)) == {point(1).id, point(2).id}
    finally:
        again.close()
    assert contents(first) == contents(second)
    assert not write_log.exists()


def test_a_logged_write_a_copy_refuses_is_dropped_there_and_that_copy_made_again_from_the_other(
    tmp_path: Path,
) -> None:
    index = tmp_path / "index"
    first, second, write_log = closed_two_copies(index, point(1))
    # a second copy that refuses the logged write each time: its vectors have another dimension
    shutil.rmtree(second)
    other = EdgeStore(second)
    other.ensure_schema(8)
    other.close()
    write_log.write_bytes(pickle.dumps(("upsert", ([point(3)],), {"durable": True})))
    again = MirroredStore(index)
    try:
        assert again.health() is None
        assert again.count(Clause()) == 2
        again.upsert([point(4)])  # writes are taken again
    finally:
        again.close()
    assert contents(first) == contents(second)
    assert set(contents(second)) == {point(1).id, point(3).id, point(4).id}
    assert not write_log.exists()


@pytest.mark.parametrize(("value", "store_type"), [("1", EdgeStore), ("2", MirroredStore)])
def test_the_setting_from_the_environment_chooses_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, store_type: type
) -> None:
    monkeypatch.setenv("PLUMBLINE_INDEX_COPIES", value)
    store = build_store(Settings(data_dir=tmp_path))
    try:
        assert type(store) is store_type
    finally:
        store.close()


def test_a_third_copy_is_refused_with_the_setting_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLUMBLINE_INDEX_COPIES", "3")
    with pytest.raises(ValidationError, match="index_copies"):
        Settings()


def test_copies_written_apart_are_made_to_agree_at_the_start(tmp_path: Path) -> None:
    index = tmp_path / "index"
    first, second, _ = closed_two_copies(index, point(1))
    # a version that knew one copy only writes the first; the second stays behind
    older = EdgeStore(first)
    older.upsert([point(2), point(3)])
    older.close()
    again = MirroredStore(index)
    try:
        counts = [again.count(CHUNKS) for _ in range(4)]
    finally:
        again.close()
    assert counts == [3] * 4
    assert contents(first) == contents(second)


@pytest.mark.parametrize("copies", ["2", "1"])
def test_the_graph_threshold_reaches_every_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copies: str) -> None:
    monkeypatch.setenv("PLUMBLINE_INDEX_COPIES", copies)
    monkeypatch.setenv("PLUMBLINE_INDEX_GRAPH_FROM", "3")
    store = build_store(Settings(data_dir=tmp_path))
    store.ensure_schema(4)
    store.upsert([point(1), point(2)])
    assert _hnsw_m(tmp_path) == {"index": 0} | ({"index-copy": 0} if copies == "2" else {})
    store.upsert([point(3)])  # the third point: each copy's write reopens its shard for graphs
    assert _hnsw_m(tmp_path) == {"index": 16} | ({"index-copy": 16} if copies == "2" else {})
    assert sorted(docs_of(store)) == [point(i).id for i in (1, 2, 3)]
    store.close()


def _hnsw_m(data_dir: Path) -> dict[str, int]:
    """Each copy's HNSW m, from the configuration its engine keeps on disk."""
    configs = data_dir.glob("index*/edge_config.json")
    return {c.parent.name: json.loads(c.read_text())["hnsw_config"]["m"] for c in configs}
