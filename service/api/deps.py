"""FastAPI dependencies: the runtime, its parts and the application services over them (`service.application`),
taken from the app's state (never globals)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.application.documents import Documents
from service.application.evaluations import Evaluations
from service.application.incidents import Incidents
from service.application.search import Searches
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
    runtime.refresh_served()
    return runtime.settings


async def get_index(runtime: RuntimeDep) -> Index:
    return runtime.index


async def get_pipeline(runtime: RuntimeDep) -> SearchPipeline:
    return runtime.pipeline


async def get_searches(runtime: RuntimeDep) -> Searches:
    runtime.refresh_served()  # a promoted sweep's defaults, read from the state store every few seconds
    return Searches(runtime.settings, runtime.pipeline, runtime.no_answer)


async def get_documents(runtime: RuntimeDep) -> Documents:
    return Documents(runtime.index)


async def get_evaluations(runtime: RuntimeDep) -> Evaluations:
    """Eval runs, sets and baselines: once the runtime is up (holds the data directory's lock, the state store is
    open)."""
    runtime.refresh_served()
    return Evaluations(runtime.evals, runtime.settings, hygiene=runtime.hygiene)


async def get_incident_desk(runtime: RuntimeDep) -> Incidents:
    return Incidents(runtime.incidents, runtime.evals, runtime.settings)


SettingsDep = Annotated[Settings, Depends(get_settings)]
IndexDep = Annotated[Index, Depends(get_index)]
PipelineDep = Annotated[SearchPipeline, Depends(get_pipeline)]
SearchesDep = Annotated[Searches, Depends(get_searches)]
DocumentsDep = Annotated[Documents, Depends(get_documents)]
EvaluationsDep = Annotated[Evaluations, Depends(get_evaluations)]
IncidentDeskDep = Annotated[Incidents, Depends(get_incident_desk)]
