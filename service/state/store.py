"""The state store: everything the service writes besides the index, behind one small interface.

SQLite in the data directory by default (WAL journal, `synchronous=FULL`: a commit is on disk before the call
returns), PostgreSQL by URL (`PLUMBLINE_STATE_URL`) when replicas share it. The schema is versioned with
Alembic (`migrations/versions`); `open_state` upgrades it to the newest version on start, one process at a time
(an advisory lock on PostgreSQL; SQLite's write lock), then imports a data directory written by the old file
layout once (see `service.state.legacy`).

Example:
    >>> state = open_state("sqlite:///:memory:")
    >>> state.put_set("handbook", '{"id": "a", "question": "q", "relevant": [{"doc_id": "d"}]}\\n')
    >>> state.set_names()
    ['handbook']
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    ExceptionContext,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.pool import StaticPool

from eval.errors import AlreadyExists
from service.errors import InsufficientStorage, InvalidRequest, StoreUnavailable
from service.infra import logs
from service.state import schema as t
from service.state.audit import AuditRecords, write_pending
from service.state.incidents import IncidentRecords
from service.state.jobs import JobRecords, LeaseRecords
from service.state.keys import KeyRecords
from service.state.schema import now_iso
from service.state.tx import one_at_a_time, upsert, writing
from service.state.work import DraftRecords, ResultRecords

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration's revision (a test holds it equal to alembic's head): a store already there opens without
# alembic, whose import is 0.1 s of every server start and of every command that opens the store.
HEAD = "0008"
CONNECT_TIMEOUT = 10  # seconds: an unreachable PostgreSQL is an error, not a hang
SQLITE_BUSY_TIMEOUT = 30  # seconds a SQLite writer waits for another to finish


def _engine(url: str) -> Engine:
    if url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if not url.startswith("sqlite"):
        engine = create_engine(
            url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"connect_timeout": CONNECT_TIMEOUT}
        )
    else:
        memory = url in ("sqlite://", "sqlite:///:memory:")
        engine = create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT, "check_same_thread": False},
            **({"poolclass": StaticPool} if memory else {}),
        )
        _sqlite_transactions(engine)
    event.listen(engine, "handle_error", _translate)
    return engine


def _sqlite_transactions(engine: Engine) -> None:
    """WAL and synchronous=FULL on every connection, and transactions that take the write lock at once."""

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _: Any) -> None:
        # The driver's own transaction handling is off; `begin` below opens each transaction itself.
        dbapi_connection.isolation_level = None
        _switch_to_wal(dbapi_connection)
        for pragma in ("synchronous=FULL", "foreign_keys=ON"):
            dbapi_connection.execute(f"PRAGMA {pragma}")

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # IMMEDIATE takes the write lock at the start: two writers never both read, then deadlock on upgrading.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _switch_to_wal(dbapi_connection: Any) -> None:
    """WAL mode, which persists in the file. Connections that race to switch a new file can be refused "database
    is locked" at once, without SQLite waiting on its busy timeout (it would deadlock), so the switch is retried."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT
    while True:
        try:
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


FULL = ("database or disk is full", "no space left on device", "disk full")

log = logging.getLogger("plumbline")


class StateUnavailable(StoreUnavailable):
    """The state store's database cannot be reached, or refused a statement about itself (HTTP 503).

    The driver's text may name a host, a user, a database or a URL: it is logged where the error is raised (a
    request's log line carries its id) and kept in `driver`, never in the message, which anyone shown a 503 may
    read (readiness, a request without a key).
    """

    MESSAGE = "the state store is unavailable (the server log has the database driver's error)"

    def __init__(self, driver: str = "") -> None:
        super().__init__(self.MESSAGE)
        self.driver = driver

    def __reduce__(self) -> tuple[type[StateUnavailable], tuple[str]]:
        return type(self), (self.driver,)


def _translate(context: ExceptionContext) -> Exception | None:
    """Database errors as the service's own: a full disk is 507, anything else the database raises about itself
    (unreachable, locked past the timeout, read-only) 503 (`StateUnavailable`: the driver's text logged, not
    shown), a value it cannot hold 422. Constraint violations stay as they are: callers turn those into 409s."""
    error = context.sqlalchemy_exception
    if isinstance(error, IntegrityError) or not isinstance(error, DBAPIError):
        return None
    text = str(context.original_exception)
    if any(words in text.lower() for words in FULL) or getattr(context.original_exception, "sqlstate", None) == "53100":
        return InsufficientStorage(
            f"the disk holding the state store is full ({text}): free some space. Nothing was written."
        )
    if isinstance(error, OperationalError | InterfaceError) or context.is_disconnect:
        # the driver's words (host, user, database): for the log only, with the request's id where there is one
        rid = logs.request_id.get()
        log.error("the state store is unavailable%s: %s", f" (request {rid})" if rid else "", text)
        return StateUnavailable(text)
    if isinstance(error, DataError):  # a value the database cannot hold (NUL in text, too long, out of range)
        return InvalidRequest(f"the state store cannot hold a value of this request: {text.splitlines()[0]}")
    return None


class StateStore:
    """Sets, runs, baselines (with history), incidents, jobs, leases, API keys, the audit log and meta values, on
    one SQLAlchemy engine.

    Methods take and return text and plain values; `eval.storage` and `service.evaluation.incidents` own the formats.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        self.incidents = IncidentRecords(self.engine)
        self.jobs = JobRecords(self.engine)
        self.leases = LeaseRecords(self.engine)
        self.keys = KeyRecords(self.engine)
        self.audit = AuditRecords(self.engine)
        self.results = ResultRecords(self.engine)
        self.drafts = DraftRecords(self.engine)

    @property
    def backend(self) -> str:
        return self.engine.dialect.name  # "sqlite" or "postgresql"

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to `revision`; safe when several replicas start at once."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            one_at_a_time(conn)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)

    def revision(self) -> str | None:
        """The schema's revision; None for a store never migrated."""
        with self.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        return str(row[0]) if row else None

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        """One round trip to the database (`SELECT 1`); `StateUnavailable` when it does not answer."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    # -- meta ------------------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.scalar(select(t.meta.c.value).where(t.meta.c.key == key))

    def put_meta(self, key: str, value: str) -> None:
        """Set a meta value (audited when an entry is declared around it)."""
        with writing(self.engine) as conn:
            stmt = upsert(conn.dialect.name)(t.meta).values(key=key, value=value)
            conn.execute(stmt.on_conflict_do_update(index_elements=[t.meta.c.key], set_={"value": value}))
            write_pending(conn, target=key)

    # -- labelled sets ---------------------------------------------------------------------------------

    def get_set(self, name: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.scalar(select(t.sets.c.body).where(t.sets.c.name == name))

    def put_set(self, name: str, body: str) -> None:
        with writing(self.engine) as conn:
            conn.execute(delete(t.sets).where(t.sets.c.name == name))
            conn.execute(insert(t.sets).values(name=name, body=body, updated_at=now_iso()))
            write_pending(conn, target=name, detail={"cases": len(body.splitlines())})  # a case a line

    def set_names(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.scalars(select(t.sets.c.name).order_by(t.sets.c.name)))

    def set_versions(self) -> tuple[tuple[str, str], ...]:
        """(name, updated_at) of every stored set: what changes whenever a stored set does (a cache key)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.sets.c.name, t.sets.c.updated_at).order_by(t.sets.c.name))
            return tuple((r.name, r.updated_at) for r in rows)

    # -- runs ------------------------------------------------------------------------------------------

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
        with writing(self.engine) as conn:
            conn.execute(
                insert(t.runs).values(
                    run_id=run_id,
                    set_name=set_name,
                    created_at=created_at,
                    summary=summary,
                    record=record,
                    kind=kind,
                    tenant=tenant,
                )
            )
            write_pending(
                conn,
                target=run_id,
                target_tenant=tenant,
                detail=lambda: {"kind": kind, "gate": json.loads(summary).get("gate")},  # read for an entry only
            )

    def get_run(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.scalar(select(t.runs.c.record).where(t.runs.c.run_id == run_id))

    def delete_run(self, run_id: str) -> bool:
        """Remove a stored run (a baseline keeps its own copy of its run); False if there was none."""
        runs = t.runs.c
        with writing(self.engine) as conn:
            gone = conn.execute(
                delete(t.runs).where(runs.run_id == run_id).returning(runs.set_name, runs.kind, runs.tenant)
            ).first()
            if gone is not None:
                detail = {"set": gone.set_name, "kind": gone.kind}
                write_pending(conn, target=run_id, target_tenant=gone.tenant, detail=detail)
        return gone is not None

    def run_summaries(
        self, limit: int, offset: int, set_name: str | None, kind: str | None, tenant: str | None = None
    ) -> list[str]:
        """JSON objects {run_id, set, created_at, kind, **summary}, newest first; with `tenant`, only the runs
        confined to it."""
        query = select(t.runs.c.run_id, t.runs.c.set_name, t.runs.c.created_at, t.runs.c.kind, t.runs.c.summary)
        if tenant is not None:
            query = query.where(t.runs.c.tenant == tenant)
        if set_name is not None:
            query = query.where(t.runs.c.set_name == set_name)
        if kind is not None:
            query = query.where(t.runs.c.kind == kind)
        query = query.order_by(t.runs.c.run_id.desc()).limit(limit).offset(offset)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            json.dumps(
                {
                    "run_id": r.run_id,
                    "set": r.set_name,
                    "created_at": r.created_at,
                    **json.loads(r.summary),
                    "kind": r.kind,
                }
            )
            for r in rows
        ]

    def count_runs(self, tenant: str) -> int:
        """Runs stored confined to `tenant`."""
        with self.engine.connect() as conn:
            return int(conn.scalar(select(func.count()).select_from(t.runs).where(t.runs.c.tenant == tenant)) or 0)

    def latest_run_ids(self, kind: str) -> list[tuple[str, str]]:
        """(set, run id) of the newest run of `kind` of each set (run ids sort by time)."""
        query = (
            select(t.runs.c.set_name, func.max(t.runs.c.run_id))
            .where(t.runs.c.kind == kind)
            .group_by(t.runs.c.set_name)
            .order_by(t.runs.c.set_name)
        )
        with self.engine.connect() as conn:
            return [(name, run_id) for name, run_id in conn.execute(query)]

    # -- baselines -------------------------------------------------------------------------------------

    def get_baseline(self, name: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.scalar(select(t.baselines.c.record).where(t.baselines.c.name == name))

    def put_baseline(self, name: str, run_id: str, record: str, *, replace: bool) -> str | None:
        """Store a baseline; an existing one is moved to the history (only when `replace`, else `AlreadyExists`).
        Returns the replaced baseline's run id."""
        try:
            return self._put_baseline(name, run_id, record, replace=replace)
        except IntegrityError:  # another replica promoted the first baseline of that name at the same moment
            raise AlreadyExists(f"baseline {name!r} was just created by another request; send replace: true") from None

    def _put_baseline(self, name: str, run_id: str, record: str, *, replace: bool) -> str | None:
        from eval.storage import canonical_digest  # here: eval.storage's import (numpy) would slow every command

        with writing(self.engine) as conn:
            old = conn.execute(
                select(t.baselines.c.run_id, t.baselines.c.record).where(t.baselines.c.name == name).with_for_update()
            ).first()
            if old is not None:
                if not replace:
                    raise AlreadyExists(f"baseline {name!r} exists (run {old.run_id}); send replace: true")
                conn.execute(
                    insert(t.baseline_history).values(
                        name=name, run_id=old.run_id, record=old.record, replaced_at=now_iso()
                    )
                )
                conn.execute(
                    update(t.baselines)
                    .where(t.baselines.c.name == name)
                    .values(run_id=run_id, record=record, promoted_at=now_iso())
                )
            else:
                conn.execute(insert(t.baselines).values(name=name, run_id=run_id, record=record, promoted_at=now_iso()))
            replaced = old.run_id if old is not None else None
            # with `Baseline.sha256` of the baseline as stored (computed only for an audit entry)
            write_pending(
                conn, target=name, detail=lambda: {"replaced": replaced, "sha256": canonical_digest(json.loads(record))}
            )
        return replaced

    def baseline_history(self, name: str) -> list[tuple[str, str]]:
        """(run id, replaced at) of each replaced baseline `name`, oldest first."""
        query = (
            select(t.baseline_history.c.run_id, t.baseline_history.c.replaced_at)
            .where(t.baseline_history.c.name == name)
            .order_by(t.baseline_history.c.id)
        )
        with self.engine.connect() as conn:
            return [(r.run_id, r.replaced_at) for r in conn.execute(query)]


def open_state(url: str, legacy_dir: Path | None = None) -> StateStore:
    """Open the store at `url`, migrate it to the newest schema, and import `legacy_dir` (a data directory's
    `eval/` folder of the file layout) if it has not been imported yet."""
    state = StateStore(url)
    try:
        if state.revision() != HEAD:  # at HEAD there is nothing to do; otherwise alembic, under the migration lock
            state.migrate()
        if legacy_dir is not None:
            from service.state.legacy import import_file_layout

            import_file_layout(state, legacy_dir)
    except BaseException:
        state.close()
        raise
    return state
