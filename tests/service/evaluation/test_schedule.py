"""Scheduled monitoring runs: two replicas sharing one state store run a due set exactly once, and both
export the same gauges, read from the stored run."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.errors import Busy
from service.evaluation.schedule import Scheduler
from service.runtime import Components
from service.settings import Settings
from service.state import open_state
from tests.fakes import FakeEmbedder, GatedFakeEmbedder

DOCS = {
    "vpn.md": "# VPN\n\nError LC-419 means the token expired; sign in again.",
    "leave.md": "# Leave\n\nParents get 16 weeks of paid leave.",
}
CASES = [
    {"id": "c1", "question": "LC-419 token", "relevant": [{"doc_id": "vpn"}], "category": "it"},
    {"id": "c2", "question": "parental leave weeks", "relevant": [{"doc_id": "leave"}], "category": "hr"},
]


def eval_gauges(client: TestClient) -> list[str]:
    return [line for line in client.get("/metrics").text.splitlines() if line.startswith("plumbline_eval_")]


@pytest.mark.engine
def test_two_replicas_run_a_scheduled_set_once_and_export_the_same_gauges(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    url = f"sqlite:///{tmp_path / 'shared-state.db'}"
    shared = open_state(url)
    shared.put_set("mini", "".join(json.dumps(c) + "\n" for c in CASES))
    shared.close()
    gated = GatedFakeEmbedder()
    apps = [
        create_app(
            Settings(data_dir=tmp_path / f"replica-{n}", state_url=url, eval_schedule={"mini": 3600}),
            components=Components(embedder=lambda _, e=embedder: e),  # type: ignore[misc]
            preload=(docs,),
        )
        for n, embedder in ((1, gated), (2, FakeEmbedder()))
    ]
    with TestClient(apps[0]) as one, TestClient(apps[1]) as two:
        runtimes = [app.state.runtime for app in apps]
        assert all(rt.wait(timeout=60) for rt in runtimes)
        assert (
            eval_gauges(one)
            == eval_gauges(two)
            == ['plumbline_eval_schedule_interval_seconds{set="mini"} 3600.0', "plumbline_eval_gauges_stale 0.0"]
        )  # the schedule is known, no run yet (the first tick waits a period)
        gated.hold()
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(runtimes[0].scheduler.tick)  # replica 1 takes the set, and stops mid-run
            assert gated.waiting.wait(30)
            with pytest.raises(Busy, match="already in progress"):  # replica 2 finds it running
                runtimes[1]._monitor("mini", 3600)
            assert runtimes[1].scheduler.tick() == []
            gated.release()
            assert first.result(30) == ["mini"]
        runs = one.get("/eval/runs").json()
        assert [(r["set"], r["kind"]) for r in runs] == [("mini", "monitoring")]
        assert [rt.scheduler.tick() for rt in runtimes] == [[], []]  # not due again for an hour
        gauges = eval_gauges(one)
        assert 'plumbline_eval_metric{category="all",k="10",metric="hit",set="mini"} 1.0' in gauges
        assert gauges == eval_gauges(two)


@pytest.mark.engine
def test_a_scheduled_run_has_no_http_time_limit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    shared = open_state(url)
    shared.put_set("mini", "".join(json.dumps(c) + "\n" for c in CASES))
    shared.close()
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    settings = Settings(
        data_dir=tmp_path / "data", state_url=url, eval_schedule={"mini": 3600}, eval_timeout_seconds=1e-9
    )
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()), preload=(docs,))
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=60)
        assert client.post("/eval/run", json={"set": "mini"}).status_code == 504  # a caller waiting is limited
        assert app.state.runtime.scheduler.tick() == ["mini"]


def test_a_scheduler_keeps_going_after_a_failed_run_and_retries_it_with_backoff() -> None:
    calls: list[str] = []
    now = [0.0]

    def run(set_name: str, interval: float) -> bool:
        calls.append(set_name)
        if set_name == "broken":
            raise RuntimeError("the set names a missing document")
        return interval < 100

    scheduler = Scheduler({"broken": 600, "fine": 10, "later": 3600}, run, clock=lambda: now[0])
    assert scheduler.tick() == ["fine"]
    assert calls == ["broken", "fine", "later"]
    assert scheduler.period == 2.5  # a quarter of the shortest interval
    calls.clear()
    now[0] = 59.0
    scheduler.tick()
    assert "broken" not in calls  # retried after a minute, not on every tick
    # retried 1, 2, 4, 8 minutes after each failure, then every interval (10 minutes)
    moments = ((60, True), (119, False), (180, True), (419, False), (420, True), (899, False), (900, True))
    for at, retried in (*moments, (1499, False), (1500, True)):
        calls.clear()
        now[0] = at
        scheduler.tick()
        assert ("broken" in calls) is retried, at
