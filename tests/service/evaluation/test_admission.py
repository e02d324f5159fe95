"""Fair admission to the eval slots (`service.evaluation.admission`): the slot rules, a bounded queue per caller
group served round-robin, monitoring runs never queued, cancel while queued, and shutdown. Threads meet on the
admission's own condition (`changed`), never on sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from eval.storage import RunStore, SetStore
from service.errors import Busy, Cancelled
from service.evaluation.admission import Admission, Ticket
from service.evaluation.runs import EvalService, RunSpec
from service.state import open_state


def until(admission: Admission, condition: Callable[[], bool]) -> None:
    """Wait (on the admission's condition, no polling) until `condition` holds."""
    with admission.changed:
        assert admission.changed.wait_for(condition, timeout=30)


def waiter(
    admission: Admission, ticket: Ticket, outcome: list[Any], *, timeout: float | None = None
) -> threading.Thread:
    """A thread waiting for `ticket`'s turn: it records the group it served, or the error it got."""

    def wait() -> None:
        try:
            outcome.append(ticket.group if admission.wait(ticket, timeout) else "timed out")
        except Cancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


# -- through EvalService: a run waited on queues for its turn -------------------------------------------------------


def service(tmp_path: Path, **kw: Any) -> EvalService:
    state = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    return EvalService(SetStore(state), RunStore(state), jobs=state.jobs, leases=state.leases, **kw)


def run(kind: str = "manual", tenant: str | None = None) -> RunSpec:
    """A run as the slots see it: its kind and its tenant (admission reads nothing else)."""
    return cast(RunSpec, SimpleNamespace(kind=kind, tenant=tenant))


def test_a_group_that_keeps_asking_cannot_starve_another(tmp_path: Path) -> None:
    """Two slots, so one for runs that are not monitoring runs. Tenant larkspur holds it and asks again as soon as
    tenant fjord waits: when larkspur's run ends, fjord's turn comes first, then larkspur's (least recently served
    first), not first come first served and not a 429 to fjord."""
    evals = service(tmp_path)
    admission = evals._admission
    served: list[str | None] = []
    errors: list[BaseException] = []

    def take(spec: RunSpec) -> threading.Thread:
        def body() -> None:
            try:
                with evals._slot(spec):
                    served.append(spec.tenant)
            except Busy as exc:  # what a second group got before the queue: refused at once
                errors.append(exc)

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    with evals._slot(run(tenant="larkspur")):
        fjord = take(run(tenant="fjord"))
        until(admission, lambda: admission.queued("fjord") == 1 or bool(errors))
        larkspur = take(run(tenant="larkspur"))
        until(admission, lambda: admission.queued("larkspur") == 1 or bool(errors))
    for thread in (fjord, larkspur):
        thread.join(30)
    assert errors == []
    assert served == ["fjord", "larkspur"]
    assert admission.in_use() == 0


def test_a_run_waited_on_gives_up_after_its_wait_with_a_busy_naming_the_setting(tmp_path: Path) -> None:
    evals = service(tmp_path, queue_wait=0)
    with evals._slot(run(tenant="larkspur")), pytest.raises(Busy) as refused:
        evals._slot(run(tenant="fjord")).__enter__()
    message = str(refused.value)
    assert "no evaluation slot came free for it in 0 s (PLUMBLINE_EVAL_QUEUE_WAIT_SECONDS)" in message
    assert "the last of the 2 slots is kept for monitoring runs" in message
    assert (evals._admission.queued("fjord"), evals._admission.in_use()) == (0, 0)


# -- the policy itself ----------------------------------------------------------------------------------------------


def test_the_slot_rules_hold_when_nothing_may_queue() -> None:
    """With two slots: an ordinary run and a monitoring run go at once; a second ordinary run does not (its own
    group's cap, or another group's: the slot kept for monitoring). With three, two groups share two slots. With
    no queue (`queue_per_group=0`) a run that finds no slot is refused at once, naming the rule."""
    admission = Admission(2, queue_per_group=0)
    acme = admission.ask("acme")
    with pytest.raises(Busy, match=r"tenant 'acme' already hold\(s\) 1 of the 2 evaluation slots"):
        admission.ask("acme")
    with pytest.raises(Busy, match="the last of the 2 slots is kept for monitoring runs"):
        admission.ask(None)
    monitoring = admission.ask(None, monitoring=True)
    with pytest.raises(Busy, match="all 2 evaluation slot"):
        admission.ask(None, monitoring=True)
    for ticket in (acme, monitoring):
        admission.leave(ticket)
    both = [admission.ask(None, monitoring=True) for _ in range(2)]  # monitoring runs take any free slot
    with pytest.raises(Busy, match="all 2"):
        admission.ask("beta")
    for ticket in both:
        admission.leave(ticket)

    admission = Admission(3, queue_per_group=0)
    two = [admission.ask("acme"), admission.ask("beta")]
    with pytest.raises(Busy, match="kept for monitoring runs"):
        admission.ask(None)
    admission.leave(admission.ask(None, monitoring=True))
    for ticket in two:
        admission.leave(ticket)
    two = [admission.ask(None), admission.ask(None)]
    with pytest.raises(Busy, match="the keys bound to no tenant already hold"):
        admission.ask(None)
    for ticket in two:
        admission.leave(ticket)

    admission = Admission(1, queue_per_group=0)  # a single slot: first come, first served
    one = admission.ask("acme")
    with pytest.raises(Busy, match="all 1 evaluation slot"):
        admission.ask(None, monitoring=True)
    admission.leave(one)
    assert admission.in_use() == 0  # every slot given back


def test_groups_take_turns_the_least_recently_served_first() -> None:
    """acme holds the ordinary slot and queues two more runs before beta and gamma queue one each: the slot goes
    to beta, gamma, then acme's two, not in the order they asked."""
    admission = Admission(2, queue_per_group=4)
    first = admission.ask("acme")
    queued = [admission.ask("acme"), admission.ask("acme"), admission.ask("beta"), admission.ask("gamma")]
    assert [t.granted for t in queued] == [False] * 4
    assert (admission.queued("acme"), admission.queued("beta"), admission.queued(None)) == (2, 1, 0)
    order = []
    admission.leave(first)
    for _ in queued:
        (ticket,) = [t for t in queued if t.granted]  # one at a time: a single slot is not kept for monitoring
        order.append(ticket)
        admission.leave(ticket)
    assert [t.group for t in order] == ["beta", "gamma", "acme", "acme"]
    assert order[2] is queued[0]  # first in, first out within a group
    assert admission.in_use() == 0


def test_a_waiter_wakes_when_its_turn_comes() -> None:
    admission = Admission(2, queue_per_group=4)
    first = admission.ask("acme")
    ticket = admission.ask("beta")
    outcome: list[Any] = []
    thread = waiter(admission, ticket, outcome)
    admission.leave(first)
    thread.join(30)
    assert outcome == ["beta"]
    admission.leave(ticket)


def test_a_monitoring_run_never_queues_and_always_finds_the_kept_slot() -> None:
    """Every queue full, the ordinary slot held: a monitoring run still starts at once. A freed monitoring slot
    is not handed to a queued ordinary run (the last slot stays kept), a freed ordinary one is."""
    admission = Admission(2, queue_per_group=1)
    held = admission.ask("acme")
    queued = [admission.ask("acme"), admission.ask("beta")]
    monitoring = admission.ask(None, monitoring=True)
    assert monitoring.granted
    with pytest.raises(Busy, match="all 2 evaluation slot"):  # a second one at once: no slot left, and no queue
        admission.ask(None, monitoring=True)
    admission.leave(monitoring)
    assert [t.granted for t in queued] == [False, False]
    admission.leave(held)
    assert [t.granted for t in queued] == [False, True]
    assert admission.ask(None, monitoring=True).granted


def test_each_group_queues_at_most_its_cap_and_runs_waited_on_at_most_theirs() -> None:
    admission = Admission(2, queue_per_group=2, waited_on_queued=3)
    admission.ask("acme")
    admission.ask("acme", label="r1")
    admission.ask("acme", waited_on=True)
    with pytest.raises(Busy) as refused:
        admission.ask("acme")
    assert "tenant 'acme' may queue at most 2 run(s) for a slot (PLUMBLINE_EVAL_QUEUE_PER_GROUP)" in str(refused.value)
    assert "tenant 'acme' already hold(s) 1 of the 2 evaluation slots" in str(refused.value)  # why it found none
    beta = admission.ask("beta", waited_on=True)  # another group still queues
    admission.ask("gamma", waited_on=True)
    with pytest.raises(Busy, match=r'3 runs waited on are queued already, the most this process queues.*"async"'):
        admission.ask("delta", waited_on=True)
    assert not admission.ask("delta").granted  # a background run still queues
    assert admission.cancel("r1")
    admission.ask("acme")  # its place was given back
    admission.leave(beta)
    assert admission.queued("beta") == 0


def test_a_queued_run_can_be_cancelled_and_its_waiter_stops() -> None:
    admission = Admission(2, queue_per_group=4)
    held = admission.ask("acme")
    ticket = admission.ask("acme", label="r1")
    outcome: list[Any] = []
    thread = waiter(admission, ticket, outcome)
    assert admission.cancel("r1")
    thread.join(30)
    (error,) = outcome
    assert isinstance(error, Cancelled)
    assert "run r1 was cancelled while it waited for an evaluation slot" in str(error)
    assert not admission.cancel("r1")  # not queued any more
    assert admission.queued("acme") == 0
    admission.leave(ticket)  # a no-op for a withdrawn ticket: the slot stays with the run that holds it
    assert admission.in_use() == 1
    admission.leave(held)
    assert admission.in_use() == 0


def test_closing_stops_every_waiter_and_a_wait_times_out_without_losing_its_place() -> None:
    admission = Admission(2, queue_per_group=4)
    admission.ask("acme")
    ticket = admission.ask("beta", label="r2")
    assert admission.wait(ticket, 0) is False  # still queued: a background run's waiter heartbeats and waits again
    assert admission.queued("beta") == 1
    outcome: list[Any] = []
    thread = waiter(admission, ticket, outcome)
    admission.close()
    thread.join(30)
    (error,) = outcome
    assert isinstance(error, Cancelled)
    assert "run r2 did not start: the service is shutting down" in str(error)
