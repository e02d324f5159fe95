"""The app factory. Nothing is built at import time: `create_app(settings)` wires everything."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from service import logs
from service.api import errors
from service.api.routes import admin, documents, evaluation, health, identity, incidents, search, web
from service.api.schemas import ERROR_RESPONSES
from service.evaluation import EvalGaugeCollector
from service.incidents import IncidentGaugeCollector
from service.observability import IndexSizeCollector, ServiceMetrics
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

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        rid = logs.new_request_id(request.headers.get("x-request-id"))
        token = logs.request_id.set(rid)
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > settings.max_request_bytes:
            response: Response = JSONResponse(
                {
                    "detail": f"request body is {length} bytes; the limit is {settings.max_request_bytes}: "
                    "send smaller batches"
                },
                status_code=413,
            )
        else:
            try:
                response = await call_next(request)
            except Exception:  # nothing mapped it: a 500 answered here, logged and counted with the request id
                log.exception("unhandled error in %s %s", request.method, request.url.path)
                response = errors.internal_error()
        _observe(request, response.status_code, start)
        response.headers["X-Request-ID"] = rid
        if request.url.path.startswith("/ui/"):  # the page's files: cached, revalidated by their ETag
            response.headers.setdefault("Cache-Control", "no-cache")
        for name, value in security_headers.items():
            response.headers.setdefault(name, value)
        logs.request_id.reset(token)
        return response

    def _observe(request: Request, status: int, start: float) -> None:
        endpoint = getattr(request.scope.get("route"), "path", "unmatched")
        seconds = time.perf_counter() - start
        metrics.observe_request(endpoint, request.method, status, seconds)
        client = request.client.host if request.client else None
        fields = {"method": request.method, "path": request.url.path, "endpoint": endpoint, "status": status}
        access.info("request", extra={**fields, "duration_ms": round(seconds * 1000, 2), "client": client})

    return app


def _counts(runtime: Runtime) -> dict[str, int] | None:
    if not runtime.ready:
        return None
    return dict(runtime.index.sizes)
