"""The app factory. Nothing is built at import time: `create_app(settings)` wires everything."""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from prometheus_client import CollectorRegistry
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.access.principals import Principal
from service.api import auth, errors
from service.api.routes import admin, documents, evaluation, health, identity, incidents, search, web, work
from service.api.schemas import ERROR_RESPONSES
from service.errors import Unauthenticated
from service.evaluation.answers import AnswerGaugeCollector
from service.evaluation.gauges import EvalGaugeCollector
from service.evaluation.incidents import IncidentGaugeCollector
from service.infra import logs
from service.infra.observability import IndexSizeCollector, ServiceMetrics
from service.runtime import Components, Runtime
from service.settings import Settings

log = logging.getLogger("plumbline")
access = logging.getLogger("plumbline.access")
# On every response: nothing a browser should sniff, frame, cache or send referrers from; the content policy allows
# this origin only (`web.CONTENT_POLICY`; /docs sets its own, a little wider, for Swagger UI).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": web.CONTENT_POLICY,
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# Routes whose bodies never need what an ingest batch or a labelled set may: their own limit, under
# `max_request_bytes` (which caps them), so a flood of them cannot hold much memory.
ROUTE_LIMITS = {
    ("POST", "/search"): "max_search_request_bytes",
    ("POST", "/eval/incidents"): "max_incident_request_bytes",
    ("PATCH", "/eval/incidents/{incident_id}"): "max_incident_request_bytes",
}


def create_app(
    settings: Settings,
    *,
    components: Components | None = None,
    registry: CollectorRegistry | None = None,
    preload: tuple[Path, ...] = (),
    bound_host: str | None = None,
) -> FastAPI:
    """Build the service. Models load in the background after startup; `/health/ready` says when. `bound_host`: the
    address `plumbline serve --host` listens on (a name requests may carry in `Host`; see `CheckHost`).

    Example:
        >>> app = create_app(Settings(data_dir=Path("/tmp/plumbline")))
        >>> app.url_path_for("ready")
        '/health/ready'
    """
    logs.stamp_request_ids()
    registry = registry or CollectorRegistry()
    metrics = ServiceMetrics(registry)
    runtime = Runtime(settings, components, metrics, preload)
    registry.register(IndexSizeCollector(lambda: _counts(runtime)))
    intervals = {**settings.eval_expected_intervals, **settings.eval_schedule}  # run from outside, or by the replicas
    registry.register(EvalGaugeCollector(lambda: runtime.evals if runtime.ready else None, intervals))
    registry.register(IncidentGaugeCollector(lambda: runtime.state))
    registry.register(AnswerGaugeCollector(lambda: runtime.state))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runtime.start()
        yield
        runtime.close()  # waits for a warm-up still loading models; one waiting for the vector store gives up

    app = FastAPI(
        title="Plumbline",
        version="0.1.0",
        summary="Hybrid retrieval that measures itself.",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
        docs_url=None,  # served by service.api.routes.web from vendored files
        redoc_url=None,
    )
    app.state.runtime = runtime
    app.state.registry = registry
    errors.install(app)
    auth.audit_refusals(app, runtime, metrics)
    modules = (documents, search, evaluation, work, incidents, admin, identity, health)
    for module in modules:
        app.include_router(module.router)
    # the API's routes in the router's order (included without a prefix: their paths are the served ones); the
    # middlewares find a request's route among them before the app runs (the web page's routes need no key)
    routes = [route for module in modules for route in module.router.routes]
    web.install(app)
    if settings.auth == "off":
        log.warning("auth is OFF (PLUMBLINE_AUTH=off): anyone who can reach this port may do anything; local demo only")
    # the probes answer whatever the callers do (/metrics, in the same router, counts: its collectors query the store)
    unlimited = {id(route) for route in health.router.routes if getattr(route, "path", "").startswith("/health/")}
    app.add_middleware(Authenticate, api=app, routes=routes, runtime=runtime, limit=RateLimit(settings, unlimited))
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Content-Type", "X-API-Key", "Authorization", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Location", "Retry-After", "X-Plumbline-Auth"],
            max_age=600,
        )
    security_headers = {**SECURITY_HEADERS, **({"X-Plumbline-Auth": "off"} if settings.auth == "off" else {})}
    limits = {route: min(getattr(settings, name), settings.max_request_bytes) for route, name in ROUTE_LIMITS.items()}
    hosts = accepted_hosts(settings, bound_host)
    if hosts is not None:
        app.add_middleware(CheckHost, hosts=hosts, explicit=settings.allowed_hosts is not None)
    # the last added runs first: Observe, then CheckHost, then CORS (so a 401 or 429 carries its headers), then
    # Authenticate (the key, then the rate limit)
    app.add_middleware(
        Observe,
        limit=settings.max_request_bytes,
        limits=limits,
        routes=routes,
        metrics=metrics,
        headers=security_headers,
    )
    return app


class Observe:
    """Around every HTTP request: its id (the caller's `X-Request-ID` or a fresh one, in every log line and the
    response), the body-size limit (`max_request_bytes`, or the route's own in `ROUTE_LIMITS`: a 413 from
    `Content-Length` before the body is read, else as soon as the bytes read pass it, so a chunked body is bounded
    too and no handler sees part of one), a 500 for an exception nothing mapped (logged with the id), the request
    metrics and access log line, and the headers every response carries. Plain ASGI: Starlette's
    `@app.middleware("http")` runs the app in a task of its own and streams its response through a queue; as that,
    a /search on the handbook spent 2.4-3.5 ms in the app beyond the pipeline, as this 1.6-2.5 (in-process, two
    runs each way, two cores)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        limits: dict[tuple[str, str], int],
        routes: list[BaseRoute],
        metrics: ServiceMetrics,
        headers: dict[str, str],
    ) -> None:
        self.app, self.limit, self.limits, self.routes = app, limit, limits, routes
        self.metrics, self.headers = metrics, headers
        self.limited_methods = {method for method, _ in limits}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        request_headers = Headers(scope=scope)
        rid = logs.new_request_id(request_headers.get("x-request-id"))
        token = logs.request_id.set(rid)
        status = 500
        started = False
        limit = self._limit(scope)
        received = 0
        too_large = False  # the body passed the limit while the app read it: whatever the app answers, a 413

        async def send_stamped(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                headers = MutableHeaders(scope=message)
                headers["X-Request-ID"] = rid
                if scope["path"].startswith("/ui/"):  # the page's files: cached, revalidated by their ETag
                    headers.setdefault("Cache-Control", "no-cache")
                for name, value in self.headers.items():
                    headers.setdefault(name, value)
            await send(message)

        async def send_unless_too_large(message: Message) -> None:
            if not too_large:
                await send_stamped(message)

        async def receive_bounded() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    too_large = True
                    raise BodyTooLarge(limit)
            return message

        try:
            length = request_headers.get("content-length")
            if length and length.isdigit() and int(length) > limit:
                await _too_large(f"{length} bytes", limit)(scope, receive, send_stamped)
                return
            try:
                await self.app(scope, receive_bounded, send_unless_too_large)
            except Exception:  # nothing mapped it: a 500 answered here, logged and counted with the request id
                if too_large and not started:
                    pass  # the app gave up on the body it could not read whole: answered below
                else:
                    log.exception("unhandled error in %s %s", scope["method"], scope["path"])
                    if started:  # the response is under way: nothing left to answer with
                        raise
                    await errors.internal_error()(scope, receive, send_stamped)
            if too_large and not started:
                await _too_large(f"over {limit} bytes", limit)(scope, receive, send_stamped)
        finally:
            self._observe(scope, status, start)
            logs.request_id.reset(token)

    def _limit(self, scope: Scope) -> int:
        """The route's own limit, if it has one; else `max_request_bytes`."""
        if scope["method"] not in self.limited_methods:
            return self.limit
        route = matched(self.routes, scope)
        path = getattr(route, "path", None)
        return self.limits.get((scope["method"], path), self.limit) if path else self.limit

    def _observe(self, scope: Scope, status: int, start: float) -> None:
        endpoint = getattr(scope.get("route"), "path", "unmatched")
        seconds = time.perf_counter() - start
        self.metrics.observe_request(endpoint, scope["method"], status, seconds)
        client = scope["client"][0] if scope.get("client") else None
        fields = {"method": scope["method"], "path": scope["path"], "endpoint": endpoint, "status": status}
        access.info("request", extra={**fields, "duration_ms": round(seconds * 1000, 2), "client": client})


class BodyTooLarge(Exception):
    """Raised to the app by `Observe`'s `receive` once a body passes its limit (`Observe` answers the 413)."""


def _too_large(size: str, limit: int) -> JSONResponse:
    detail = f"request body is {size}; the limit is {limit}: send smaller batches"
    return JSONResponse({"detail": detail}, status_code=413)


LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = {"", "0.0.0.0", "[::]"}  # `serve --host` on every interface names no host of its own


def accepted_hosts(settings: Settings, bound_host: str | None) -> frozenset[str] | None:
    """The host names (normalised by `host_name`) requests may carry in `Host`; None: any. `allowed_hosts` when
    set; else, with auth off, the loopback names and the bound host; with auth on, any (keys protect the service,
    and an ingress may forward any host)."""
    if settings.allowed_hosts is not None:
        return frozenset(host_name(h, entry=True) for h in settings.allowed_hosts)
    if settings.auth == "on":
        return None
    bound = host_name(bound_host or "", entry=True)
    return frozenset((*LOOPBACK, *(() if bound in WILDCARD_ADDRESSES else (bound,))))


def host_name(value: str, *, entry: bool = False) -> str:
    """The host of a `Host` header (or of an allowed-hosts entry), lower case, without the port or a final dot;
    an IPv6 address in brackets (an entry may omit them)."""
    value = value.strip().lower()
    if entry and value.count(":") > 1 and not value.startswith("["):
        value = f"[{value}]"  # a bare IPv6 address
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    name, colon, port = value.rpartition(":")
    return (name if colon and (port.isdigit() or not port) else value).rstrip(".")


class CheckHost:
    """Requests whose `Host` is not one of `hosts` get a 421 saying which are, before anything else runs: with auth
    off, a web page elsewhere could otherwise reach this service through a DNS name of its own that resolves to
    127.0.0.1 (DNS rebinding), and the browser would let it read the answers. `*` allows any host, `*.example.com`
    any under it. A request without a `Host` header (HTTP/1.0, a bare ASGI call) passes: a browser always sends one.
    Plain ASGI, one pass over the request's raw headers (Starlette's `TrustedHostMiddleware` answers a bare 400
    "Invalid host header", and refuses a request without one)."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str], explicit: bool) -> None:
        self.app, self.explicit = app, explicit
        self.any = "*" in hosts
        self.hosts = frozenset(h for h in hosts if not h.startswith("*"))
        self.suffixes = tuple(h[1:] for h in hosts if h.startswith("*."))
        shown = ", ".join(sorted(hosts))
        self.hint = (
            f"the hosts this service answers are {shown} (any port): list others in PLUMBLINE_ALLOWED_HOSTS (JSON, "
            'e.g. ["plumbline.lan"])'
            + ("" if explicit else ", or turn auth on; with auth off any other host could be a web page's DNS name")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any:
            await self.app(scope, receive, send)
            return
        raw = next((value for name, value in scope["headers"] if name == b"host"), None)
        host = raw.decode("latin-1") if raw is not None else None
        name = host_name(host) if host is not None else None
        if name is None or name in self.hosts or (self.suffixes and name.endswith(self.suffixes)):
            await self.app(scope, receive, send)
            return
        detail = f"Host {(host or '')[:100]!r} is not accepted: {self.hint}"
        await JSONResponse({"detail": detail}, status_code=421)(scope, receive, send)


class RateLimit:
    """Requests per caller, a moving window in this process's memory (`limits`): a key's under `rate_limit`, an
    address's under `rate_limit_per_address` when it presents no key (auth off, or a route that needs none). Health
    routes (`unlimited`, by route id) never count. `refusal` counts the request, or answers the 429 that refuses it,
    with `Retry-After`: the seconds until the window frees a request."""

    def __init__(self, settings: Settings, unlimited: set[int]) -> None:
        self.per_key = _rates(settings.rate_limit)
        self.per_address = _rates(settings.rate_limit_per_address)
        self.unlimited = unlimited
        self.limiter = MovingWindowRateLimiter(MemoryStorage()) if self.per_key or self.per_address else None

    def refusal(self, scope: Scope, route: BaseRoute | None, principal: Principal | None) -> JSONResponse | None:
        if self.limiter is None or (route is not None and id(route) in self.unlimited):
            return None
        if principal is not None:
            caller, rates, who = f"key {principal.key_id or principal.name}", self.per_key, "this key"
        else:
            address = scope["client"][0] if scope.get("client") else "unknown"
            caller, rates, who = f"address {address}", self.per_address, "this address"
        for rate in rates:
            if not self.limiter.hit(rate, caller):
                reset = self.limiter.get_window_stats(rate, caller).reset_time
                retry = max(1, math.ceil(reset - time.time()))
                detail = f"{who} is over its rate limit of {rate}: retry after {retry} s"
                return JSONResponse({"detail": detail}, status_code=429, headers={"Retry-After": str(retry)})
        return None


def _rates(value: str | None) -> list[RateLimitItem]:
    return parse_many(value) if value else []


class Authenticate:
    """The key of a request to a route that needs one (`auth.needs_key`), checked from its headers before the app
    runs, so before any byte of its body is read: a caller without a valid key costs no more than its headers.
    The 401 is the one the dependency gives (the app's own handler of `Unauthenticated` makes it); the caller
    found is left in the scope for `auth.get_principal`, and the roles stay the dependencies' to check (403).
    Whatever else goes wrong (the service still starting, the keys file unreadable, the state store down), the
    request goes on to the app, whose dependencies answer as they always did. Then the caller's rate limit
    (`RateLimit`: the key found, else the address), still before the body: a 429 with `Retry-After` past it."""

    def __init__(
        self, app: ASGIApp, *, api: FastAPI, routes: list[BaseRoute], runtime: Runtime, limit: RateLimit
    ) -> None:
        self.app, self.api, self.routes, self.runtime, self.limit = app, api, routes, runtime, limit
        self._needs_key: dict[int, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        auth_on = self.runtime.settings.auth == "on"
        if scope["type"] != "http" or not (auth_on or self.limit.per_address):  # nothing to check (the demo)
            await self.app(scope, receive, send)
            return
        route = matched(self.routes, scope)
        principal: Principal | None = None
        if auth_on and route is not None and self._needs(route):
            try:
                principal = await auth.authenticate(
                    self.runtime.authenticator, await auth.presented_key(HTTPConnection(scope))
                )
            except Unauthenticated as exc:
                await self._refuse(scope, receive, send, route, exc)
                return
            except Exception:  # not a verdict on the key: the dependencies meet it again and answer
                await self.app(scope, receive, send)
                return
            scope[auth.PRINCIPAL] = principal
        refusal = self.limit.refusal(scope, route, principal)
        if refusal is not None:
            if route is not None:
                scope["route"] = route  # the metrics and the access log name the endpoint
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, route: BaseRoute, exc: Exception) -> None:
        handlers = self.api.exception_handlers
        handler = next((handlers[kind] for kind in type(exc).__mro__ if kind in handlers), None)
        if handler is None:  # pragma: no cover - errors.install maps every PlumblineError
            raise exc
        scope["route"] = route  # the metrics and the access log name the endpoint, as when the dependency answered
        response = handler(Request(scope), exc)
        await (await response if inspect.isawaitable(response) else response)(scope, receive, send)

    def _needs(self, route: BaseRoute) -> bool:
        needs = self._needs_key.get(id(route))
        if needs is None:
            needs = self._needs_key[id(route)] = auth.needs_key(route, self.runtime.settings)
        return needs


_MATCHED = "plumbline.matched_route"  # a request's route once `matched` found it: both middlewares ask


def matched(routes: list[BaseRoute], scope: Scope) -> BaseRoute | None:
    """The route of `routes` the router will hand a request to (the first that matches its path and method), found
    once a request."""
    if _MATCHED not in scope:
        scope[_MATCHED] = next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)
    found: BaseRoute | None = scope[_MATCHED]
    return found


def _counts(runtime: Runtime) -> dict[str, int] | None:
    if not runtime.ready:
        return None
    return dict(runtime.index.sizes)
