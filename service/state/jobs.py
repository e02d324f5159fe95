"""Eval jobs (a run in progress: its progress, a cancel request, its outcome) and leases (work one replica at a
time), kept in the state store so that every replica sees them.

A job is `queued` while its run waits for an evaluation slot (in the memory of the process that owns it), then
`running`. Its heartbeat moves with its progress, and while queued with the owner's periodic writes; a running or
queued job whose heartbeat is older than `LOST_AFTER` seconds belonged to a process that died, and reads as `lost`.
A lease is a row with an owner and an expiry: taking it is one upsert that succeeds only when the row is free,
expired, or already the caller's, so two replicas never both hold it. Expiries compare the replicas' clocks, which
must agree to well under a lease's length (NTP does).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Engine, case, delete, func, insert, or_, select, update

from service.state import schema as t
from service.state.audit import write_pending
from service.state.schema import iso, now_iso
from service.state.tx import upsert, writing

# seconds without a heartbeat before a running (or queued) job counts as lost: well past the slowest batch of 64
# questions (a reranked batch on 2 busy cores takes about a minute)
LOST_AFTER = 600.0

LIVE = ("queued", "running")  # the statuses of a job that has not ended
EPOCH = "1970-01-01T00:00:00.000000Z"  # the heartbeat of a job known to be lost


@dataclass(frozen=True)
class Job:
    run_id: str
    set_name: str
    kind: str
    status: str  # queued, running, done, failed, cancelled, lost
    done: int
    total: int
    cancel_requested: bool
    error: str | None
    started_at: str
    heartbeat_at: str
    finished_at: str | None
    tenant: str | None = None  # the tenant its run is confined to
    started_by: str | None = None  # the id of the API key that started it; None: auth off, the CLI, older jobs
    position: int | None = None  # queued: 1 + the runs of its caller group queued before it on its replica


def _after(seconds: float) -> str:
    return iso(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))


class JobRecords:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(
        self,
        run_id: str,
        set_name: str,
        kind: str,
        total: int,
        owner: str,
        tenant: str | None = None,
        *,
        started_by: str | None = None,
        queued: bool = False,
    ) -> None:
        """Record a job as running in process `owner`, or as `queued` there for a slot; `started_by`: the id of the
        API key that asked for it."""
        now = now_iso()
        with writing(self.engine) as conn:
            conn.execute(
                insert(t.jobs).values(
                    run_id=run_id,
                    set_name=set_name,
                    kind=kind,
                    status="queued" if queued else "running",
                    done=0,
                    total=total,
                    cancel=0,
                    owner=owner,
                    started_at=now,
                    heartbeat_at=now,
                    tenant=tenant,
                    started_by=started_by,
                )
            )
            write_pending(conn, target=run_id, target_tenant=tenant, detail={"kind": kind})

    def begin(self, run_id: str) -> bool:
        """A queued job's run got its slot: it is running now; False if it is not queued any more (cancelled)."""
        with writing(self.engine) as conn:
            changed = conn.execute(
                update(t.jobs)
                .where(t.jobs.c.run_id == run_id, t.jobs.c.status == "queued")
                .values(status="running", heartbeat_at=now_iso())
            ).rowcount
        return bool(changed)

    def progress(self, run_id: str, done: int) -> bool:
        """Record `done` cases and a heartbeat; True if a cancel has been asked for."""
        with writing(self.engine) as conn:
            conn.execute(update(t.jobs).where(t.jobs.c.run_id == run_id).values(done=done, heartbeat_at=now_iso()))
            return bool(conn.scalar(select(t.jobs.c.cancel).where(t.jobs.c.run_id == run_id)))

    def finish(self, run_id: str, status: str, error: str | None = None) -> None:
        """Record how a running or queued job ended; a job that already ended keeps its end (a run stored is done)."""
        now = now_iso()
        values: dict[str, object] = {"status": status, "error": error, "finished_at": now, "heartbeat_at": now}
        if status == "done":
            values["done"] = t.jobs.c.total
        with writing(self.engine) as conn:
            conn.execute(update(t.jobs).where(t.jobs.c.run_id == run_id, t.jobs.c.status.in_(LIVE)).values(**values))

    def cancel(self, run_id: str, queued_error: str) -> bool:
        """Ask a running job to stop (its runner does at its next batch); end a queued one at once, `cancelled`
        with `queued_error` (its owner drops it from its queue). False if it is neither (finished, or unknown)."""
        now = now_iso()
        ended = {"status": "cancelled", "error": queued_error, "finished_at": now, "heartbeat_at": now}
        job = t.jobs.c.run_id == run_id
        with writing(self.engine) as conn:
            changed = conn.execute(update(t.jobs).where(job, t.jobs.c.status == "running").values(cancel=1)).rowcount
            changed += conn.execute(
                update(t.jobs).where(job, t.jobs.c.status == "queued").values(cancel=1, **ended)
            ).rowcount
            if changed:
                row = conn.execute(select(t.jobs.c.set_name, t.jobs.c.tenant).where(job)).one()
                write_pending(conn, target=run_id, target_tenant=row.tenant, detail={"set": row.set_name})
        return bool(changed)

    def orphan_all(self) -> int:
        """Mark every job not ended as lost (its heartbeat moved to the epoch): what a process that holds the data
        directory's lock does with a store only it can use (SQLite in the data directory) at start-up, where any job
        still running belonged to a process that died. The number marked."""
        live = t.jobs.c.status.in_(LIVE) & (t.jobs.c.heartbeat_at != EPOCH)
        with self.engine.connect() as conn:  # no write at all when there is nothing to mark (the usual start)
            if not conn.scalar(select(func.count()).where(live)):
                return 0
        with writing(self.engine) as conn:
            return int(conn.execute(update(t.jobs).where(live).values(heartbeat_at=EPOCH)).rowcount or 0)

    def recent_counts(self, seconds: float) -> dict[tuple[str, str], int]:
        """Jobs started in the last `seconds` by (kind, status), a job whose heartbeat stopped counted as `lost`."""
        lost = _after(-LOST_AFTER)
        status = case((t.jobs.c.status.in_(LIVE) & (t.jobs.c.heartbeat_at < lost), "lost"), else_=t.jobs.c.status)
        query = (
            select(t.jobs.c.kind, status.label("status"), func.count())
            .where(t.jobs.c.started_at >= _after(-seconds))
            .group_by(t.jobs.c.kind, status)
        )
        with self.engine.connect() as conn:
            return {(row[0], row[1]): int(row[2]) for row in conn.execute(query)}

    def forget(self, run_id: str) -> None:
        """Remove an ended job's row (a resumed synthesis starts a new job under the same id); a live one stays."""
        lost = _after(-LOST_AFTER)
        with writing(self.engine) as conn:
            conn.execute(
                delete(t.jobs).where(
                    t.jobs.c.run_id == run_id, or_(t.jobs.c.status.not_in(LIVE), t.jobs.c.heartbeat_at < lost)
                )
            )

    def get(self, run_id: str) -> Job | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(t.jobs).where(t.jobs.c.run_id == run_id)).first()
            if row is None:
                return None
            status = row.status
            if status in LIVE and row.heartbeat_at < _after(-LOST_AFTER):
                status = "lost"
            position = None
            if status == "queued":  # its owner serves its group first in, first out: the run ids sort by time
                before = conn.scalar(
                    select(func.count()).where(
                        t.jobs.c.status == "queued",
                        t.jobs.c.owner == row.owner,
                        t.jobs.c.tenant.is_not_distinct_from(row.tenant),
                        t.jobs.c.run_id < row.run_id,
                    )
                )
                position = 1 + (before or 0)
        return Job(
            row.run_id,
            row.set_name,
            row.kind,
            status,
            row.done,
            row.total,
            bool(row.cancel),
            row.error,
            row.started_at,
            row.heartbeat_at,
            row.finished_at,
            row.tenant,
            row.started_by,
            position,
        )


class LeaseRecords:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def acquire(self, name: str, owner: str, seconds: float) -> bool:
        """Take or renew the lease `name` for `seconds`; False if another owner holds it unexpired."""
        now, until = now_iso(), _after(seconds)
        stmt = (
            upsert(self.engine.dialect.name)(t.leases)
            .values(name=name, owner=owner, expires_at=until)
            .on_conflict_do_update(
                index_elements=[t.leases.c.name],
                set_={"owner": owner, "expires_at": until},
                where=or_(t.leases.c.expires_at < now, t.leases.c.owner == owner),
            )
            .returning(t.leases.c.owner)  # a row only when inserted or updated (rowcount differs by driver)
        )
        with writing(self.engine) as conn:
            return conn.execute(stmt).first() is not None

    def release(self, name: str, owner: str) -> None:
        with writing(self.engine) as conn:
            conn.execute(delete(t.leases).where(t.leases.c.name == name, t.leases.c.owner == owner))

    def holder(self, name: str) -> str | None:
        """The owner of an unexpired lease `name`, or None."""
        with self.engine.connect() as conn:
            return conn.scalar(
                select(t.leases.c.owner).where(t.leases.c.name == name, t.leases.c.expires_at >= now_iso())
            )
