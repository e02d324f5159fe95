"""Domain errors → HTTP statuses, in one place. Every error body is {"detail": "<what to fix>"}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from eval.errors import EvalError, UnknownName
from service.errors import (
    IndexMismatch,
    InvalidRequest,
    NotFound,
    NotReady,
    PayloadTooLarge,
    PlumblineError,
)

log = logging.getLogger("plumbline")

STATUS: list[tuple[type[Exception], int]] = [
    (InvalidRequest, 422),
    (NotFound, 404),
    (UnknownName, 404),
    (EvalError, 422),
    (PayloadTooLarge, 413),
    (NotReady, 503),
    (IndexMismatch, 409),
    (PlumblineError, 500),
]


def status_of(exc: Exception) -> int:
    return next((code for kind, code in STATUS if isinstance(exc, kind)), 500)


def _location(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def validation_message(exc: RequestValidationError) -> str:
    messages = []
    for err in exc.errors():
        where = _location(tuple(err.get("loc", ())))
        if err.get("type") == "extra_forbidden":
            messages.append(f"{where}: unknown field; check the spelling against the API docs at /docs")
        else:
            messages.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(messages)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(exc)}, status_code=422)

    @app.exception_handler(PlumblineError)
    @app.exception_handler(EvalError)
    async def _domain(_: Request, exc: Exception) -> JSONResponse:
        code = status_of(exc)
        if code >= 500:
            log.error("request failed: %s", exc)
        headers = {"Retry-After": "5"} if code == 503 else None
        return JSONResponse({"detail": str(exc)}, status_code=code, headers=headers)
