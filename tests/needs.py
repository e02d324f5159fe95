"""What a test does when a system binary or capability it needs is missing: skip, saying why, or fail where CI says
it must be there (`.ci/run` sets PLUMBLINE_REQUIRE_POSTGRES, _PROMETHEUS, _BROWSER, _LOOP_MOUNT and _LLM, the last for
the real LLM server's venv that tests/llm_server.py looks for)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(reason: str, required_by: str) -> NoReturn:
    """Skip with `reason`; fail instead when the environment variable `required_by` is set (not "" or "0")."""
    if os.environ.get(required_by, "") not in ("", "0"):
        pytest.fail(f"{reason} and {required_by} is set")
    pytest.skip(reason)
