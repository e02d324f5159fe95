"""A synthesis against a real `plumbline serve` killed by SIGKILL between two passages: what it drafted survives the
crash, the restarted server reports it lost, and a resume drafts only the passages it had not reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_llm import brain
from tests.server import ServerProcess
from tests.service.infra.openai_fake import FakeOpenAI
from tests.waiting import until

pytestmark = pytest.mark.process

DOCS = {
    "hr/leave.md": "# Annual leave\n\nStaff in Portugal receive 25 working days of paid leave each year.\n\n"
    "# Sick leave\n\nA doctor's note is needed from the third consecutive day of absence.\n",
    "it/vpn.md": "# Connecting\n\nThe VPN client reports error 809 when a hotel network blocks UDP port 500.\n\n"
    "# Tokens\n\nHardware tokens are replaced by the service desk within two working days of a report.\n",
    "travel/flights.md": "# Flights\n\nFlights longer than six hours may be booked in premium economy class.\n\n"
    "# Rail\n\nFirst-class rail tickets need the approval of a department head before booking.\n",
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    for name, text in DOCS.items():
        path = tmp_path / "docs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "docs"


def generations(llm: FakeOpenAI) -> int:
    """The drafting requests the fake LLM has answered (not the checks)."""
    return sum(1 for r in llm.requests if "questions" in str(r.body.get("response_format")))


def test_a_synthesis_killed_between_passages_keeps_them_and_resumes_with_the_rest(tmp_path: Path, corpus: Path) -> None:
    data = tmp_path / "data"
    with FakeOpenAI(default=brain) as llm:
        env = {"PLUMBLINE_LLM_BASE_URL": llm.base_url, "PLUMBLINE_LLM_MODEL": "fake-model"}
        crashing = {**env, "PLUMBLINE_CRASH_AT": "synthesis:drafted#2", "PLUMBLINE_LLM_MAX_CONCURRENCY": "1"}
        with ServerProcess(data, env=crashing, args=["--ingest", str(corpus)]) as server, server.client() as c:
            started = c.post("/eval/sets/day0/synthesize", json={"passages": 6, "per_passage": 2, "seed": 1})
            assert started.status_code == 202, started.text
            synthesis = started.json()["id"]
            assert server.wait() == -9, server.log  # killed itself right after the second passage's drafts

    with FakeOpenAI(default=brain) as llm:  # the restarted server's LLM: what it is asked is the resume's alone
        env = {"PLUMBLINE_LLM_BASE_URL": llm.base_url, "PLUMBLINE_LLM_MODEL": "fake-model"}
        with ServerProcess(data, env=env) as server, server.client() as c:
            view = c.get(f"/eval/syntheses/{synthesis}").json()
            assert view["status"] == "lost"  # its process died: the restart says so at once
            kept = c.get("/eval/sets/day0/proposals").json()  # its counts are of every status
            assert sum(kept["counts"].values()) == 4  # two passages, two drafts each, committed before the kill

            assert c.post(f"/eval/syntheses/{synthesis}/resume").status_code == 202
            until(lambda: c.get(f"/eval/syntheses/{synthesis}").json()["status"] not in ("queued", "running"), 60)
            done = c.get(f"/eval/syntheses/{synthesis}").json()
            assert done["status"] == "done", done
            assert done["result"]["passages"] == 6
            assert done["result"]["drafted"] == 12  # every passage drafted once: none twice
            assert generations(llm) == 4  # the resume asked only for the four passages not drafted
            listed = c.get("/eval/sets/day0/proposals", params={"limit": 100}).json()["proposals"]
            chunks = [p["chunk_id"] for p in listed]
            assert len(chunks) == len(set(chunks)) == 6  # one proposal per passage (the other draft is discarded)
