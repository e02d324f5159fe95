"""An audit entry commits with the change it records, on SQLite and on a real PostgreSQL server: each state-store
write that makes an audited change appends the entry declared around it (`AuditRecords.auditing`) in its own
transaction, so a write whose entry cannot be written is not made, and an entry is never written for a change that was
not made. A change kept outside the store (`after`) gets its entry once its block has ended."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text

from eval.cases import Label
from eval.errors import AlreadyExists
from eval.storage import canonical_digest
from service.state import StateStore, open_state
from service.state.audit import Pending
from service.state.incidents import NewReport
from service.state.keys import ApiKey
from service.state.schema import now_iso

RECORD = json.dumps({"run_id": "r0", "cases": [{"id": "a", "metrics": {"hit@5": 1.0}}]}, indent=1)


@pytest.fixture
def state(state_url: str) -> Iterator[StateStore]:
    store = open_state(state_url)
    yield store
    store.close()


def report(tenant: str | None = "acme") -> NewReport:
    return NewReport(
        "handbook", tenant, "What is the refund window?", "refund window", "billing", Label(doc_id="d"), {}, True, "ann"
    )


def key(tenant: str | None = "acme") -> ApiKey:
    return ApiKey("0123456789abcdef", "bot", ("search",), tenant, "0" * 64, now_iso(), "admin")


def incident_id(state: StateStore) -> int:
    return state.incidents.search()[0].id


@dataclass(frozen=True)
class Write:
    """An audited change: what comes before it, the change (returning what its entry's target is), whether it was
    made, and what its entry says besides."""

    action: str
    change: Callable[[StateStore], object]
    made: Callable[[StateStore], bool]
    target: Callable[[StateStore], str]
    target_tenant: str | None
    detail: dict[str, Any]
    before: Callable[[StateStore], object] = lambda _: None


def _run(state: StateStore) -> None:
    state.save_run("r1", "s", "r1", json.dumps({"gate": "pass"}), "{}", "manual", "acme")


def _job(state: StateStore) -> None:
    state.jobs.start("r1", "s", "manual", 10, "me", "acme")


def _job_cancelled(state: StateStore) -> bool:
    job = state.jobs.get("r1")
    return job is not None and job.cancel_requested


WRITES = [
    Write(
        "set.put",
        lambda s: s.put_set("s", '{"id": "a"}\n{"id": "b"}\n'),
        lambda s: s.get_set("s") is not None,
        lambda _: "s",
        None,
        {"cases": 2},
    ),
    Write(
        "eval.run",
        _run,
        lambda s: s.get_run("r1") is not None,
        lambda _: "r1",
        "acme",
        {"kind": "manual", "gate": "pass"},
    ),
    Write("eval.run", _job, lambda s: s.jobs.get("r1") is not None, lambda _: "r1", "acme", {"kind": "manual"}),
    Write(
        "eval.cancel", lambda s: s.jobs.cancel("r1", "-"), _job_cancelled, lambda _: "r1", "acme", {"set": "s"}, _job
    ),
    Write(
        "eval.delete",
        lambda s: s.delete_run("r1"),
        lambda s: s.get_run("r1") is None,
        lambda _: "r1",
        "acme",
        {"set": "s", "kind": "manual"},
        _run,
    ),
    Write(
        "baseline.promote",
        lambda s: s.put_baseline("main", "r0", RECORD, replace=False),
        lambda s: s.get_baseline("main") is not None,
        lambda _: "main",
        None,
        {"replaced": None, "sha256": canonical_digest(json.loads(RECORD))},
    ),
    Write(
        "incident.report",
        lambda s: s.incidents.report(report()),
        lambda s: bool(s.incidents.search()),
        lambda s: str(incident_id(s)),
        "acme",
        {"merged": False, "set": "handbook"},
    ),
    Write(
        "incident.review",
        lambda s: s.incidents.update(incident_id(s), "rev", "accepted", {"status": "accepted"}),
        lambda s: s.incidents.search()[0].status == "accepted",
        lambda s: str(incident_id(s)),
        "acme",
        {},
        lambda s: s.incidents.report(report()),
    ),
    Write(
        "key.create",
        lambda s: s.keys.create(key()),
        lambda s: bool(s.keys.all()),
        lambda _: key().key_id,
        "acme",
        {"name": "bot", "roles": ["search"], "tenant": "acme"},
    ),
    Write(
        "key.rotate",
        lambda s: s.keys.rotate(key().key_id, "1" * 64, 60),
        lambda s: s.keys.all()[0].rotated_at is not None,
        lambda _: key().key_id,
        "acme",
        {},
        lambda s: s.keys.create(key()),
    ),
    Write(
        "key.revoke",
        lambda s: s.keys.revoke(key().key_id),
        lambda s: s.keys.all()[0].revoked_at is not None,
        lambda _: key().key_id,
        "acme",
        {},
        lambda s: s.keys.create(key()),
    ),
]
IDS = [f"{w.action}-{n}" for n, w in enumerate(WRITES)]


def declared(action: str, target: str = "") -> Pending:
    return Pending("ci (0123456789abcdef)", "acme", action, target, {"asked": True}, request_id="req-1")


@pytest.mark.parametrize("write", WRITES, ids=IDS)
def test_each_audited_write_appends_its_entry_once_with_what_the_store_knows(state: StateStore, write: Write) -> None:
    write.before(state)
    with state.audit.auditing(declared(write.action)) as entry:
        write.change(state)
    assert write.made(state)
    assert entry.written
    [found] = state.audit.page()
    assert (found.actor, found.tenant, found.action, found.request_id) == (
        "ci (0123456789abcdef)",
        "acme",
        write.action,
        "req-1",
    )
    assert (found.target, found.target_tenant) == (write.target(state), write.target_tenant)
    assert found.detail == {"asked": True, **write.detail}
    assert state.audit.page(target_tenant="acme") == ([found] if write.target_tenant else [])


@pytest.mark.parametrize("write", WRITES, ids=IDS)
def test_a_write_whose_entry_cannot_be_written_is_not_made(state: StateStore, write: Write) -> None:
    write.before(state)
    with state.engine.begin() as conn:  # the audit log cannot be written
        conn.execute(text("ALTER TABLE audit_log RENAME TO audit_log_away"))
    with pytest.raises(Exception), state.audit.auditing(declared(write.action)):  # noqa: B017, PT011 (any database error)
        write.change(state)
    with state.engine.begin() as conn:
        conn.execute(text("ALTER TABLE audit_log_away RENAME TO audit_log"))
    assert not write.made(state)
    assert state.audit.page() == []


@pytest.mark.parametrize("write", WRITES, ids=IDS)
def test_a_write_without_a_declared_entry_appends_none(state: StateStore, write: Write) -> None:
    write.before(state)
    write.change(state)
    assert write.made(state)
    assert state.audit.page() == []


def test_a_refused_or_absent_change_leaves_no_entry(state: StateStore) -> None:
    state.put_baseline("main", "r0", RECORD, replace=False)
    with pytest.raises(AlreadyExists), state.audit.auditing(declared("baseline.promote", "main")):
        state.put_baseline("main", "r1", RECORD, replace=False)
    with state.audit.auditing(declared("key.revoke", "nope")) as entry:
        assert not state.keys.revoke("nope")  # no such key: nothing changed
    with state.audit.auditing(declared("eval.cancel", "nope")):
        assert not state.jobs.cancel("nope", "-")
    with state.audit.auditing(declared("eval.run")):
        pass  # a scheduled run that was not due: no write, no entry
    assert not entry.written
    assert state.audit.page() == []


def test_an_entry_is_written_once_by_the_first_audited_write_of_its_block(state: StateStore) -> None:
    with state.audit.auditing(declared("set.put")):
        state.put_set("s", "{}\n")
        state.put_set("t", "{}\n{}\n")
    assert [(e.target, e.detail["cases"]) for e in state.audit.page()] == [("s", 1)]


def test_an_entry_after_the_change_is_written_when_its_block_ends_and_not_when_it_fails(state: StateStore) -> None:
    with state.audit.auditing(declared("documents.ingest", "a"), after=True) as entry:
        assert state.audit.page() == []
        entry.fill(target_tenant="acme", detail={"chunks": 3})
    with pytest.raises(RuntimeError), state.audit.auditing(declared("documents.ingest", "b"), after=True):
        raise RuntimeError("the ingest failed")
    [found] = state.audit.page()
    assert (found.target, found.target_tenant, found.detail) == ("a", "acme", {"asked": True, "chunks": 3})


def test_a_thread_that_outlives_the_block_writes_nothing(state: StateStore) -> None:
    """A background run started inside a block (which inherited its context) does not write the block's entry."""
    import contextvars

    with state.audit.auditing(declared("eval.run")):
        context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(state.put_set, "s", "{}\n"))
    thread.start()
    thread.join()
    assert state.get_set("s") is not None
    assert state.audit.page() == []
