"""Evaluation errors (the service maps them to HTTP statuses; the CLI to exit code 2)."""

from __future__ import annotations


class EvalError(ValueError):
    """Bad evaluation input: a malformed case file, a case without positive labels, bad options."""


class UnknownName(EvalError, LookupError):
    """No labelled set, run or baseline by that name."""


class AlreadyExists(EvalError):
    """A baseline by that name exists, and replacing it was not asked for."""


class ReadOnly(EvalError):
    """A set or baseline that ships with the code cannot be replaced, only deliberately shadowed."""
