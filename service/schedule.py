"""Scheduled monitoring runs: each set in `PLUMBLINE_EVAL_SCHEDULE` is replayed against the served
configuration once its latest monitoring run is older than its interval, so the gauges never go stale.

Every replica runs a `Scheduler`; the set's lease in the state store (`EvalService.evaluate`, which checks
again under the lease that the run is still due) makes exactly one of them run it. The scheduler's own thread
runs one set at a time, so ticks never pile up behind a long run, and `/search` is served by other threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from service.errors import Busy

log = logging.getLogger("plumbline")


class Scheduler:
    """Calls `run(set_name, interval)` for each scheduled set on every tick; `run` returns True if it ran.

    Example:
        >>> s = Scheduler({"handbook": 3600}, lambda name, interval: False)
        >>> s.tick()
        []
    """

    def __init__(self, intervals: Mapping[str, float], run: Callable[[str, float], bool]) -> None:
        self.intervals = dict(intervals)
        self._run = run
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # often enough to notice a due set well within its interval, rarely enough to cost nothing
        self.period = max(1.0, min(30.0, min(self.intervals.values(), default=30.0) / 4))

    def tick(self) -> list[str]:
        """Run every set that is due (and whose lease this replica gets); the sets run."""
        ran = []
        for set_name, interval in sorted(self.intervals.items()):
            try:
                if self._run(set_name, interval):
                    ran.append(set_name)
            except Busy as exc:  # another replica (or a manual monitoring run) has it, or no slot is free
                log.debug("scheduled run of %s skipped: %s", set_name, exc)
            except Exception:  # keep the schedule going: the next tick retries
                log.exception("scheduled run of %s failed", set_name)
        return ran

    def start(self) -> None:
        if not self.intervals or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="plumbline-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # the first tick waits a period too: a replica that has just started leaves the first run to one that
        # has been up (or, on a fresh deployment, lets start-up settle)
        while not self._stop.wait(self.period):
            self.tick()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking; a run in progress is not waited for past `timeout` (its lease then expires)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
