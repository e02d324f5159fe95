"""Scheduled monitoring runs: each set in `PLUMBLINE_EVAL_SCHEDULE` is replayed against the served
configuration once its latest monitoring run is older than its interval, so the gauges never go stale.

Every replica runs a `Scheduler`; the set's lease in the state store (`EvalService.evaluate`, which checks
again under the lease that the run is still due) makes exactly one of them run it. The scheduler's own thread
runs one set at a time, so ticks never pile up behind a long run, and `/search` is served by other threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from service.errors import Busy

log = logging.getLogger("plumbline")
RETRY_SECONDS = 60.0  # the first retry of a failed scheduled run; doubled after each further failure


class Scheduler:
    """Calls `run(set_name, interval)` for each scheduled set on every tick; `run` returns True if it ran.

    Example:
        >>> s = Scheduler({"handbook": 3600}, lambda name, interval: False)
        >>> s.tick()
        []
    """

    def __init__(
        self,
        intervals: Mapping[str, float],
        run: Callable[[str, float], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.intervals = dict(intervals)
        self._run = run
        self._clock = clock
        self._failures: dict[str, int] = {}  # consecutive failed runs of a set
        self._retry_at: dict[str, float] = {}  # a failed set is retried with backoff, not on every tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # often enough to notice a due set well within its interval, rarely enough to cost nothing
        self.period = max(1.0, min(30.0, min(self.intervals.values(), default=30.0) / 4))

    def tick(self) -> list[str]:
        """Run every set that is due (and whose lease this replica gets); the sets run."""
        ran = []
        for set_name, interval in sorted(self.intervals.items()):
            if self._clock() < self._retry_at.get(set_name, float("-inf")):
                continue
            try:
                if self._run(set_name, interval):
                    ran.append(set_name)
            except Busy as exc:  # another replica (or a manual monitoring run) has it, or no slot is free
                log.debug("scheduled run of %s skipped: %s", set_name, exc)
            except Exception:  # keep the schedule going; retry after 1, 2, 4... minutes, at most the interval
                failures = self._failures[set_name] = self._failures.get(set_name, 0) + 1
                delay = min(interval, RETRY_SECONDS * 2 ** (failures - 1))
                self._retry_at[set_name] = self._clock() + delay
                log.exception("scheduled run of %s failed (%d in a row); retrying in %.0f s", set_name, failures, delay)
            else:
                self._failures.pop(set_name, None)
                self._retry_at.pop(set_name, None)
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
