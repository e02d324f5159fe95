"""FastAPI dependencies: the runtime and its parts, taken from the app's state (never globals)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.evaluation.incidents import IncidentService
from service.evaluation.runs import EvalService
from service.index.index import Index
from service.retrieval.pipeline import SearchPipeline
from service.runtime import Runtime
from service.settings import Settings


# `async def`: FastAPI runs plain functions in its worker threads, and a health check must not wait for a
# free worker while eval runs and searches hold them all.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


async def get_index(runtime: RuntimeDep) -> Index:
    return runtime.index


async def get_pipeline(runtime: RuntimeDep) -> SearchPipeline:
    return runtime.pipeline


async def get_evals(runtime: RuntimeDep) -> EvalService:
    """The eval service: once the runtime is up (holds the data directory's lock, the state store is open)."""
    return runtime.evals


async def get_incidents(runtime: RuntimeDep) -> IncidentService:
    return runtime.incidents


SettingsDep = Annotated[Settings, Depends(get_settings)]
IndexDep = Annotated[Index, Depends(get_index)]
PipelineDep = Annotated[SearchPipeline, Depends(get_pipeline)]
EvalsDep = Annotated[EvalService, Depends(get_evals)]
IncidentsDep = Annotated[IncidentService, Depends(get_incidents)]
