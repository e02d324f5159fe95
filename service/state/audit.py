"""The audit log: every write through the API or the CLI (ingest, delete, set and baseline changes, eval runs
stored, incident reports and reviews, key changes), with who, what and when, and the requests refused for want of a
valid key or of a role (`DenialThrottle` keeps a flood of those from filling it). Append-only."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, insert, select

from service.state import schema as t
from service.state.schema import now_iso
from service.state.tx import writing

ACTOR_CHARS, REQUEST_ID_CHARS = 200, 100  # the columns' widths (schema.audit_log)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: str
    actor: str
    tenant: str | None
    action: str
    target: str
    detail: Mapping[str, Any]
    request_id: str | None


class AuditRecords:
    """The `audit_log` table.

    Example:
        >>> log = AuditRecords(open_state("sqlite:///:memory:").engine)  # doctest: +SKIP
        >>> log.append("ci (k1)", None, "baseline.promote", "handbook", {"run_id": "r1"})  # doctest: +SKIP
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
    ) -> int:
        with writing(self.engine) as conn:
            done = conn.execute(
                insert(t.audit_log).values(
                    at=now_iso(),
                    actor=actor[:ACTOR_CHARS],  # what the columns hold: an entry must never fail on a long value
                    tenant=tenant,
                    action=action,
                    target=target,
                    detail=json.dumps(dict(detail), ensure_ascii=False, default=str),
                    request_id=request_id[:REQUEST_ID_CHARS] if request_id else None,
                )
            )
        key = done.inserted_primary_key
        return int(key[0]) if key else 0

    def page(
        self,
        *,
        before: int | None = None,
        limit: int = 100,
        action: str | None = None,
        actor: str | None = None,
        since: str | None = None,
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
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            AuditEntry(r.id, r.at, r.actor, r.tenant, r.action, r.target, json.loads(r.detail), r.request_id)
            for r in rows
        ]


DENIAL_WINDOW = 60.0  # seconds: one audit row per caller, status and endpoint in this long
DENIAL_ROWS = 100  # audit rows of refusals in one window at most, whoever the callers
KEY_IDS_SHOWN = 10  # the key ids a row lists of the refusals it stands for


@dataclass
class _Seen:
    at: float  # when its last row was written
    suppressed: int = 0  # refusals like it since, not written
    key_ids: set[str] = field(default_factory=set)


class DenialThrottle:
    """Which refused requests (401, 403) become audit rows: the first of each (caller, status, endpoint) in a window
    of `window` seconds, and at most `rows` in a window over all callers, so that no flood fills the table. A row
    then tells how many like it were not written since the previous one (`suppressed`, and the key ids they
    presented), and how many others were not (`suppressed_elsewhere`: past the overall cap, or of callers not seen
    again). The metric `plumbline_auth_failures_total` counts every one.

    Example:
        >>> throttle = DenialThrottle(window=60, rows=100, clock=lambda: 0.0)
        >>> throttle.admit("10.0.0.7", 401, "GET /documents", "0123456789abcdef")
        {'suppressed': 0}
        >>> throttle.admit("10.0.0.7", 401, "GET /documents", "fedcba9876543210") is None
        True
    """

    def __init__(
        self, window: float = DENIAL_WINDOW, rows: int = DENIAL_ROWS, clock: Callable[[], float] = time.monotonic
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
