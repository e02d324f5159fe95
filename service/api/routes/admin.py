"""/admin/*: API keys (create, list without secrets, rotate, revoke) and the audit log. The admin role only."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status
from starlette.concurrency import run_in_threadpool

from service.access.keys import create_key, revoke_key, rotate_key
from service.api.admin_schemas import AuditOut, AuditPage, KeyIn, KeyOut, NewKeyOut, RotateIn
from service.api.auth import AUTH_RESPONSES, Admin, audited
from service.api.deps import RuntimeDep
from service.errors import NotReady
from service.inputs import UtcDatetime
from service.state.schema import iso

router = APIRouter(prefix="/admin", tags=["admin"], responses=AUTH_RESPONSES)
KeyId = Annotated[str, Path(pattern="^[0-9a-f]{16}$")]


@router.get("/keys", response_model=list[KeyOut])
def list_keys(runtime: RuntimeDep, _: Admin) -> list[KeyOut]:
    """Every key, revoked ones included, without secrets or hashes."""
    return [KeyOut.of(k) for k in runtime.authenticator.all_keys()]


@router.post("/keys", response_model=NewKeyOut, status_code=status.HTTP_201_CREATED)
def new_key(body: KeyIn, runtime: RuntimeDep, caller: Admin) -> NewKeyOut:
    """Create a key; the response holds it once. Keys with admin, eval:admin or metrics cannot be bound to a tenant."""
    state = runtime.state
    if state is None:
        raise NotReady("the state store is not open yet; retry shortly")
    with audited(runtime, caller, "key.create"):  # with the key's row
        key, token = create_key(state.keys, body.name, body.roles, body.tenant, caller)
    return NewKeyOut(**KeyOut.of(key).model_dump(), key=token)


@router.post("/keys/{key_id}/rotate", response_model=NewKeyOut)
def rotate(key_id: KeyId, body: RotateIn, runtime: RuntimeDep, caller: Admin) -> NewKeyOut:
    """A new secret for the key; the old one keeps working for `grace_seconds`."""
    auth = runtime.authenticator
    with audited(runtime, caller, "key.rotate", key_id, {"grace_seconds": body.grace_seconds}):  # with the new hash
        token = rotate_key(auth, key_id, body.grace_seconds)
    key = next(k for k in auth.all_keys() if k.key_id == key_id)
    return NewKeyOut(**KeyOut.of(key).model_dump(), key=token)


@router.delete("/keys/{key_id}", response_model=KeyOut)
def revoke(key_id: KeyId, runtime: RuntimeDep, caller: Admin) -> KeyOut:
    """Revoke the key at once (on other replicas within a few seconds)."""
    auth = runtime.authenticator
    with audited(runtime, caller, "key.revoke", key_id):  # with the revocation
        revoke_key(auth, key_id)
    return KeyOut.of(next(k for k in auth.all_keys() if k.key_id == key_id))


@router.get("/audit", response_model=AuditPage)
async def audit_log(
    runtime: RuntimeDep,
    _: Admin,
    action: str | None = None,
    actor: str | None = None,
    target_tenant: Annotated[str | None, Query(description="entries changing what this tenant holds")] = None,
    since: Annotated[UtcDatetime | None, Query(description="at or after (ISO 8601)")] = None,
    before: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="page on: the last page's next_before")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Every write, and refused requests (401 and 403, `auth.denied`; writes refused with 409 or 422,
    `write.refused`; rate-limited), newest first: who (key name and id, and its tenant), what (action, target, the
    target's tenant, details) and when."""
    found = await run_in_threadpool(
        runtime.audit.page,
        before=before,
        limit=limit,
        action=action,
        actor=actor,
        since=iso(since) if since else None,
        target_tenant=target_tenant,
    )
    return {
        "entries": [AuditOut(**asdict(e)).model_dump() for e in found],
        "next_before": found[-1].id if len(found) == limit else None,
    }
