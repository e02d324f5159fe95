"""API keys in the state store: each row holds a key's SHA-256 hash, never the key itself (see `service.access.keys`).

A rotation keeps the replaced secret's hash for a grace period, so that clients can move to the new secret
without an outage; a revocation is immediate on the replica that made it, and on every other within
`service.access.keys.CACHE_SECONDS`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select, update

from service.state import schema as t
from service.state.audit import write_pending
from service.state.schema import iso, now_iso
from service.state.tx import writing


@dataclass(frozen=True)
class ApiKey:
    """A key as stored: who it is, what it may do, and the hashes its secret is checked against."""

    key_id: str
    name: str
    roles: tuple[str, ...]
    tenant: str | None
    secret_hash: str
    created_at: str
    created_by: str
    source: str = "store"  # "store", or "file" for a key from the secrets file (read-only here)
    previous_hash: str | None = None
    previous_expires_at: str | None = None
    rotated_at: str | None = None
    revoked_at: str | None = None


class KeyRecords:
    """The `api_keys` table.

    Example:
        >>> keys = KeyRecords(open_state("sqlite:///:memory:").engine)  # doctest: +SKIP
        >>> keys.create(ApiKey("abc", "ci", ("eval:run",), None, "<sha256>", now_iso(), "admin"))  # doctest: +SKIP
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, key: ApiKey) -> None:
        with writing(self.engine) as conn:
            conn.execute(
                insert(t.api_keys).values(
                    key_id=key.key_id,
                    name=key.name,
                    secret_hash=key.secret_hash,
                    roles=json.dumps(list(key.roles)),
                    tenant=key.tenant,
                    created_at=key.created_at,
                    created_by=key.created_by[:200],
                )
            )
            detail = {"name": key.name, "roles": list(key.roles), "tenant": key.tenant}
            write_pending(conn, target=key.key_id, target_tenant=key.tenant, detail=detail)

    def get(self, key_id: str) -> ApiKey | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(t.api_keys).where(t.api_keys.c.key_id == key_id)).first()
        return _key(row) if row is not None else None

    def all(self) -> list[ApiKey]:
        """Every key, revoked ones included, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.api_keys).order_by(t.api_keys.c.created_at, t.api_keys.c.key_id)).all()
        return [_key(r) for r in rows]

    def rotate(self, key_id: str, secret_hash: str, grace_seconds: float) -> bool:
        """Give a live key a new secret; the old one stays valid for `grace_seconds`. False if no live key."""
        now = dt.datetime.now(dt.UTC)
        with writing(self.engine) as conn:
            row = conn.execute(
                select(t.api_keys.c.secret_hash, t.api_keys.c.tenant)
                .where(t.api_keys.c.key_id == key_id, t.api_keys.c.revoked_at.is_(None))
                .with_for_update()
            ).first()
            if row is None:
                return False
            conn.execute(
                update(t.api_keys)
                .where(t.api_keys.c.key_id == key_id)
                .values(
                    secret_hash=secret_hash,
                    previous_hash=row.secret_hash if grace_seconds > 0 else None,
                    previous_expires_at=iso(now + dt.timedelta(seconds=grace_seconds)) if grace_seconds > 0 else None,
                    rotated_at=iso(now),
                )
            )
            write_pending(conn, target=key_id, target_tenant=row.tenant)
        return True

    def revoke(self, key_id: str) -> bool:
        """Revoke a live key at once (its previous secret too); False if there is no live key of that id."""
        with writing(self.engine) as conn:
            done = conn.execute(
                update(t.api_keys)
                .where(t.api_keys.c.key_id == key_id, t.api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now_iso(), previous_hash=None, previous_expires_at=None)
                .returning(t.api_keys.c.tenant)
            ).first()
            if done is not None:
                write_pending(conn, target=key_id, target_tenant=done.tenant)
        return done is not None


def _key(row: object) -> ApiKey:
    r = row._mapping  # type: ignore[attr-defined]
    return ApiKey(
        key_id=r["key_id"],
        name=r["name"],
        roles=tuple(json.loads(r["roles"])),
        tenant=r["tenant"],
        secret_hash=r["secret_hash"],
        created_at=r["created_at"],
        created_by=r["created_by"],
        previous_hash=r["previous_hash"],
        previous_expires_at=r["previous_expires_at"],
        rotated_at=r["rotated_at"],
        revoked_at=r["revoked_at"],
    )
