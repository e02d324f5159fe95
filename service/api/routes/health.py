"""Liveness, readiness and the Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import RuntimeDep
from service.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health/live", response_model=Health)
def live() -> Health:
    return Health(status="alive")


@router.get("/health/ready", response_model=Health, responses={503: {"model": Health}})
def ready(runtime: RuntimeDep) -> Response:
    if not runtime.ready:
        body = Health(status="error" if runtime.error else "loading", detail=runtime.error)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "5"})
    index = runtime.index
    return JSONResponse(Health(status="ready", documents=index.documents(), chunks=index.chunks()).model_dump())


@router.get("/metrics")
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
