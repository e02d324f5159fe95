"""The audit log: every write through the API or the CLI (ingest, delete, set and baseline changes, eval runs
stored, incident reports and reviews, key changes), with who, what, whose and when, and the requests refused: for want
of a valid key or of a role, and writes refused as conflicting or invalid (`RefusalThrottle` keeps a flood of those
from filling it). Append-only.

An entry is declared before the change it records (`AuditRecords.auditing`, which holds it in a context variable: a
thread that runs part of the request gets it in its copy of the context), and the state-store write that makes the
change appends it in its own transaction (`write_pending`), filling in what only the store knows (a new incident's
id, the tenant of the row changed): the change and its entry commit together or not at all. A change kept elsewhere
(the vector index: ingest, delete; an import) has no such transaction: its entry is appended after it, and a crash
between the two loses the entry.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select

from service.errors import PlumblineError
from service.state import schema as t
from service.state.schema import now_iso
from service.state.tx import writing

log = logging.getLogger("plumbline")

ACTOR_CHARS, REQUEST_ID_CHARS = 200, 100  # the columns' widths (schema.audit_log)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: str
    actor: str
    tenant: str | None  # the caller's tenant binding
    action: str
    target: str
    detail: Mapping[str, Any]
    request_id: str | None
    target_tenant: str | None = None  # the tenant of what changed; None: what every tenant shares (or not recorded)


class _Unset(enum.Enum):
    UNSET = 0


UNSET = _Unset.UNSET  # `Pending.fill`: leave the field as declared


@dataclass
class Pending:
    """An audit entry declared before the change it records. `written`: appended in a state-store transaction (which
    committed, or the declaring block fails with its error); `open`: its block has not ended (a thread that inherited
    it and outlives the block writes nothing)."""

    actor: str
    tenant: str | None
    action: str
    target: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    target_tenant: str | None = None
    request_id: str | None = None
    written: bool = False
    open: bool = True

    def fill(
        self,
        *,
        target: str | None = None,
        target_tenant: str | _Unset | None = UNSET,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """What only the code making the change knows: the target (a new row's id), its tenant, more detail."""
        if target is not None:
            self.target = target
        if target_tenant is not UNSET:
            self.target_tenant = target_tenant
        if detail:
            self.detail = {**self.detail, **detail}


_pending: ContextVar[Pending | None] = ContextVar("plumbline_audit_pending", default=None)


def write_pending(
    conn: Connection,
    *,
    target: str | None = None,
    target_tenant: str | _Unset | None = UNSET,
    detail: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Append the audit entry declared around this write (`AuditRecords.auditing`), if there is one not written yet,
    in `conn`'s transaction, filled in with what the store knows (`Pending.fill`; a `detail` to compute, computed
    only then). A state-store method that makes an audited change calls this in its transaction, after the change's
    own statements and only if it changed something; a transaction that then fails raises, and so does the block
    that declared the entry."""
    entry = _pending.get()
    if entry is None or entry.written or not entry.open:
        return
    entry.fill(target=target, target_tenant=target_tenant, detail=detail() if callable(detail) else detail)
    _insert(conn, entry)
    entry.written = True


def _insert(conn: Connection, entry: Pending) -> int:
    done = conn.execute(
        insert(t.audit_log).values(
            at=now_iso(),
            actor=entry.actor[:ACTOR_CHARS],  # what the columns hold: an entry must never fail on a long value
            tenant=entry.tenant,
            target_tenant=entry.target_tenant,
            action=entry.action,
            target=entry.target,
            detail=json.dumps(entry.detail, ensure_ascii=False, default=str),
            request_id=entry.request_id[:REQUEST_ID_CHARS] if entry.request_id else None,
        )
    )
    key = done.inserted_primary_key
    return int(key[0]) if key else 0


class AuditRecords:
    """The `audit_log` table.

    Example:
        >>> log = AuditRecords(open_state("sqlite:///:memory:").engine)  # doctest: +SKIP
        >>> log.append("ci (k1)", None, "baseline.promote", "handbook", {"run_id": "r1"})  # doctest: +SKIP
        >>> with log.auditing(Pending("ci (k1)", None, "set.put", "handbook")):  # doctest: +SKIP
        ...     state.put_set("handbook", body)  # the set and its entry, in one transaction
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def append(
        self,
        actor: str,
        tenant: str | None,
        action: str,
        target: str,
        detail: Mapping[str, Any],
        request_id: str | None = None,
        *,
        target_tenant: str | None = None,
    ) -> int:
        """An entry in a transaction of its own."""
        with writing(self.engine) as conn:
            return _insert(conn, Pending(actor, tenant, action, target, dict(detail), target_tenant, request_id))

    def record(self, entry: Pending) -> None:
        """`entry`, after the change it records, in a transaction of its own. The change stands if this fails: the
        entry goes to the error log instead."""
        try:
            with writing(self.engine) as conn:
                _insert(conn, entry)
        except PlumblineError:
            entry_text = f"{entry.action} by {entry.actor} on {entry.target}: {entry.detail}"
            log.error("audit entry lost: %s", entry_text, exc_info=True)

    @contextmanager
    def auditing(self, entry: Pending, *, after: bool = False) -> Iterator[Pending]:
        """Declare `entry`, the audit entry of the change the block makes: the state-store write that makes it appends
        it in its own transaction (`write_pending`). With `after` (a change kept outside the state store: the vector
        index), it is appended once the block has ended (`record`), unless a store transaction wrote it. A block
        that raises writes nothing more (a refused request is audited by the API's refusal handler); a block that
        ends with no store write (a scheduled run that was not due) leaves no entry."""
        token = _pending.set(entry)
        try:
            yield entry
        finally:
            entry.open = False
            _pending.reset(token)
        if after and not entry.written:
            self.record(entry)

    def latest_id(self, actions: Sequence[str]) -> int:
        """The id of the newest entry of one of `actions` (0 when there is none): e.g. the newest change of the
        corpus, which a run records to say which ingest batches it covers. (An index change is audited after it
        commits, so a run may cover one whose entry is not written yet.)"""
        with self.engine.connect() as conn:
            found = conn.scalar(select(func.max(t.audit_log.c.id)).where(t.audit_log.c.action.in_(list(actions))))
        return int(found or 0)

    def page(
        self,
        *,
        before: int | None = None,
        limit: int = 100,
        action: str | None = None,
        actor: str | None = None,
        since: str | None = None,
        target_tenant: str | None = None,
    ) -> list[AuditEntry]:
        """Entries newest first; `before` (an entry id) pages on."""
        c = t.audit_log.c
        query = select(t.audit_log).order_by(c.id.desc()).limit(limit)
        if before is not None:
            query = query.where(c.id < before)
        if action is not None:
            query = query.where(c.action == action)
        if actor is not None:
            query = query.where(c.actor == actor)
        if since is not None:
            query = query.where(c.at >= since)
        if target_tenant is not None:
            query = query.where(c.target_tenant == target_tenant)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            AuditEntry(
                r.id, r.at, r.actor, r.tenant, r.action, r.target, json.loads(r.detail), r.request_id, r.target_tenant
            )
            for r in rows
        ]


REFUSAL_WINDOW = 60.0  # seconds: one audit row per caller, status and endpoint in this long
REFUSAL_ROWS = 100  # audit rows of refusals of one kind in one window at most, whoever the callers
KEY_IDS_SHOWN = 10  # the key ids a row lists of the refusals it stands for


@dataclass
class _Seen:
    at: float  # when its last row was written
    suppressed: int = 0  # refusals like it since, not written
    key_ids: set[str] = field(default_factory=set)


class RefusalThrottle:
    """Which refused requests of one kind (401 and 403; writes refused with 409 or 422) become audit rows: the first
    of each (caller, status, endpoint) in a window of `window` seconds, and at most `rows` in a window over all
    callers, so that no flood fills the table. A row then tells how many like it were not written since the previous
    one (`suppressed`, and the key ids they presented), and how many others were not (`suppressed_elsewhere`: past the
    overall cap, or of callers not seen again). A metric counts every one (`plumbline_auth_failures_total`,
    `plumbline_writes_refused_total`).

    Example:
        >>> throttle = RefusalThrottle(window=60, rows=100, clock=lambda: 0.0)
        >>> throttle.admit("10.0.0.7", 401, "GET /documents", "0123456789abcdef")
        {'suppressed': 0}
        >>> throttle.admit("10.0.0.7", 401, "GET /documents", "fedcba9876543210") is None
        True
    """

    def __init__(
        self, window: float = REFUSAL_WINDOW, rows: int = REFUSAL_ROWS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window, self.rows, self.clock = window, rows, clock
        self._seen: dict[tuple[str, int, str], _Seen] = {}
        self._started, self._written, self._elsewhere = clock(), 0, 0
        self._lock = threading.Lock()

    def admit(self, caller: str, status: int, endpoint: str, key_id: str | None) -> dict[str, Any] | None:
        """What a row for this refusal adds to its detail, or None: not to be written."""
        with self._lock:
            now = self.clock()
            if now - self._started >= self.window:
                self._started, self._written = now, 0
                self._forget(now)
            key = (caller, status, endpoint)
            seen = self._seen.get(key)
            if seen is not None and (now - seen.at < self.window or self._written >= self.rows):
                seen.suppressed += 1
                if key_id and len(seen.key_ids) < KEY_IDS_SHOWN:
                    seen.key_ids.add(key_id)
                return None
            if self._written >= self.rows:
                self._elsewhere += 1
                return None
            extra: dict[str, Any] = {"suppressed": seen.suppressed if seen else 0}
            if seen and seen.key_ids:
                extra["suppressed_key_ids"] = sorted(seen.key_ids)
            if self._elsewhere:
                extra["suppressed_elsewhere"], self._elsewhere = self._elsewhere, 0
            self._seen[key] = _Seen(now)
            self._written += 1
            return extra

    def _forget(self, now: float) -> None:
        """Drop the callers with no row in the last window and nothing left to report; past `10 * rows` callers,
        those with something too (their refusals not written then count as elsewhere)."""
        crowded = len(self._seen) > 10 * self.rows
        for key, seen in list(self._seen.items()):
            if now - seen.at >= self.window and (crowded or not seen.suppressed):
                self._elsewhere += seen.suppressed
                del self._seen[key]
