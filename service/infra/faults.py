"""Crash points: named places where the kill-point tests make a real process die by SIGKILL.

`PLUMBLINE_CRASH_AT=NAME` (or `NAME#N`, the N-th time the point is reached) makes the process kill itself
with SIGKILL at that point: no exception, no cleanup, no flush, exactly what a power cut or an OOM kill
does. Unset (always, outside those tests), `crash_point` only reads the environment. It lives in `eval`,
the lower layer, so that both packages' write paths can name their points.

Example:
    >>> crash_point("ingest:committed")  # no PLUMBLINE_CRASH_AT: nothing happens
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "PLUMBLINE_CRASH_AT"
_reached: Counter[str] = Counter()


def crash_point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition("#")
    if point != name:
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
