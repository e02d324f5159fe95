"""GET /auth/me: who the key in the request is, so that a client (the web page) can show what it may do."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from service.access.principals import ROLES, Principal
from service.api.auth import AUTH_RESPONSES, get_principal
from service.api.deps import SettingsDep
from service.api.schemas import IdentityOut

router = APIRouter(prefix="/auth", tags=["access"], responses=AUTH_RESPONSES)


@router.get("/me", response_model=IdentityOut)
def me(principal: Annotated[Principal, Depends(get_principal)], settings: SettingsDep) -> IdentityOut:
    """The caller's key: its name and id, the roles it holds (admin holds them all) and its tenant. Any valid key may
    ask; without one it is a 401, as everywhere."""
    return IdentityOut(
        name=principal.name,
        key_id=principal.key_id,
        roles=[r for r in ROLES if principal.has(r)],
        tenant=principal.tenant,
        auth=settings.auth,
    )
