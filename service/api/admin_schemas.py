"""Request and response models of /admin/* (keys and the audit log)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from service.access.principals import ROLES
from service.inputs import Strict
from service.state.keys import ApiKey

MAX_GRACE = 7 * 24 * 3600


class KeyIn(Strict):
    name: str = Field(min_length=1, max_length=160)
    roles: list[str] = Field(min_length=1, max_length=len(ROLES), description=f"any of {', '.join(ROLES)}")
    tenant: str | None = Field(None, min_length=1, max_length=200, description="confine the key to this tenant")


class RotateIn(Strict):
    grace_seconds: float = Field(
        3600, ge=0, le=MAX_GRACE, description="how long the old secret keeps working, so clients can switch"
    )


class KeyOut(BaseModel):
    key_id: str
    name: str
    roles: list[str]
    tenant: str | None
    source: str = Field(description='"store", or "file" (the API keys file: change it there)')
    created_at: str
    created_by: str
    rotated_at: str | None
    revoked_at: str | None
    previous_valid_until: str | None = Field(description="until when the secret before the last rotation works")

    @classmethod
    def of(cls, k: ApiKey) -> KeyOut:
        return cls(
            key_id=k.key_id,
            name=k.name,
            roles=list(k.roles),
            tenant=k.tenant,
            source=k.source,
            created_at=k.created_at,
            created_by=k.created_by,
            rotated_at=k.rotated_at,
            revoked_at=k.revoked_at,
            previous_valid_until=k.previous_expires_at,
        )


class NewKeyOut(KeyOut):
    key: str = Field(description="the key itself: shown this once, only its hash is kept")


class AuditOut(BaseModel):
    id: int
    at: str
    actor: str
    tenant: str | None = Field(description="the caller's tenant binding")
    action: str
    target: str
    target_tenant: str | None = Field(
        description="the tenant of what changed (a document's, an incident's, a run's, a key's binding); null: what "
        "every tenant shares (sets, baselines), a refusal, or an entry written before it was recorded"
    )
    detail: dict[str, Any]
    request_id: str | None


class AuditPage(BaseModel):
    entries: list[AuditOut]
    next_before: int | None = Field(description="pass as `before` for the next page; null on the last")
