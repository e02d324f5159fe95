"""Liveness, readiness and the Prometheus scrape endpoint."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.access.principals import Principal
from service.api.auth import AUTH_RESPONSES, metrics_caller
from service.api.deps import RuntimeDep
from service.api.schemas import Health

router = APIRouter(tags=["health"])


# Both checks are `async def` and touch no engine and no worker thread: they answer under any load.
@router.get("/health/live", response_model=Health, responses={503: {"model": Health}})
async def live(runtime: RuntimeDep) -> Response:
    """Alive, unless the embedded store has failed in a way only a restart cures (an engine process died, a failed
    write left it refusing writes): then 503, so that the orchestrator restarts the process. Readiness covers what
    passes by itself (loading, a Qdrant server that does not answer)."""
    broken = runtime.broken_reason()
    if broken:
        return JSONResponse(Health(status="failed", detail=broken).model_dump(), status_code=503)
    return JSONResponse(Health(status="alive").model_dump())


@router.get("/health/ready", response_model=Health, responses={503: {"model": Health}})
async def ready(runtime: RuntimeDep) -> Response:
    reason = runtime.unready_reason()
    if not runtime.ready or reason:
        body = Health(status="error" if reason else "loading", detail=reason)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "5"})
    if runtime.settings.metrics_auth:  # the index's size, over every tenant, only where /metrics is open too
        return JSONResponse(Health(status="ready").model_dump())
    index = runtime.index
    return JSONResponse(Health(status="ready", documents=index.documents(), chunks=index.chunks()).model_dump())


@router.get("/metrics", responses=AUTH_RESPONSES)
def metrics(request: Request, _: Annotated[Principal | None, Depends(metrics_caller)]) -> Response:
    """The Prometheus scrape; needs the `metrics` role when `metrics_auth` is on (send Authorization: Bearer)."""
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
