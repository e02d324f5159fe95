"""Incidents against a real `plumbline serve`: concurrent reports over HTTP, SIGKILL right after a 201 and at
the commit, and the `plumbline incidents` CLI."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from eval.cases import parse_jsonl
from tests.server import ServerProcess, plumbline

pytestmark = pytest.mark.process

REFUNDS = "# Refunds\n\nAnnual plans are refundable within 30 days of purchase.\n"
VPN = "# VPN\n\nError LC-419 means the token expired; sign in again.\n"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "billing").mkdir(parents=True)
    (folder / "it").mkdir()
    (folder / "billing" / "refunds.md").write_text(REFUNDS)
    (folder / "it" / "vpn.md").write_text(VPN)
    return folder


def report(question: str, reporter: str = "ann") -> dict[str, Any]:
    return {"question": question, "doc_id": "billing/refunds", "evidence": "30 days", "reporter": reporter}


def test_concurrent_reports_then_sigkill_after_a_201_loses_nothing(tmp_path: Path, corpus: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, args=["--ingest", str(corpus)]) as server, server.client() as c:

        def post(body: dict[str, Any]) -> httpx.Response:
            with server.client() as own:
                return own.post("/eval/incidents", json=body)

        with ThreadPoolExecutor(16) as pool:
            distinct = list(pool.map(post, [report(f"refund question number {n}") for n in range(50)]))
            same = list(pool.map(post, [report("What is the refund window?", f"r{n}") for n in range(50)]))
        assert {r.status_code for r in distinct + same} == {201}
        assert len({r.json()["incident_id"] for r in distinct}) == 50
        (only,) = {r.json()["incident_id"] for r in same}
        assert sorted(str(r.json()["duplicate_of"]) for r in same) == [str(only)] * 49 + ["None"]
        assert max(r.json()["reports"] for r in same) == 50
        last = c.post("/eval/incidents", json=report("does the refund window include weekends", "zed"))
        assert last.status_code == 201
        server.kill()  # SIGKILL at once after the 201: no shutdown, no flush
    with ServerProcess(data) as server, server.client() as c:
        got = c.get(f"/eval/incidents/{last.json()['incident_id']}").json()
        assert (got["question"], got["reporters"]) == ("does the refund window include weekends", ["zed"])
        listed = c.get("/eval/incidents", params={"limit": 500}).json()["incidents"]
        assert len(listed) == 52
        assert sorted(i["reports"] for i in listed)[-1] == 50


@pytest.mark.parametrize("point", ["incident:committed", "incident:triage"])
def test_a_crash_after_the_commit_keeps_the_incident(tmp_path: Path, corpus: Path, point: str) -> None:
    """The report is committed before triage starts: a crash in triage (or just before it) loses nothing."""
    data = tmp_path / "data"
    env = {"PLUMBLINE_CRASH_AT": point}
    with ServerProcess(data, env=env, args=["--ingest", str(corpus)]) as server:
        with server.client() as c, pytest.raises(httpx.TransportError):
            c.post("/eval/incidents", json=report("refund window"))
        assert server.wait() == -9, server.log
    with ServerProcess(data) as server, server.client() as c:
        (incident,) = c.get("/eval/incidents").json()["incidents"]
        assert incident["question"] == "refund window"
        assert incident["triage"] is None  # it died before triage: the report itself is kept


def test_the_incidents_cli(tmp_path: Path, corpus: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, args=["--ingest", str(corpus)]) as server:
        url = ["--url", server.url]
        posted = plumbline(
            "incidents", "post", *url, "--question", "how long is the refund window", "--doc-id", "billing/refunds",
            "--evidence", "30 days", "--category", "billing", "--reporter", "ann", "--set", "handbook",
        )  # fmt: skip
        assert posted.returncode == 0, posted.stderr
        assert posted.stdout.startswith("incident #1: new")
        assert "triage: retrieved (rank 1;" in posted.stdout
        bad = plumbline("incidents", "post", *url, "--question", "q", "--doc-id", "nope", "--reporter", "ann")
        assert bad.returncode == 2
        assert "there is no document 'nope'" in bad.stderr
        listed = plumbline("incidents", "list", *url, "--status", "new")
        assert "how long is the refund window" in listed.stdout
        reviewed = plumbline("incidents", "review", "1", *url, "--accept", "--reason", "real", "--reviewer", "rev")
        assert reviewed.returncode == 0, reviewed.stderr
        assert "accepted by rev (incident-1)" in reviewed.stdout
        out = tmp_path / "incidents.jsonl"
        assert plumbline("incidents", "export", *url, "--out", str(out)).returncode == 0
        (case,) = parse_jsonl(out.read_text())
        assert (case.id, case.source, case.relevant[0].evidence) == ("incident-1", "incident", "30 days")
