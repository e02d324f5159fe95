"""Logging: one JSON object per line (for log collectors) or plain text (for a terminal), and the request id.

The HTTP middleware (`service.api.app`) sets `request_id` for each request, from `X-Request-ID` when the caller
sent a usable one, and logs one `request` line per request; every record created while a request is handled
carries its id (`stamp_request_ids`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import uuid
from contextvars import ContextVar
from typing import Any

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

# what a request line carries besides the message (set with `extra=`)
REQUEST_FIELDS = ("method", "path", "endpoint", "status", "duration_ms", "client")
_USABLE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_request_id(sent: str | None) -> str:
    """The caller's `X-Request-ID` if it is a plain token of at most 128 characters, else a fresh one."""
    return sent if sent is not None and _USABLE_ID.fullmatch(sent) else uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", "request_id"?, <request fields>?, "exception"?}` on one line.

    Example:
        >>> record = logging.LogRecord("plumbline", logging.INFO, "", 0, "ready: %d documents", (3,), None)
        >>> json.loads(JsonFormatter().format(record))["message"]
        'ready: 3 documents'
    """

    converter = staticmethod(time.gmtime)  # times in UTC, as the `Z` says

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        for field in REQUEST_FIELDS:
            if hasattr(record, field):
                out[field] = getattr(record, field)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def stamp_request_ids() -> None:
    """Make every log record carry `request_id`: the id of the request being handled where it was created, or
    None. Installed once (by `create_app` and `configure`), whatever handlers come and go."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "stamps_request_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = request_id.get()
        return record

    factory.stamps_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on `sys.stderr` as it is when a line is written, not when the handler was made: the same for a
    server, but a command run in-process by a test runner that swaps stderr per test (pytest) would otherwise leave
    the root logger writing to a file the runner has closed ("Logging error ... I/O operation on closed file")."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        """Ignored: the stream is always the current stderr."""


def configure(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send every logger's lines to stderr as `fmt` ("json" or "text"), replacing earlier handlers."""
    stamp_request_ids()
    handler = _Stderr()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.captureWarnings(True)  # a library's warning is a log line too, not a bare line on stderr
    if fmt == "json":  # no progress bars drawn on stderr between the JSON lines (model loading draws one)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # a line per request is ours to write; alembic's plugin set-up is not news
    for noisy in ("httpx", "uvicorn.access", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
