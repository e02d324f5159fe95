"""Who is calling: the API key → `Principal` dependency, one dependency per role, and the audit trail of writes
and of refusals (401, 403).

Routes declare the role they need as a parameter type (`caller: Searcher`), so the role table lives in the
routes' signatures and `tests/service/api/test_access.py` checks every one. With `auth = off` (the local demo)
every caller is `ANONYMOUS`, who holds every role, and every response says so in `X-Plumbline-Auth: off`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute

from service.access.keys import Authenticator, parse_token
from service.access.principals import ANONYMOUS, Principal, require
from service.errors import Forbidden, PlumblineError, Unauthenticated
from service.infra.observability import ServiceMetrics
from service.runtime import Runtime
from service.settings import Settings
from service.state.audit import DenialThrottle

log = logging.getLogger("plumbline")

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
    principal = await authenticate(runtime.authenticator, _token(header_key, bearer))
    request.scope[PRINCIPAL] = principal  # for the audit of a refusal (`audit_denials`)
    return principal


# Where `app.Authenticate` leaves the caller it found in the request's ASGI scope (no client can set a scope key).
PRINCIPAL = "plumbline.principal"
# Where a role check leaves the roles a refused caller lacks, for the audit of the 403.
MISSING_ROLES = "plumbline.missing_roles"


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
        _require(request, principal, roles, f"{request.method} {route}")
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
    _require(request, principal, ("metrics",), "GET /metrics")
    return principal


def _require(request: Request, principal: Principal, roles: tuple[str, ...], what: str) -> None:
    """`require`, noting the roles in the request's scope when the caller lacks them."""
    try:
        require(principal, roles, what)
    except Forbidden:
        request.scope[MISSING_ROLES] = roles
        raise


def audit(runtime: Runtime, who: Principal, action: str, target: str, detail: Mapping[str, Any]) -> None:
    """Record a write `who` made (`Runtime.record`)."""
    runtime.record(who.actor, action, target, detail, who.tenant)


def audit_denials(app: FastAPI, runtime: Runtime, metrics: ServiceMetrics) -> None:
    """Count every 401 and 403 (`plumbline_auth_failures_total{status}`) and audit them as `auth.denied`, throttled
    (`DenialThrottle`: one row per caller, status and endpoint a minute, at most 100 a minute): the target is the
    endpoint, the detail the status, the caller's address, the key id (of a 401, the one the presented key names if
    it is well formed; never the secret), and the roles it lacks or the reason of the 403. The responses are those
    `errors.install` gives (installed before this), wherever the refusal is raised: `app.Authenticate`, a role
    check, a tenant binding."""
    throttle = DenialThrottle()
    answer = app.exception_handlers[PlumblineError]

    async def denied(request: Request, exc: Exception) -> Response:
        status = 401 if isinstance(exc, Unauthenticated) else 403
        metrics.auth_failures.labels(str(status)).inc()
        try:
            await _record_denial(runtime, throttle, request, status, exc)
        except Exception:  # the audit never changes the answer
            log.exception("could not audit a refused request")
        response = answer(request, exc)
        return await response if inspect.isawaitable(response) else response

    app.add_exception_handler(Unauthenticated, denied)
    app.add_exception_handler(Forbidden, denied)


async def _record_denial(
    runtime: Runtime, throttle: DenialThrottle, request: Request, status: int, exc: Exception
) -> None:
    scope = request.scope
    endpoint = f"{request.method} {getattr(scope.get('route'), 'path', None) or request.url.path[:200]}"
    client = request.client.host if request.client else None
    principal = scope.get(PRINCIPAL)
    detail: dict[str, Any] = {"status": status, "client": client}
    if status == 401 or not isinstance(principal, Principal):
        token = await presented_key(request)
        key_id = parse_token(token) if token else None
        actor, tenant, caller = "unauthenticated", None, f"address {client}"
        reason = "no key" if not token else "not a valid key" if key_id else "a malformed key"
        detail |= {"key_id": key_id, "reason": reason}
    else:
        key_id, actor, tenant = principal.key_id, principal.actor, principal.tenant
        caller = f"key {key_id or principal.name}"
        missing = scope.get(MISSING_ROLES)
        detail |= {"key_id": key_id, "missing_role": list(missing) if missing else None, "reason": str(exc)}
    extra = throttle.admit(caller, status, endpoint, key_id)
    if extra is not None:
        await run_in_threadpool(runtime.record, actor, "auth.denied", endpoint, detail | extra, tenant)
