"""FastAPI dependencies: the runtime and its parts, taken from the app's state (never globals)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.index import Index
from service.pipeline import SearchPipeline
from service.runtime import Runtime
from service.settings import Settings


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


def get_index(runtime: RuntimeDep) -> Index:
    return runtime.index


def get_pipeline(runtime: RuntimeDep) -> SearchPipeline:
    return runtime.pipeline


SettingsDep = Annotated[Settings, Depends(get_settings)]
IndexDep = Annotated[Index, Depends(get_index)]
PipelineDep = Annotated[SearchPipeline, Depends(get_pipeline)]
