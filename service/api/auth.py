"""Who is calling: the API key → `Principal` dependency, one dependency per role, and the audit trail of writes.

Routes declare the role they need as a parameter type (`caller: Searcher`), so the role table lives in the
routes' signatures and `tests/service/api/test_access.py` checks every one. With `auth = off` (the local demo)
every caller is `ANONYMOUS`, who holds every role, and every response says so in `X-Plumbline-Auth: off`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute

from service.access.keys import Authenticator
from service.access.principals import ANONYMOUS, Principal, require
from service.runtime import Runtime
from service.settings import Settings

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key (X-API-Key or Authorization: Bearer)"},
    403: {"description": "the key lacks the role, or its tenant binding forbids the request"},
}


# Declared as security schemes, so /docs offers an "Authorize" button; checked by `get_principal`, not by FastAPI.
API_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key: pl_<key id>_<secret>")
BEARER = HTTPBearer(auto_error=False, description="the same key as a bearer token (what Prometheus sends)")


async def get_principal(
    request: Request,
    header_key: Annotated[str | None, Security(API_KEY_HEADER)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> Principal:
    """The caller: from `X-API-Key`, else `Authorization: Bearer <key>`; `ANONYMOUS` when auth is off."""
    runtime: Runtime = request.app.state.runtime
    if runtime.settings.auth == "off":
        return ANONYMOUS
    known = request.scope.get(PRINCIPAL)  # `app.Authenticate` checked this request's key before its body was read
    if isinstance(known, Principal):
        return known
    return await authenticate(runtime.authenticator, _token(header_key, bearer))


# Where `app.Authenticate` leaves the caller it found in the request's ASGI scope (no client can set a scope key).
PRINCIPAL = "plumbline.principal"


def _token(header_key: str | None, bearer: HTTPAuthorizationCredentials | None) -> str | None:
    return (header_key or "").strip() or (bearer.credentials.strip() if bearer else None)


async def authenticate(auth: Authenticator, token: str | None) -> Principal:
    """The caller a key is, or `Unauthenticated`: a key cached in the last few seconds is checked here (no I/O);
    any other is looked up in the secrets file or the state store, in a thread."""
    principal = auth.cached(token) if auth.file is None else None
    if principal is None:
        principal = await run_in_threadpool(auth.authenticate, token)
    return principal


async def presented_key(connection: HTTPConnection) -> str | None:
    """The key a request presents, read from its headers exactly as `get_principal`'s parameters read it."""
    bearer = await BEARER(connection)
    return _token(await API_KEY_HEADER(connection), bearer)


def needs_key(route: BaseRoute, settings: Settings) -> bool:
    """Whether a route answers only callers with a valid key: it depends on `get_principal` (every role does), or
    it is the scrape endpoint and `metrics_auth` is on. The open routes (health, the page, the docs) do not."""
    if settings.auth == "off" or not isinstance(route, APIRoute):
        return False
    calls = _calls(route.dependant)
    return get_principal in calls or (metrics_caller in calls and settings.metrics_auth)


def _calls(dependant: Dependant) -> set[Callable[..., Any]]:
    out: set[Callable[..., Any]] = set()
    for sub in dependant.dependencies:
        if sub.call is not None:
            out.add(sub.call)
        out |= _calls(sub)
    return out


def role(*roles: str) -> Any:
    """A dependency that lets through callers holding one of `roles` (admin holds them all): 401, else 403."""

    async def check(principal: Annotated[Principal, Depends(get_principal)], request: Request) -> Principal:
        route = getattr(request.scope.get("route"), "path", request.url.path)
        require(principal, roles, f"{request.method} {route}")
        return principal

    return Depends(check)


Searcher = Annotated[Principal, role("search")]
DocumentReader = Annotated[Principal, role("search", "ingest")]
Ingester = Annotated[Principal, role("ingest")]
EvalRunner = Annotated[Principal, role("eval:run")]
EvalAdmin = Annotated[Principal, role("eval:admin")]
Reporter = Annotated[Principal, role("incidents:report")]
IncidentReader = Annotated[Principal, role("incidents:report", "incidents:review")]
Reviewer = Annotated[Principal, role("incidents:review")]
Admin = Annotated[Principal, role("admin")]


async def metrics_caller(
    request: Request,
    header_key: Annotated[str | None, Security(API_KEY_HEADER)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> Principal | None:
    """The scrape endpoint is open unless `metrics_auth` is on; then it needs the `metrics` role."""
    runtime: Runtime = request.app.state.runtime
    if not runtime.settings.metrics_auth:
        return None
    principal = await get_principal(request, header_key, bearer)
    require(principal, ("metrics",), "GET /metrics")
    return principal


def audit(runtime: Runtime, who: Principal, action: str, target: str, detail: Mapping[str, Any]) -> None:
    """Record a write `who` made (`Runtime.record`)."""
    runtime.record(who.actor, action, target, detail, who.tenant)
