"""The app factory. Nothing is built at import time: `create_app(settings)` wires everything."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import errors
from service.api.routes import admin, documents, evaluation, health, identity, incidents, search, web
from service.api.schemas import ERROR_RESPONSES
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


def create_app(
    settings: Settings,
    *,
    components: Components | None = None,
    registry: CollectorRegistry | None = None,
    preload: tuple[Path, ...] = (),
) -> FastAPI:
    """Build the service. Models load in the background after startup; `/health/ready` says when.

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
    registry.register(EvalGaugeCollector(lambda: runtime.evals if runtime.ready else None, settings.eval_schedule))
    registry.register(IncidentGaugeCollector(lambda: runtime.state))

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
    for module in (documents, search, evaluation, incidents, admin, identity, health):
        app.include_router(module.router)
    web.install(app)
    if settings.auth == "off":
        log.warning("auth is OFF (PLUMBLINE_AUTH=off): anyone who can reach this port may do anything; local demo only")
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
    app.add_middleware(Observe, limit=settings.max_request_bytes, metrics=metrics, headers=security_headers)
    return app


class Observe:
    """Around every HTTP request: its id (the caller's `X-Request-ID` or a fresh one, in every log line and the
    response), the body-size limit (413 before the body is read), a 500 for an exception nothing mapped (logged with
    the id), the request metrics and access log line, and the headers every response carries. Plain ASGI: Starlette's
    `@app.middleware("http")` runs the app in a task of its own and streams its response through a queue; as that,
    a /search on the handbook spent 2.4-3.5 ms in the app beyond the pipeline, as this 1.6-2.5 (in-process, two
    runs each way, two cores)."""

    def __init__(self, app: ASGIApp, *, limit: int, metrics: ServiceMetrics, headers: dict[str, str]) -> None:
        self.app, self.limit, self.metrics, self.headers = app, limit, metrics, headers

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

        try:
            length = request_headers.get("content-length")
            if length and length.isdigit() and int(length) > self.limit:
                detail = f"request body is {length} bytes; the limit is {self.limit}: send smaller batches"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send_stamped)
                return
            try:
                await self.app(scope, receive, send_stamped)
            except Exception:  # nothing mapped it: a 500 answered here, logged and counted with the request id
                log.exception("unhandled error in %s %s", scope["method"], scope["path"])
                if started:  # the response is under way: nothing left to answer with
                    raise
                await errors.internal_error()(scope, receive, send_stamped)
        finally:
            self._observe(scope, status, start)
            logs.request_id.reset(token)

    def _observe(self, scope: Scope, status: int, start: float) -> None:
        endpoint = getattr(scope.get("route"), "path", "unmatched")
        seconds = time.perf_counter() - start
        self.metrics.observe_request(endpoint, scope["method"], status, seconds)
        client = scope["client"][0] if scope.get("client") else None
        fields = {"method": scope["method"], "path": scope["path"], "endpoint": endpoint, "status": status}
        access.info("request", extra={**fields, "duration_ms": round(seconds * 1000, 2), "client": client})


def _counts(runtime: Runtime) -> dict[str, int] | None:
    if not runtime.ready:
        return None
    return dict(runtime.index.sizes)
