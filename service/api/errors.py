"""Domain errors → HTTP statuses, in one place. Every error body is {"detail": "<what to fix>"}."""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from eval.errors import AlreadyExists, EvalError, LooserThanPolicy, ReadOnly, UnknownName
from service.errors import (
    Busy,
    Cancelled,
    Conflict,
    Forbidden,
    IndexMismatch,
    IngestFailed,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    NotReady,
    PayloadTooLarge,
    PlumblineError,
    StoreUnavailable,
    TimedOut,
    Unauthenticated,
    public,
)
from service.infra import logs
from service.state import StateUnavailable

log = logging.getLogger("plumbline")

STATUS: list[tuple[type[Exception], int]] = [
    (InvalidRequest, 422),
    (NotFound, 404),
    (UnknownName, 404),
    (AlreadyExists, 409),
    (ReadOnly, 409),
    (LooserThanPolicy, 403),
    (EvalError, 422),
    (PayloadTooLarge, 413),
    (Busy, 429),
    (NotReady, 503),
    (StoreUnavailable, 503),
    (InsufficientStorage, 507),
    (TimedOut, 504),
    (IndexMismatch, 409),
    (Conflict, 409),
    (Cancelled, 409),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (PlumblineError, 500),
]
RETRY_AFTER = {429: "10", 503: "5"}
# OSError from our own file writes (labelled sets, runs): the disk, not the request, is at fault
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}
READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


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
        if err.get("type") == "json_invalid":
            messages.append(_json_error(err, exc.body))
        elif where == "body" and isinstance(err.get("input"), bytes | str):  # not parsed: not sent as JSON
            messages.append("body: send a JSON object with the header Content-Type: application/json")
        elif err.get("type") == "extra_forbidden":
            messages.append(f"{where}: unknown field; check the spelling against the API docs at /docs")
        else:
            messages.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(messages)


def _json_error(err: Any, body: Any) -> str:
    """Where a body stops being JSON, as line and column, and what the parser expected there."""
    pos = err["loc"][-1] if isinstance(err["loc"][-1], int) else 0
    text = body if isinstance(body, str) else ""
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    expected = err.get("ctx", {}).get("error", "invalid JSON")
    return f"the body is not valid JSON: {expected} at line {line}, column {column}"


def _respond(code: int, message: str, extra: Mapping[str, object] | None = None) -> JSONResponse:
    if code >= 500:
        log.error("request failed (%d): %s", code, message)
        message = public(message)
    headers = {"Retry-After": RETRY_AFTER[code]} if code in RETRY_AFTER else None
    if code == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="plumbline"'}
    return JSONResponse({"detail": message, **(extra or {})}, status_code=code, headers=headers)


def state_unavailable() -> str:
    """The 503 body's message when the state store fails: the request's id, by which the log line with the
    database driver's error is found; never that error, which may name a host, a user or a database."""
    return f"the state store is unavailable (request {logs.request_id.get() or 'unknown'}); see the server log"


def internal_error() -> JSONResponse:
    """The 500 for an exception nothing mapped (the middleware logs it with the request id)."""
    return JSONResponse(
        {"detail": "internal error: the service could not handle this request; its log line (X-Request-ID) says why"},
        status_code=500,
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(exc)}, status_code=422)

    @app.exception_handler(IngestFailed)
    async def _ingest_failed(_: Request, exc: IngestFailed) -> JSONResponse:
        return _respond(503, str(exc), exc.outcome())

    @app.exception_handler(PlumblineError)
    @app.exception_handler(EvalError)
    async def _domain(_: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StateUnavailable):  # the driver's text (host, user) is logged where it was raised
            return _respond(503, state_unavailable())
        return _respond(status_of(exc), str(exc))

    @app.exception_handler(OSError)
    async def _disk(_: Request, exc: OSError) -> JSONResponse:
        if exc.errno in DISK_FULL:
            return _respond(507, "the disk is full (no space left on device): free some space. Nothing was written.")
        if exc.errno in READ_ONLY:
            return _respond(503, f"the data directory cannot be written: {exc.strerror}")
        return _respond(500, f"internal error: {exc}")

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's JSON parsing gave up
            return _respond(400, "the body is nested too deep to read: no field of this API nests more than 8 levels")
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
