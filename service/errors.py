"""Domain errors. `service.api.errors` maps each to one HTTP status, in one place."""

from __future__ import annotations

import re
from collections.abc import Sequence


class PlumblineError(Exception):
    """Base class: the message says what went wrong and what to do about it."""


class InvalidRequest(PlumblineError, ValueError):
    """The caller sent something we cannot act on (HTTP 422)."""


class NotFound(PlumblineError, LookupError):
    """The named document, run, set or baseline does not exist (HTTP 404)."""


class PayloadTooLarge(PlumblineError):
    """A batch or a document is over a configured limit (HTTP 413)."""


class NotReady(PlumblineError):
    """Models are still loading or the store is not open (HTTP 503)."""


class IndexMismatch(PlumblineError):
    """The data directory was built with another model or analyzer than the settings ask for."""


class StoreUnavailable(PlumblineError):
    """The engine cannot serve or refused a write (HTTP 503); the message carries no file paths."""


class StoreUnreachable(StoreUnavailable):
    """The vector store did not answer (no connection, timeouts, overload) past the retries (HTTP 503): worth
    waiting for, unlike a store that answers with a refusal."""


class IngestFailed(StoreUnavailable):
    """A batch's write failed midway (HTTP 503): which of its documents are committed, which are not, and which may
    be either (the undo failed too). Re-sending the batch is safe: an ingest is idempotent."""

    def __init__(
        self,
        message: str,
        *,
        committed: Sequence[str] = (),
        not_committed: Sequence[str] = (),
        unknown: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.committed, self.not_committed, self.unknown = list(committed), list(not_committed), list(unknown)

    def outcome(self) -> dict[str, list[str]]:
        return {"committed": self.committed, "not_committed": self.not_committed, "unknown": self.unknown}


class InsufficientStorage(PlumblineError):
    """The disk holding the data directory is (nearly) full (HTTP 507); nothing was written."""


class Busy(PlumblineError):
    """Too many requests of one kind are in flight (HTTP 429 with Retry-After)."""


class Conflict(PlumblineError):
    """The request does not fit the resource's state: cancelling a run that is not running (HTTP 409)."""


class Cancelled(PlumblineError):
    """A run stopped because someone cancelled it (HTTP 409 if a caller waited on it)."""


class TimedOut(PlumblineError):
    """A request ran past its time limit (HTTP 504); what it would have written was not written."""


class DataDirUnavailable(PlumblineError):
    """The data directory cannot be used: not writable (the service stays up and answers 503 saying so)."""


class DataDirLocked(DataDirUnavailable):
    """Another process holds the data directory (the process exits, having touched nothing)."""


_PATH = re.compile(r"(?<![\w.~-])(?:/[^\s'\":,;()\[\]{}]+)+/?")


def public(message: str) -> str:
    """`message` with absolute file paths replaced by `<path>`: logs keep paths, responses never show them.

    Example:
        >>> public("Can't open /var/lib/plumbline/index/wal/open-1: No space left on device")
        "Can't open <path>: No space left on device"
    """
    return _PATH.sub("<path>", message)


class Unauthenticated(PlumblineError):
    """No valid API key came with the request (HTTP 401); the message never says which keys exist."""


class Forbidden(PlumblineError):
    """The key is valid but lacks the role, or its tenant binding forbids the request (HTTP 403)."""
