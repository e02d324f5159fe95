"""The audit log: every write through the API or the CLI (ingest, delete, set and baseline changes, eval runs
stored, incident reports and reviews, key changes), with who, what and when. Append-only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
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
