"""The state store's contract, run on SQLite and on a real PostgreSQL server (see conftest.state_url)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import event, text

from eval.cases import Label
from eval.errors import AlreadyExists, UnknownName
from service.api.app import create_app
from service.errors import StoreUnavailable
from service.runtime import Components
from service.settings import Settings
from service.state import StateStore, open_state
from service.state.incidents import NewReport
from service.state.schema import metadata
from service.state.store import HEAD, MIGRATIONS
from tests.fakes import FakeEmbedder


@pytest.fixture
def state(state_url: str) -> Iterator[StateStore]:
    store = open_state(state_url)
    yield store
    store.close()


def report(question: str = "What is the refund window?", *, reporter: str = "ann", **kw: object) -> NewReport:
    from eval.incidents import question_key

    fields: dict[str, object] = {
        "set_name": "handbook",
        "tenant": None,
        "question": question,
        "question_key": question_key(question),
        "category": "billing",
        "label": Label(doc_id="billing/refunds", evidence="30 days"),
        "filters": {},
        "fresh_only": True,
        "reporter": reporter,
    }
    fields.update(kw)
    return NewReport(**fields)  # type: ignore[arg-type]


# -- schema and migrations -------------------------------------------------------------------------


def test_migrations_build_exactly_the_declared_schema(state: StateStore) -> None:
    assert state.revision() == HEAD == "0008"
    with state.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_head_is_the_newest_migration() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD


@pytest.mark.process
def test_a_store_at_the_newest_schema_opens_without_alembic(state_url: str) -> None:
    open_state(state_url).close()  # migrated here
    opened = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from service.state import open_state; s = open_state(sys.argv[1]); print(s.revision()); "
            "s.close(); print(sorted(m for m in sys.modules if m.partition('.')[0] == 'alembic'))",
            state_url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert opened.stdout.splitlines() == [HEAD, "[]"]


def test_upgrading_an_older_schema_keeps_its_rows(state_url: str) -> None:
    old = StateStore(state_url)
    old.migrate("0001")
    old.put_set("handbook", "line\n")
    with pytest.raises(Exception, match=r"incidents|state store is unavailable") as missing:
        old.incidents.search()  # the incidents tables do not exist at 0001
    assert "incidents" in getattr(missing.value, "driver", str(missing.value))  # SQLite's error is a 503's, logged
    old.close()
    new = open_state(state_url)
    assert new.revision() == HEAD
    assert new.get_set("handbook") == "line\n"
    assert new.incidents.search() == []
    new.close()


def written_at(state_url: str, revision: str, insert: str) -> None:
    """A store migrated to `revision` only, holding the row `insert` writes, as an older version left it."""
    old = StateStore(state_url)
    old.migrate(revision)
    with old.engine.begin() as conn:
        conn.execute(text(insert))
    old.close()


def test_runs_stored_before_run_kinds_become_manual_runs(state_url: str) -> None:
    written_at(
        state_url,
        "0002",
        "INSERT INTO eval_runs (run_id, set_name, created_at, summary, record) "
        "VALUES ('20260101T000000000000-a', 's', 'x', '{}', '{}')",
    )
    new = open_state(state_url)
    assert [json.loads(r)["kind"] for r in new.run_summaries(10, 0, None, None)] == ["manual"]
    assert new.latest_run_ids("monitoring") == []  # an old run never shows as production quality
    new.close()


def test_jobs_started_before_keys_were_recorded_keep_their_rows_with_no_key(state_url: str) -> None:
    written_at(
        state_url,
        "0004",
        "INSERT INTO eval_jobs (run_id, set_name, kind, status, done, total, cancel, owner, started_at, "
        "heartbeat_at) VALUES ('r0', 's', 'manual', 'running', 0, 10, 0, 'me', 'x', 'x')",
    )
    new = open_state(state_url)
    job = new.jobs.get("r0")
    assert job is not None
    assert (job.set_name, job.started_by) == ("s", None)  # only an eval:admin key may cancel it
    new.jobs.start("r1", "s", "manual", 10, "me", started_by="0123456789abcdef")
    started = new.jobs.get("r1")
    assert started is not None
    assert started.started_by == "0123456789abcdef"
    new.close()


def test_audit_entries_written_before_target_tenants_were_recorded_keep_their_rows(state_url: str) -> None:
    written_at(
        state_url,
        "0006",
        "INSERT INTO audit_log (at, actor, tenant, action, target, detail) "
        "VALUES ('2026-01-01T00:00:00.000000Z', 'ann (k1)', 'acme', 'documents.ingest', 'd1', '{\"chunks\": 2}')",
    )
    new = open_state(state_url)
    [old] = new.audit.page()
    assert (old.actor, old.tenant, old.target, old.detail, old.target_tenant) == (
        "ann (k1)",
        "acme",
        "d1",
        {"chunks": 2},
        None,  # not recorded then
    )
    new.audit.append("bo (k2)", None, "documents.delete", "d1", {}, target_tenant="acme")
    assert [e.actor for e in new.audit.page(target_tenant="acme")] == ["bo (k2)"]
    new.close()


def test_replicas_starting_together_migrate_and_import_once(state_url: str, tmp_path: Path) -> None:
    (tmp_path / "eval" / "sets").mkdir(parents=True)
    (tmp_path / "eval" / "sets" / "s.jsonl").write_text('{"id": "a", "question": "q", "relevant": [{"doc_id": "d"}]}\n')
    with ThreadPoolExecutor(8) as pool:
        stores = list(pool.map(lambda _: open_state(state_url, tmp_path / "eval"), range(8)))
    assert {s.revision() for s in stores} == {HEAD}
    for s in stores:
        s.close()


def test_sqlite_commits_durably_whatever_the_builds_default(tmp_path: Path) -> None:
    store = open_state(f"sqlite:///{tmp_path / 's.db'}")
    store.engine.dispose()

    def build_default_normal(dbapi_connection: Any, _: Any) -> None:
        # some SQLite builds default to synchronous=NORMAL in WAL mode (a commit may be lost at a power cut)
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(store.engine, "connect", build_default_normal, insert=True)  # runs before the store's own
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    store.close()


# -- sets, runs, baselines -------------------------------------------------------------------------


def test_sets_put_replace_and_list(state: StateStore) -> None:
    assert state.get_set("a") is None
    state.put_set("b", "one\n")
    state.put_set("a", "two\n")
    state.put_set("b", "three\n")
    assert state.get_set("b") == "three\n"
    assert state.set_names() == ["a", "b"]


def test_runs_are_listed_newest_first_and_the_latest_per_set_and_kind(state: StateStore) -> None:
    runs = (
        ("20260101-a", "s1", "monitoring"),
        ("20260102-b", "s2", "monitoring"),
        ("20260103-c", "s1", "monitoring"),
        ("20260104-d", "s1", "experiment"),
    )
    for run_id, set_name, kind in runs:
        summary = json.dumps({"unit": "chunk", "cases": 1, "metrics": {}, "gate": None})
        state.save_run(run_id, set_name, run_id, summary, json.dumps({"run_id": run_id}), kind)
    assert [json.loads(r)["run_id"] for r in state.run_summaries(10, 0, None, None)] == [
        "20260104-d",
        "20260103-c",
        "20260102-b",
        "20260101-a",
    ]
    assert [json.loads(r)["run_id"] for r in state.run_summaries(1, 1, None, None)] == ["20260103-c"]
    assert [json.loads(r)["run_id"] for r in state.run_summaries(10, 0, "s1", "monitoring")] == [
        "20260103-c",
        "20260101-a",
    ]
    assert [json.loads(r)["kind"] for r in state.run_summaries(10, 0, "s1", None)] == [
        "experiment",
        "monitoring",
        "monitoring",
    ]
    assert state.latest_run_ids("monitoring") == [("s1", "20260103-c"), ("s2", "20260102-b")]
    assert state.latest_run_ids("experiment") == [("s1", "20260104-d")]
    assert state.latest_run_ids("manual") == []
    assert json.loads(state.get_run("20260102-b") or "{}") == {"run_id": "20260102-b"}
    assert state.get_run("nope") is None


def test_a_lease_has_one_holder_until_it_is_released_or_expires(state: StateStore) -> None:
    assert state.leases.acquire("monitoring:s", "a", 60)
    assert not state.leases.acquire("monitoring:s", "b", 60)
    assert state.leases.holder("monitoring:s") == "a"
    assert state.leases.acquire("monitoring:s", "a", 60)  # the holder renews it
    assert state.leases.acquire("monitoring:other", "b", 60)  # leases are by name
    state.leases.release("monitoring:s", "b")  # not b's to release
    assert state.leases.holder("monitoring:s") == "a"
    state.leases.release("monitoring:s", "a")
    assert state.leases.holder("monitoring:s") is None
    assert state.leases.acquire("monitoring:s", "b", -1)  # already expired: anyone may take it
    assert state.leases.holder("monitoring:s") is None
    assert state.leases.acquire("monitoring:s", "a", 60)


def test_concurrent_lease_takers_get_exactly_one_lease(state: StateStore) -> None:
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: state.leases.acquire("monitoring:s", f"owner-{i}", 60), range(16)))
    assert won.count(True) == 1


def test_a_job_reports_progress_takes_a_cancel_and_records_its_end(state: StateStore) -> None:
    state.jobs.start("r1", "s", "manual", 100, "me")
    assert state.jobs.progress("r1", 64) is False
    job = state.jobs.get("r1")
    assert job is not None
    assert (job.status, job.done, job.total, job.cancel_requested) == ("running", 64, 100, False)
    assert state.jobs.cancel("r1", "not used: it is running")
    assert state.jobs.progress("r1", 100) is True  # the runner learns of it at its next batch
    state.jobs.finish("r1", "cancelled", "cancelled after 100 cases")
    job = state.jobs.get("r1")
    assert job is not None
    assert (job.status, job.error, job.finished_at is not None) == ("cancelled", "cancelled after 100 cases", True)
    assert not state.jobs.cancel("r1", "not used")  # not running any more
    assert state.jobs.get("nope") is None
    state.jobs.start("r2", "s", "manual", 10, "me")
    state.jobs.finish("r2", "done")
    state.jobs.finish("r2", "failed", "a step after the run was stored")  # stored means done
    done = state.jobs.get("r2")
    assert done is not None
    assert (done.status, done.done, done.error) == ("done", 10, None)


def test_a_running_or_queued_job_whose_heartbeat_stopped_reads_as_lost(state: StateStore) -> None:
    state.jobs.start("r1", "s", "manual", 100, "a process that died")
    state.jobs.start("r2", "s", "manual", 100, "a process that died", queued=True)
    with state.engine.begin() as conn:
        conn.execute(text("UPDATE eval_jobs SET heartbeat_at = '2020-01-01T00:00:00.000000Z'"))
    assert [(j.status, j.position) for r in ("r1", "r2") if (j := state.jobs.get(r))] == [("lost", None)] * 2


def test_a_queued_job_shows_its_place_in_its_group_starts_or_ends_cancelled_at_once(state: StateStore) -> None:
    for run_id, tenant, owner in (
        ("r1", "acme", "me"),
        ("r2", "beta", "me"),
        ("r3", "acme", "me"),
        ("r4", "acme", "b"),
    ):
        state.jobs.start(run_id, "s", "manual", 10, owner, tenant, queued=True)
    assert [j.position for r in ("r1", "r2", "r3", "r4") if (j := state.jobs.get(r))] == [1, 1, 2, 1]
    assert state.jobs.begin("r1")
    assert not state.jobs.begin("r1")  # running already
    assert [(j.status, j.position) for r in ("r1", "r3") if (j := state.jobs.get(r))] == [
        ("running", None),
        ("queued", 1),
    ]
    assert state.jobs.cancel("r3", "cancelled while queued")
    ended = state.jobs.get("r3")
    assert ended is not None
    assert (ended.status, ended.error, ended.cancel_requested, ended.finished_at is not None) == (
        "cancelled",
        "cancelled while queued",
        True,
        True,
    )
    assert not state.jobs.begin("r3")  # its owner finds it cancelled when its turn comes
    assert not state.jobs.cancel("r3", "again")
    state.jobs.finish("r2", "cancelled", "the service is shutting down")  # shutdown ends a queued job too
    assert (job := state.jobs.get("r2")) is not None
    assert (job.status, job.error) == ("cancelled", "the service is shutting down")


def test_a_baseline_is_replaced_only_when_asked_and_kept_in_history(state: StateStore) -> None:
    assert state.put_baseline("main", "r1", "one", replace=False) is None
    with pytest.raises(AlreadyExists, match="replace"):
        state.put_baseline("main", "r2", "two", replace=False)
    assert state.get_baseline("main") == "one"
    assert state.put_baseline("main", "r2", "two", replace=True) == "r1"
    assert state.get_baseline("main") == "two"
    assert [run_id for run_id, _ in state.baseline_history("main")] == ["r1"]


# -- incidents -------------------------------------------------------------------------------------


def test_a_second_report_of_the_same_question_merges(state: StateStore) -> None:
    first, merged = state.incidents.report(report())
    assert not merged
    assert first.reports == 1
    again, merged = state.incidents.report(
        report("what is the REFUND window", reporter="bo", label=Label(doc_id="billing/refunds", evidence="annual"))
    )
    assert merged
    assert (again.id, again.reports, again.reporters) == (first.id, 2, ("ann", "bo"))
    assert [label.evidence for label in again.labels] == ["30 days", "annual"]
    assert [e.action for e in again.events] == ["reported", "merged"]
    assert [r.question for r in again.reports_detail] == ["What is the refund window?", "what is the REFUND window"]


def test_the_same_question_in_another_set_or_tenant_is_another_incident(state: StateStore) -> None:
    a, _ = state.incidents.report(report())
    b, _ = state.incidents.report(report(set_name="other"))
    c, _ = state.incidents.report(report(tenant="acme"))
    assert len({a.id, b.id, c.id}) == 3


def test_concurrent_reports_of_distinct_questions_leave_one_incident_each(state: StateStore) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: state.incidents.report(report(f"question number {n}")), range(50)))
    found = state.incidents.search(limit=500)
    assert len(found) == 50
    assert {i.reports for i in found} == {1}


def test_concurrent_reports_of_one_question_leave_one_incident_with_every_report(state: StateStore) -> None:
    barrier = threading.Barrier(16)

    def post(n: int) -> bool:
        if n < 16:
            barrier.wait()
        return state.incidents.report(report(reporter=f"r{n}"))[1]

    with ThreadPoolExecutor(16) as pool:
        merged = list(pool.map(post, range(50)))
    (only,) = state.incidents.search(limit=500)
    assert merged.count(False) == 1
    detail = state.incidents.get(only.id)
    assert (detail.reports, len(detail.reports_detail), len(detail.reporters)) == (50, 50, 50)


def test_search_filters_and_pages(state: StateStore) -> None:
    ids = [state.incidents.report(report(f"q {n}", category="it" if n % 2 else "hr"))[0].id for n in range(5)]
    state.incidents.report(report("q 1", reporter="zed", category="it"))
    state.incidents.update(ids[0], "rev", "accepted", {"status": "accepted", "reason": "ok"})
    assert [i.id for i in state.incidents.search(status="accepted")] == [ids[0]]
    assert [i.id for i in state.incidents.search(category="it")] == [ids[3], ids[1]]
    assert [i.id for i in state.incidents.search(reporter="zed")] == [ids[1]]
    first = state.incidents.search(limit=2)
    rest = state.incidents.search(limit=10, before=first[-1].id)
    assert [i.id for i in first + rest] == sorted(ids, reverse=True)
    later = state.incidents.get(ids[1]).updated_at
    assert {i.id for i in state.incidents.search(since=later)} >= {ids[1]}
    assert ids[2] not in {i.id for i in state.incidents.search(since=later)}


def test_review_keeps_history_and_refuses_a_question_another_incident_has(state: StateStore) -> None:
    from eval.incidents import question_key

    a, _ = state.incidents.report(report("first question"))
    b, _ = state.incidents.report(report("second question"))
    rejected = state.incidents.update(a.id, "rev", "rejected", {"status": "rejected", "reason": "not ours"})
    assert (rejected.status, rejected.reason) == ("rejected", "not ours")
    assert [e.action for e in rejected.events] == ["reported", "rejected"]
    with pytest.raises(AlreadyExists):
        state.incidents.update(
            b.id, "rev", "edited", {"question": "First question!", "question_key": question_key("First question!")}
        )
    with pytest.raises(UnknownName):
        state.incidents.update(999, "rev", "edited", {"category": "x"})
    assert state.incidents.get(b.id).question == "second question"


def test_outcomes_remember_the_first_passing_run(state: StateStore) -> None:
    a, _ = state.incidents.report(report("a"))
    b, _ = state.incidents.report(report("b"))
    state.incidents.record_outcomes("run1", {a.id: "passed", b.id: "failed"})
    state.incidents.record_outcomes("run2", {a.id: "passed", b.id: "passed"})
    assert state.incidents.outcome_inputs([a.id, b.id]) == {a.id: (True, None), b.id: (True, None)}
    assert state.incidents.get(a.id).first_passed_run == "run1"
    assert state.incidents.get(b.id).first_passed_run == "run2"
    state.incidents.record_outcomes("run3", {a.id: "regressed"})
    got = state.incidents.get(a.id)
    assert (got.first_passed_run, got.last_run, got.last_outcome) == ("run1", "run3", "regressed")


def test_the_first_report_that_gives_k_sets_it(state: StateStore) -> None:
    a, _ = state.incidents.report(report("a"))
    assert a.k is None
    assert state.incidents.report(report("a", k=5))[0].k == 5
    assert state.incidents.report(report("a", k=3))[0].k == 5
    assert state.incidents.outcome_inputs([a.id]) == {a.id: (False, 5)}


def test_counts_and_sets_by_status(state: StateStore) -> None:
    a, _ = state.incidents.report(report("a", category="hr"))
    state.incidents.report(report("b", category="hr"))
    state.incidents.report(report("c", category="it", set_name="other"))
    state.incidents.update(a.id, "rev", "accepted", {"status": "accepted"})
    assert sorted(state.incidents.counts()) == [("accepted", "hr", 1), ("new", "hr", 1), ("new", "it", 1)]
    assert state.incidents.set_names(["accepted"]) == ["handbook"]
    assert [i.question for i in state.incidents.for_set("handbook", ["accepted", "new"])] == ["a", "b"]


def test_rows_survive_a_new_engine(state: StateStore) -> None:
    a, _ = state.incidents.report(report())
    state.close()
    fresh = StateStore(state.url)
    with fresh.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM incidents")).scalar() == 1
    assert fresh.incidents.get(a.id).question == "What is the refund window?"
    fresh.close()


def test_an_unreachable_database_is_a_clear_503_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://secretuser@127.0.0.1:{port}/secretdb"
    with pytest.raises(StoreUnavailable, match="the state store is unavailable") as refused:
        open_state(url)
    assert str(port) not in str(refused.value)  # the driver's words are logged, and kept apart from the message
    assert f"port {port} failed" in refused.value.driver  # type: ignore[attr-defined]
    app = create_app(
        Settings(data_dir=tmp_path / "data", state_url=url, auth="on"),
        components=Components(embedder=lambda _: FakeEmbedder()),
    )
    with TestClient(app) as client:
        assert not app.state.runtime.wait(timeout=60)
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert "the state store is unavailable" in ready.json()["detail"]
        keyless = client.get("/eval/incidents")
        assert keyless.status_code == 503
        # readiness and a request without a key: neither names the database's host, port or user
        for body in (ready.text, keyless.text):
            assert not any(secret in body for secret in ("127.0.0.1", str(port), "secret", "refused"))


def test_a_state_store_failure_is_logged_with_the_request_id_and_answered_without_the_drivers_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(
        Settings(data_dir=tmp_path / "data", auth="on", index_copies=1),
        components=Components(embedder=lambda _: FakeEmbedder()),
    )
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=60)
        engine = app.state.runtime.state.engine
        leak = 'connection to server at "db.internal.example" (10.1.2.3), port 5432 failed: user "secretuser"'

        def fail(*_: Any) -> None:
            import sqlite3

            raise sqlite3.OperationalError(leak)

        event.listen(engine, "before_cursor_execute", fail)
        caplog.set_level("ERROR", logger="plumbline")
        unknown_key = {"X-API-Key": "pl_0123456789abcdef_" + "x" * 43, "X-Request-ID": "req-4f2a"}
        refused = client.get("/eval/incidents", headers=unknown_key)  # the key's lookup fails
        event.remove(engine, "before_cursor_execute", fail)
    assert refused.status_code == 503
    assert refused.json() == {"detail": "the state store is unavailable (request req-4f2a); see the server log"}
    assert not any(word in refused.text for word in ("db.internal", "10.1.2.3", "secretuser", "5432"))
    logged = [r for r in caplog.records if leak in r.getMessage()]
    assert logged
    assert all(getattr(r, "request_id", None) == "req-4f2a" and "req-4f2a" in r.getMessage() for r in logged)
