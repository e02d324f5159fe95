"""Waiting in a test for a condition that no event announces (a file an engine process writes, a background probe)."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], bool], seconds: float, every: float = 0.1) -> bool:
    """Whether `check()` came true within `seconds`, asking every `every` seconds."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
