"""The served search defaults a promoted sweep winner sets: stored in the state store (so every replica serves the
same), laid over the settings' `default_*` values, checked against the settings' limits.

    >>> served_settings(Settings(), {"alpha": 0.3, "k": 5}).default_alpha  # doctest: +SKIP
    0.3
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.domain import FusionMethod, Mode
from service.errors import Conflict
from service.settings import Settings

KEY = "served_defaults"  # the state store's meta key: {"defaults": {...}, "sweep": id, "run_id": id, "at": time}

# a sweep's search parameter -> the setting it becomes
FIELDS = {
    "mode": "default_mode",
    "fusion": "default_fusion",
    "alpha": "default_alpha",
    "rrf_k": "default_rrf_k",
    "candidates": "default_candidates",
    "rerank": "default_rerank",
    "rerank_depth": "default_rerank_depth",
    "k": "default_k",
}
LIMITS = {"k": "max_k", "candidates": "max_candidates", "rerank_depth": "max_rerank_depth"}


def served_settings(base: Settings, defaults: Mapping[str, Any]) -> Settings:
    """`base` with the promoted search `defaults` in place of its `default_*` values; `Conflict` naming the limit a
    value passes (the settings may have changed since the promotion)."""
    for name, limit in LIMITS.items():
        if name in defaults and int(defaults[name]) > getattr(base, limit):
            raise Conflict(
                f"the promoted {name}={defaults[name]} exceeds {limit}={getattr(base, limit)}: raise "
                f"PLUMBLINE_{limit.upper()} or promote another configuration"
            )
    update: dict[str, Any] = {}
    for name, value in defaults.items():
        if name not in FIELDS:
            continue
        if name == "mode":
            value = Mode(value)
        elif name == "fusion":
            value = FusionMethod(value)
        update[FIELDS[name]] = value
    return base.model_copy(update=update)
