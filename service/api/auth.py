"""Who is calling: the API key → `Principal` dependency, one dependency per role, and the audit trail of writes
and of refusals (401, 403; writes refused with 409 or 422).

Routes declare the role they need as a parameter type (`caller: Searcher`), so the role table lives in the
routes' signatures and `tests/service/api/test_access.py` checks every one. With `auth = off` (the local demo)
every caller is `ANONYMOUS`, who holds every role, and every response says so in `X-Plumbline-Auth: off`.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Annotated, Any, cast

from fastapi import Depends, FastAPI, Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute

from eval.errors import EvalError
from service.access.keys import Authenticator, parse_token
from service.access.principals import ANONYMOUS, Principal, require
from service.errors import Forbidden, PlumblineError, Unauthenticated
from service.infra.observability import ServiceMetrics
from service.runtime import Runtime
from service.settings import Settings
from service.state.audit import Pending, RefusalThrottle

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
    request.scope[PRINCIPAL] = principal  # for the audit of a refusal (`audit_refusals`)
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


def audited(
    runtime: Runtime,
    who: Principal,
    action: str,
    target: str = "",
    detail: Mapping[str, Any] | None = None,
    *,
    after: bool = False,
) -> AbstractContextManager[Pending]:
    """Declare the audit entry of the write the block makes as `who` (`Runtime.auditing`): the state-store
    transaction that makes the change writes it; with `after` (a change kept in the vector index), the block's end."""
    return runtime.auditing(who.actor, action, target, detail, tenant=who.tenant, after=after)


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The routes that take a write method and change nothing: a search posts its question as a body. Every other route
# with a write method is a write (`tests/service/api/test_audit.py` lists them), and a refusal of one is audited.
READ_ONLY = frozenset({("POST", "/search")})
REFUSED_WRITE = frozenset({409, 422})  # a write that conflicts with what is stored, or is invalid
REASON_CHARS = 300  # of a refused write's answer, in its audit row


def is_write(method: str, route: str) -> bool:
    """Whether a request of `method` to `route` (its template) asks for a change."""
    return method in WRITE_METHODS and (method, route) not in READ_ONLY


def audit_refusals(app: FastAPI, runtime: Runtime, metrics: ServiceMetrics) -> None:
    """Count and audit the refused requests, each kind throttled on its own (`RefusalThrottle`: one row per caller,
    status and endpoint a minute, at most 100 a minute), the target being the endpoint, the detail the status, the
    caller's address and key id (never a secret, never the body), and why:
    - every 401 and 403 (`plumbline_auth_failures_total{status}`), as `auth.denied`: of a 401, the key id the
      presented key names if it is well formed; of a 403, the roles it lacks, or the reason of the 403;
    - every write (`is_write`) refused with 409 or 422 (`plumbline_writes_refused_total{status}`), as
      `write.refused`, with the start of the answer's `detail` as the reason.
    The responses are those `errors.install` gives (installed before this), wherever the refusal is raised:
    `app.Authenticate`, a role check, a tenant binding, the request's validation, a use case, the state store."""
    denials, writes = RefusalThrottle(), RefusalThrottle()
    handlers = dict(app.exception_handlers)

    async def answer(request: Request, exc: Exception) -> Response:
        handler = next(handlers[kind] for kind in type(exc).__mro__ if kind in handlers)
        response = handler(request, exc)
        return cast(Response, await response if inspect.isawaitable(response) else response)

    async def denied(request: Request, exc: Exception) -> Response:
        status = 401 if isinstance(exc, Unauthenticated) else 403
        metrics.auth_failures.labels(str(status)).inc()
        try:
            await _record_denial(runtime, denials, request, status, exc)
        except Exception:  # the audit never changes the answer
            log.exception("could not audit a refused request")
        return await answer(request, exc)

    async def refused(request: Request, exc: Exception) -> Response:
        response = await answer(request, exc)
        status = response.status_code
        if status in REFUSED_WRITE and is_write(request.method, _route(request)):
            metrics.writes_refused.labels(str(status)).inc()
            try:
                await _record_refused_write(runtime, writes, request, response)
            except Exception:  # the audit never changes the answer
                log.exception("could not audit a refused write")
        return response

    for denial in (Unauthenticated, Forbidden):
        app.add_exception_handler(denial, denied)
    for error in (RequestValidationError, PlumblineError, EvalError):
        app.add_exception_handler(error, refused)


def _route(request: Request) -> str:
    """The request's route template (its path, bounded, when no route matched)."""
    return getattr(request.scope.get("route"), "path", None) or request.url.path[:200]


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


async def _record_denial(
    runtime: Runtime, throttle: RefusalThrottle, request: Request, status: int, exc: Exception
) -> None:
    scope = request.scope
    client = _client(request)
    principal = scope.get(PRINCIPAL)
    detail: dict[str, Any] = {"status": status, "client": client}
    if status == 401 or not isinstance(principal, Principal):
        token = await presented_key(request)
        key_id = parse_token(token) if token else None
        who, caller = UNAUTHENTICATED, f"address {client}"
        reason = "no key" if not token else "not a valid key" if key_id else "a malformed key"
        detail |= {"key_id": key_id, "reason": reason}
    else:
        who, caller = principal, f"key {principal.key_id or principal.name}"
        missing = scope.get(MISSING_ROLES)
        detail |= {"key_id": who.key_id, "missing_role": list(missing) if missing else None, "reason": str(exc)}
    await _throttled(runtime, throttle, request, "auth.denied", caller, who, detail)


async def _record_refused_write(
    runtime: Runtime, throttle: RefusalThrottle, request: Request, response: Response
) -> None:
    """The caller is the one its key names (with auth off, `ANONYMOUS`, told apart by address); the reason, the
    start of the answer's `detail`."""
    found = request.scope.get(PRINCIPAL)  # with auth on, `app.Authenticate` put it there before the body was read
    who = found if isinstance(found, Principal) else ANONYMOUS if runtime.settings.auth == "off" else UNAUTHENTICATED
    client = _client(request)
    try:
        reason = str(json.loads(bytes(response.body))["detail"])[:REASON_CHARS]
    except (ValueError, KeyError, TypeError):
        reason = None
    detail = {"status": response.status_code, "client": client, "key_id": who.key_id, "reason": reason}
    caller = f"key {who.key_id}" if who.key_id else f"address {client}"
    await _throttled(runtime, throttle, request, "write.refused", caller, who, detail)


UNAUTHENTICATED = Principal("unauthenticated", None, frozenset())  # how the audit log names a caller with no valid key


async def _throttled(
    runtime: Runtime,
    throttle: RefusalThrottle,
    request: Request,
    action: str,
    caller: str,
    who: Principal,
    detail: dict[str, Any],
) -> None:
    """An audit row of a refusal (the endpoint its target), if `throttle` admits it (with what it adds: the refusals
    like it not written)."""
    endpoint = f"{request.method} {_route(request)}"
    extra = throttle.admit(caller, detail["status"], endpoint, detail["key_id"])
    if extra is not None:
        await run_in_threadpool(runtime.record, who.actor, action, endpoint, detail | extra, who.tenant)
