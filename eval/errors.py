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


class LooserThanPolicy(EvalError):
    """A run asked for a gate looser than its baseline's policy (a larger tolerance, significance required where
    the policy does not, regressed incidents forgiven): a caller may only make a gate stricter."""
