"""Domain errors. `service.api.errors` maps each to one HTTP status, in one place."""

from __future__ import annotations


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
