"""Kill-point harness: a real `plumbline serve` dies by SIGKILL at each write step, then restarts on its data.

`PLUMBLINE_CRASH_AT=NAME#N` (see `service.infra.faults`) makes the server kill itself the N-th time it reaches a
point: no exception, no rollback, no flush, as in a power cut. After the restart every invariant must hold:
- one whole version per document: its stored text, its chunks and what search returns all belong to the
  old version or all to the new one;
- supersession consistent: a committed current document that names `supersedes: X` hides X from fresh
  search, and X is current again once that document is gone;
- nothing acknowledged lost: every write answered 200 before the crash is there;
- the offline `plumbline doctor` finds the data directory clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from eval.cases import parse_jsonl
from service.stores.edge import EdgeStore
from service.stores.mirrored import copy_paths
from tests.server import ServerProcess, plumbline

pytestmark = pytest.mark.process

KEEP = {"id": "keep", "title": "Keep", "text": "# Keep\n\nThe acknowledged document about kestrel audits."}
POL_A = {"id": "pol/a", "title": "Travel 2025", "text": "# Travel\n\nEconomy class on every flight, says pelican."}
POL_B = {
    "id": "pol/b",
    "title": "Travel 2026",
    "text": "# Travel\n\nBusiness class past six hours, says pelican.",
    "supersedes": "pol/a",
}
X_OLD = {"id": "x", "title": "X", "text": "# X\n\n## One\n\nalphaold first part.\n\n## Two\n\nalphaold second part."}
X_NEW = {"id": "x", "title": "X", "text": "# X\n\n## One\n\nomeganew only part, rewritten."}


def search(client: httpx.Client, query: str) -> set[str]:
    r = client.post("/search", json={"query": query, "mode": "keyword", "k": 20})
    assert r.status_code == 200, r.text
    return {h["doc_id"] for h in r.json()["hits"]}


def crash_on(server: ServerProcess, method: str, path: str, **kwargs: Any) -> None:
    """Send the request that reaches the crash point: the connection drops and the process died by SIGKILL."""
    with server.client() as c, pytest.raises(httpx.TransportError):
        c.request(method, path, **kwargs)
    assert server.wait() == -9, server.log


def restart_and_check_doctor(data: Path, check: Any, env: dict[str, str] | None = None) -> None:
    # PLUMBLINE_REPAIR_ON_START=false in the environment shows what the start-up repair guards
    with ServerProcess(data, env=env) as server, server.client() as c:
        check(c)
    result = plumbline("doctor", "--data-dir", str(data), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("clean")


def assert_one_version_of_x(c: httpx.Client) -> str:
    x = c.get("/documents/x").json()
    assert x["text"] in (X_OLD["text"], X_NEW["text"])
    new = x["text"] == X_NEW["text"]
    assert all(chunk["text"] in x["text"] for chunk in x["chunks"])
    assert len(x["chunks"]) == (1 if new else 2)
    assert ("x" in search(c, "omeganew")) is new
    assert ("x" in search(c, "alphaold")) is not new
    return "new" if new else "old"


@pytest.mark.parametrize(
    "point",
    [
        "ingest:chunks-written",
        "ingest:records-written",
        "ingest:committed",
        "ingest:old-deleted",
        "ingest:statuses-set",
    ],
)
def test_a_crash_at_each_ingest_step(tmp_path: Path, point: str) -> None:
    crash_in_the_second_batch(tmp_path / "data", f"{point}#2")
    # committed before the crash point or not, as the step's place in the protocol says
    committed = point not in ("ingest:chunks-written", "ingest:records-written")
    restart_and_check_doctor(tmp_path / "data", lambda c: assert_the_second_batch_whole(c, committed))


# Each write of the default store goes to the first copy of the index, then to the second (`copies:first-written`
# between them, once per write): the server's start makes one write, the first batch three, the second five (chunks,
# records, commit markers, old generation deleted, statuses), the third of them the commit.
@pytest.mark.parametrize("nth", [5, 6, 7, 8, 9])
def test_a_crash_between_the_two_copies_of_a_write(tmp_path: Path, nth: int) -> None:
    data = tmp_path / "data"
    crash_in_the_second_batch(data, f"copies:first-written#{nth}")
    # the write cut off between the copies is applied to both at the restart: as if it had finished
    restart_and_check_doctor(data, lambda c: assert_the_second_batch_whole(c, committed=nth >= 7))
    first, second, write_log = copy_paths(data / "index")
    assert points_of(first) == points_of(second)
    assert not write_log.exists()


# A new index's first write (its schema, at the server's start) goes to both copies at once; killed when the first
# has answered, the second may have it or not: the restart makes the copies agree and applies the write to both.
def test_a_crash_while_a_new_index_gets_its_schema(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, env={"PLUMBLINE_CRASH_AT": "copies:first-written#1"}).start(wait_ready=False)
    assert server.wait() == -9, server.log

    def check(c: httpx.Client) -> None:
        assert c.post("/documents", json={"documents": [KEEP]}).status_code == 200
        assert search(c, "kestrel") == {"keep"}

    restart_and_check_doctor(data, check)
    first, second, write_log = copy_paths(data / "index")
    assert points_of(first) == points_of(second) != {}
    assert not write_log.exists()


# The first batch leaves 11 points (4 chunks, 3 records, 3 heads, the index's manifest). Only a durable write (the
# commit markers) can switch the layout: the second batch's commit takes the index past 12 and the shard is reopened
# for HNSW graphs. Killed there, after the engine wrote the new configuration and before its optimiser ran, the batch
# is committed (its marker was flushed first), the restart finishes it and opens the index with graphs configured,
# and later writes and searches work on it.
def test_a_crash_while_the_index_switches_to_graphs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"PLUMBLINE_INDEX_COPIES": "1", "PLUMBLINE_INDEX_GRAPH_FROM": "12"}
    crash_in_the_second_batch(data, "edge:graph-configured", env)
    restart_and_check_doctor(data, lambda c: assert_the_second_batch_whole(c, committed=True), env)
    with ServerProcess(data, env=env) as server, server.client() as c:
        assert c.post("/documents", json={"documents": [{"id": "late", "text": "A heron nests."}]}).status_code == 200
        assert search(c, "heron") == {"late"}
    store = EdgeStore(data / "index")
    assert store.graphs
    store.close()


def crash_in_the_second_batch(data: Path, crash_at: str, env: dict[str, str] | None = None) -> None:
    """Ingest KEEP, POL_A and X_OLD, then die by SIGKILL at `crash_at` while ingesting POL_B and X_NEW."""
    with ServerProcess(data, env={"PLUMBLINE_CRASH_AT": crash_at, **(env or {})}) as server:
        with server.client() as c:
            assert c.post("/documents", json={"documents": [KEEP, POL_A, X_OLD]}).status_code == 200
        crash_on(server, "POST", "/documents", json={"documents": [POL_B, X_NEW]})


def assert_the_second_batch_whole(c: httpx.Client, committed: bool) -> None:
    """The first batch all there; the second, one batch, committed whole (both documents, X's new version, POL_B
    superseding POL_A) if `committed`, else not at all."""
    assert c.get("/documents/keep").json()["text"] == KEEP["text"]
    assert assert_one_version_of_x(c) == ("new" if committed else "old")
    assert (c.get("/documents/pol/b").status_code == 200) is committed
    assert (c.get("/documents/pol/a").json()["superseded_by"] == "pol/b") is committed
    assert search(c, "pelican") == ({"pol/b"} if committed else {"pol/a"})


def points_of(copy: Path) -> dict[str, Any]:
    store = EdgeStore(copy)
    try:
        points, _ = store.dump(None, 10_000)
        return {p.id: dict(p.payload) for p in points}
    finally:
        store.close()


def test_a_crash_while_deleting_a_superseding_document(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, env={"PLUMBLINE_CRASH_AT": "delete:points-deleted"}) as server:
        with server.client() as c:
            assert c.post("/documents", json={"documents": [POL_A, POL_B]}).status_code == 200
            assert search(c, "pelican") == {"pol/b"}
        crash_on(server, "DELETE", "/documents/pol/b")

    def check(c: httpx.Client) -> None:
        assert c.get("/documents/pol/b").status_code == 404
        assert c.get("/documents/pol/a").json()["superseded_by"] is None
        assert search(c, "pelican") == {"pol/a"}  # current again: the start-up check restored its status

    restart_and_check_doctor(data, check)


def cases(n: int) -> str:
    return "".join(
        f'{{"id": "c{i}", "question": "pelican {i}", "relevant": [{{"doc_id": "pol/a"}}]}}\n' for i in range(n)
    )


def audited(c: httpx.Client, action: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = c.get("/admin/audit", params={"action": action}).json()["entries"]
    return entries


# the second PUT's own commit (the first PUT commits the set with its audit entry), and just after it: a set stored is
# audited, one not stored is not
@pytest.mark.parametrize(("point", "replaced"), [("state:before-commit#2", False), ("set:written#2", True)])
def test_a_crash_while_replacing_a_labelled_set(tmp_path: Path, point: str, replaced: bool) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, env={"PLUMBLINE_CRASH_AT": point}) as server:
        with server.client() as c:
            assert c.put("/eval/sets/s", content=cases(3)).json()["cases"] == 3
        crash_on(server, "PUT", "/eval/sets/s", content=cases(5))

    def check(c: httpx.Client) -> None:
        text = c.get("/eval/sets/s").text
        assert [case.id for case in parse_jsonl(text)] == [f"c{i}" for i in range(5 if replaced else 3)]
        assert [s["name"] for s in c.get("/eval/sets").json()] == ["handbook", "plain", "s"]
        assert [e["detail"]["cases"] for e in audited(c, "set.put")] == ([5, 3] if replaced else [3])

    restart_and_check_doctor(data, check)


# The review is the restarted server's first write to the state store, killed at the first commit that request makes
# or at the second (where an entry appended after the change would commit): after the restart the review and its audit
# entry are both there or neither is, and a review answered is there.
@pytest.mark.parametrize("nth", [1, 2])
def test_an_incident_review_and_its_audit_entry_commit_together(tmp_path: Path, nth: int) -> None:
    data = tmp_path / "data"
    with ServerProcess(data) as server, server.client() as c:
        assert c.post("/documents", json={"documents": [KEEP]}).status_code == 200
        body = {"question": "who audits?", "doc_id": "keep", "evidence": "kestrel audits", "reporter": "ann"}
        reported = c.post("/eval/incidents", json=body)
        assert reported.status_code == 201, reported.text
    incident = str(reported.json()["incident_id"])
    review = {"reviewer": "rev", "status": "accepted", "reason": "a real miss"}
    with ServerProcess(data, env={"PLUMBLINE_CRASH_AT": f"state:before-commit#{nth}"}) as server:
        try:
            with server.client() as c:
                answered = c.patch(f"/eval/incidents/{incident}", json=review).status_code == 200
        except httpx.TransportError:
            assert server.wait() == -9, server.log
            answered = False
    assert answered or nth == 1  # the review commits once: killed at its commit, else answered

    def check(c: httpx.Client) -> None:
        reviewed = c.get(f"/eval/incidents/{incident}").json()["status"] == "accepted"
        entries = [e["target"] for e in audited(c, "incident.review")]
        assert (reviewed, entries) == ((True, [incident]) if answered else (False, []))
        assert len(audited(c, "incident.report")) == 1

    restart_and_check_doctor(data, check)
