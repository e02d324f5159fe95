"""Fair admission to the eval slots of one process: who may start a run now, who waits, and whose turn is next.

`slots` runs at once (PLUMBLINE_MAX_CONCURRENT_EVALS). A monitoring run takes any free slot and never queues: it
is refused at once (`Busy`) when none is free. With more than one slot, the runs that are not monitoring runs (the
ordinary ones) hold at most `slots - 1` together, so the last free slot is kept for monitoring runs, and those of
one caller group (a tenant's keys; the keys bound to no tenant) at most `slots - 1` too. With a single slot,
nothing is kept: monitoring and ordinary runs share it.

An ordinary run that finds no slot for it joins its caller group's queue (first in, first out within the group;
at most `queue_per_group` runs per group, else `Busy` naming the limit; runs a caller waits on, which each hold an
HTTP worker thread while they wait, at most `waited_on_queued` in all). Whenever an ordinary slot frees, it goes
to the head of the group served least recently (a group never served first; between those, the run queued
first), so under contention every waiting group gets its turn before any group gets a second one. A run waited on
waits at most `wait` seconds (then `Busy`); a background run waits until its turn, it is cancelled (`cancel`), or
the process shuts down (`close`), which ends every waiter with `Cancelled`.

Per process and in memory: replicas do not share slots or queues. Thread-safe: every state change happens under
one condition (`changed`), which waiters wait on (no polling) and which is notified after each change.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass

from service.errors import Busy, Cancelled

# runs waited on that may be queued in all, over every group: each holds one of the 40 HTTP worker threads while it
# waits, and searches need the rest
WAITED_ON_QUEUED = 10

RETRY = "retry when a run in progress ends (GET /eval/runs/{id} shows a background run's progress)"


@dataclass(eq=False)
class Ticket:
    """One run's claim on a slot: `queued`, then `granted` (it holds a slot), `withdrawn` (cancelled while
    queued), or `left` (its slot given back, or its place in the queue)."""

    group: str | None  # its caller group: a tenant, None for the keys bound to no tenant (and monitoring runs)
    monitoring: bool
    waited_on: bool  # a caller waits on it, holding an HTTP worker thread
    label: str | None  # its run id, by which a queued background run is cancelled
    order: int  # when it asked, across every group
    state: str = "queued"

    @property
    def granted(self) -> bool:
        return self.state == "granted"


class Admission:
    """The slots and the queues of one process; see the module's docstring for the rules."""

    def __init__(
        self, slots: int, queue_per_group: int, *, wait: float = 30.0, waited_on_queued: int = WAITED_ON_QUEUED
    ) -> None:
        self.slots = slots
        self.queue_per_group = queue_per_group
        self.wait_seconds = wait
        self.waited_on_queued = waited_on_queued
        self.changed = threading.Condition()
        self._held: dict[str | None, int] = {}  # slots held by ordinary runs, by caller group
        self._held_monitoring = 0
        self._queues: dict[str | None, deque[Ticket]] = {}  # by caller group, never empty
        self._served: dict[str | None, int] = {}  # the turn each group was last given a slot in
        self._asked = itertools.count()
        self._turns = itertools.count()
        self._closed = False

    def ask(
        self, group: str | None, *, monitoring: bool = False, waited_on: bool = False, label: str | None = None
    ) -> Ticket:
        """A slot now (the ticket is `granted`), or a place in `group`'s queue; `Busy`, naming the rule, when it may
        have neither. A monitoring run is granted a free slot or refused, never queued."""
        with self.changed:
            ticket = Ticket(group, monitoring, waited_on, label, next(self._asked))
            if monitoring:
                if self._in_use() >= self.slots:
                    raise Busy(
                        f"all {self.slots} evaluation slot(s) are in use by runs in progress, the limit; {RETRY}"
                    )
                self._held_monitoring += 1
                ticket.state = "granted"
                return ticket
            queue = self._queues.setdefault(group, deque())
            ahead = len(queue)
            queue.append(ticket)
            self._serve()
            if ticket.granted:
                return ticket
            if ahead >= self.queue_per_group:
                self._unqueue(ticket, "left")
                raise Busy(
                    f"no evaluation slot is free for it ({self._no_slot(group)}), and {_name(group)} may queue at "
                    f"most {self.queue_per_group} run(s) for a slot (PLUMBLINE_EVAL_QUEUE_PER_GROUP) and has {ahead} "
                    f"queued; {RETRY}"
                )
            if waited_on and sum(t.waited_on for q in self._queues.values() for t in q) > self.waited_on_queued:
                self._unqueue(ticket, "left")
                raise Busy(
                    f"no evaluation slot is free for it ({self._no_slot(group)}), and {self.waited_on_queued} runs "
                    'waited on are queued already, the most this process queues: ask with "async": true (a '
                    f"background run waits its turn without holding a worker thread), or {RETRY}"
                )
            self.changed.notify_all()  # a new place in a queue
            return ticket

    def take(self, group: str | None, *, monitoring: bool = False) -> Ticket:
        """A slot for a run a caller waits on: at once, or in its turn within `wait` seconds; else `Busy`."""
        ticket = self.ask(group, monitoring=monitoring, waited_on=True)
        try:
            if self.wait(ticket, self.wait_seconds):
                return ticket
            with self.changed:
                reason = self._no_slot(group)
            raise Busy(
                f"no evaluation slot came free for it in {self.wait_seconds:g} s (PLUMBLINE_EVAL_QUEUE_WAIT_SECONDS), "
                f'the most a run waited on waits for its turn: {reason}; {RETRY}, or ask with "async": true'
            )
        except BaseException:
            self.leave(ticket)
            raise

    def wait(self, ticket: Ticket, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None: for ever) for the ticket's turn: True once it holds a slot, False if
        it is still queued (its place kept). `Cancelled` if it was cancelled while queued, or the process is
        shutting down."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while ticket.state == "queued" and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.changed.wait(left)
            if ticket.granted:
                return True
            if ticket.state == "queued":  # closed
                self._unqueue(ticket, "left")
                raise Cancelled(
                    f"{_run(ticket.label)} did not start: the service is shutting down (it waited for an evaluation "
                    "slot)"
                )
            raise Cancelled(withdrawn(ticket.label))

    def leave(self, ticket: Ticket) -> None:
        """Give back the ticket's slot, handing it to the next in turn, or its place in the queue. Idempotent."""
        with self.changed:
            if ticket.state == "queued":
                self._unqueue(ticket, "left")
            elif ticket.granted:
                ticket.state = "left"
                if ticket.monitoring:
                    self._held_monitoring -= 1
                elif (held := self._held[ticket.group] - 1) > 0:
                    self._held[ticket.group] = held
                else:
                    del self._held[ticket.group]
                self._serve()
            self.changed.notify_all()

    def cancel(self, label: str) -> bool:
        """Withdraw the queued run `label` (its waiter raises `Cancelled`); False if no run of that label is queued
        here."""
        with self.changed:
            for queue in list(self._queues.values()):
                for ticket in queue:
                    if ticket.label == label:
                        self._unqueue(ticket, "withdrawn")
                        self.changed.notify_all()
                        return True
            return False

    def close(self) -> None:
        """The process is shutting down: every waiter, now or later, raises `Cancelled`."""
        with self.changed:
            self._closed = True
            self.changed.notify_all()

    def queued(self, group: str | None) -> int:
        with self.changed:
            return len(self._queues.get(group, ()))

    def in_use(self) -> int:
        with self.changed:
            return self._in_use()

    def _in_use(self) -> int:
        return sum(self._held.values()) + self._held_monitoring

    def _unqueue(self, ticket: Ticket, state: str) -> None:
        queue = self._queues[ticket.group]
        queue.remove(ticket)
        if not queue:
            del self._queues[ticket.group]
        ticket.state = state

    def _free_for(self, group: str | None) -> bool:
        """Whether an ordinary run of `group` may take a slot now (the rules, not the queue)."""
        ordinary = sum(self._held.values())
        if ordinary + self._held_monitoring >= self.slots:
            return False
        return self.slots == 1 or (self._held.get(group, 0) < self.slots - 1 and ordinary < self.slots - 1)

    def _serve(self) -> None:
        """Hand free slots to the queues' heads, the group served least recently first."""
        while ready := [g for g in self._queues if self._free_for(g)]:
            group = min(ready, key=lambda g: (self._served.get(g, -1), self._queues[g][0].order))
            ticket = self._queues[group][0]
            self._unqueue(ticket, "granted")
            self._held[group] = self._held.get(group, 0) + 1
            self._served[group] = next(self._turns)
            self.changed.notify_all()

    def _no_slot(self, group: str | None) -> str:
        """Which rule keeps an ordinary run of `group` from a slot now (one does while it is queued)."""
        ordinary = sum(self._held.values())
        if ordinary + self._held_monitoring >= self.slots:
            return f"all {self.slots} evaluation slot(s) are in use by runs in progress"
        if self._held.get(group, 0) >= self.slots - 1:
            return (
                f"{_name(group)} already hold(s) {self.slots - 1} of the {self.slots} evaluation slots, the most one "
                "caller group may (PLUMBLINE_MAX_CONCURRENT_EVALS - 1)"
            )
        return (
            f"{ordinary} evaluation run(s) are in progress and the last of the {self.slots} slots is kept for "
            "monitoring runs"
        )


def withdrawn(label: str | None) -> str:
    """Why a run cancelled while queued ended."""
    return f"{_run(label)} was cancelled while it waited for an evaluation slot; nothing ran"


def _run(label: str | None) -> str:
    return f"run {label}" if label else "the run"


def _name(group: str | None) -> str:
    return f"tenant {group!r}" if group is not None else "the keys bound to no tenant"
