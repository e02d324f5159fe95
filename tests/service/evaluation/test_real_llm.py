"""A synthesis and an answer grading through the real app against a REAL OpenAI-compatible server: llama-cpp-python's
server with SmolLM2-135M-Instruct (tests/llm_server.py), in the venv `scripts/llm-venv.sh` builds
(`PLUMBLINE_LLM_VENV`; without it the test skips, and under `PLUMBLINE_REQUIRE_LLM=1`, as in CI, it fails).

A 135M model writes poor questions, so the test asserts only what must hold whatever it writes: the work finishes,
every draft ends proposed or discarded for a known reason, tokens are counted, every proposed case's evidence label
is satisfied by the chunk it was drafted from (`eval.matching.judge`), and every answer is graded or marked ungraded.
What the model wrote is printed (`pytest -s`). The server takes the JSON schema only as
`{"type": "json_object", "schema": ...}` (it answers `json_schema` with a 500), so the client's fallback is exercised
too."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eval import synthetic as syn
from eval.cases import case_from_json
from eval.matching import Retrieved, judge
from service.api.app import create_app
from service.retrieval.embedding import Embedder
from service.runtime import Components
from service.settings import Settings
from tests.llm_server import MODEL_NAME, llm_python, llm_server

pytestmark = pytest.mark.process  # it starts the LLM server

# Three one-chunk documents. SmolLM2-135M answers these (greedy, so every run alike) with a copied sentence, an
# echo of the prompt's "..." placeholder, and, for the laptops, questions that pass the rules and go to the check.
DOCS = [
    {
        "id": "hr/leave",
        "title": "Leave policy",
        "text": "# Annual leave\n\nStaff in Portugal receive 25 working days of paid leave each calendar year. "
        "Unused days lapse at the end of March.",
        "tags": ["hr"],
    },
    {
        "id": "it/vpn",
        "title": "VPN",
        "text": "# Connecting\n\nThe VPN client reports error 809 when UDP port 500 is blocked by a hotel network. "
        "Switch to the TCP profile to get around it.",
        "tags": ["it"],
    },
    {
        "id": "it/laptops",
        "title": "Laptops",
        "text": "# Replacement\n\nLaptops are replaced every four years. A broken screen is repaired within three "
        "working days by the IT desk in Lisbon.",
        "tags": ["it"],
    },
]
ITEMS = [
    {
        "id": "a1",
        "question": "How many days of paid leave do staff in Portugal get?",
        "answer": "They get 25 working days each calendar year.",
        "contexts": ["Staff in Portugal receive 25 working days of paid leave each calendar year."],
    },
    {
        "id": "a2",
        "question": "What should I do about VPN error 809 in a hotel?",
        "answer": "Restart the laptop twice.",
        "contexts": ["The VPN client reports error 809 when UDP port 500 is blocked. Switch to the TCP profile."],
    },
]
# why quality control may discard a draft: the rules, the LLM's check, an unreadable reply, a near-duplicate
KNOWN_REASONS = {*syn.REASONS, "not_answered", "check_unreadable", "malformed", "refused", "near_duplicate"}


@pytest.fixture
def server_python() -> Path:
    """The LLM venv's Python: skips (or fails, under PLUMBLINE_REQUIRE_LLM) before the embedding model loads."""
    return llm_python()


@pytest.fixture
def client(server_python: Path, tmp_path: Path, minilm: Embedder) -> Iterator[TestClient]:
    with llm_server(server_python, tmp_path / "llm.log") as base_url:
        settings = Settings(
            data_dir=tmp_path / "data",
            index_copies=1,
            llm_base_url=base_url,
            llm_model=MODEL_NAME,
            llm_max_concurrency=2,  # the server answers one at a time: two exercise the queueing, no more
            llm_timeout_seconds=120,  # a generation that runs to its token limit on busy cores: no needless retry
            llm_max_retries=1,
        )
        app = create_app(settings, components=Components(embedder=lambda _: minilm))
        with TestClient(app) as c:
            assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
            assert c.post("/documents", json={"documents": DOCS}).status_code == 200
            yield c


def follow(client: TestClient, location: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = client.get(location).json()
        if view["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return view
        client.app.state.runtime.evals.wait(0.2)  # type: ignore[attr-defined]


def test_a_real_model_drafts_checked_questions_and_grades_answers(client: TestClient) -> None:
    # -- a synthesis: three chunks, two questions each, with the LLM's check -----------------------------------
    started_at = time.monotonic()
    started = client.post("/eval/sets/day0/synthesize", json={"passages": 3, "per_passage": 2, "seed": 1})
    assert started.status_code == 202, started.text
    view = follow(client, started.headers["Location"])
    synthesis_s = time.monotonic() - started_at
    assert view["status"] == "done", view
    summary = view["result"]
    assert summary["passages"] == 3
    assert summary["usage"]["prompt_tokens"] > 0
    assert summary["usage"]["completion_tokens"] > 0
    assert summary["generator"] == {"model": MODEL_NAME, "prompt_version": syn.PROMPT_VERSION}

    listed = {
        status: client.get("/eval/sets/day0/proposals", params={"status": status, "limit": 1000}).json()
        for status in ("proposed", "discarded")
    }
    counts = listed["proposed"]["counts"]
    assert set(counts) <= {"proposed", "discarded"}, counts  # nothing is accepted or rejected without a review
    proposed, discarded = listed["proposed"]["proposals"], listed["discarded"]["proposals"]
    assert len(proposed) == counts.get("proposed", 0)
    assert len(discarded) == counts.get("discarded", 0)
    assert proposed or discarded
    for draft in proposed:
        assert draft["reasons"] == [], draft
    for draft in discarded:
        assert draft["reasons"], draft
        assert set(draft["reasons"]) <= KNOWN_REASONS, draft

    chunks = {c["chunk_id"]: c["text"] for doc in DOCS for c in client.get(f"/documents/{doc['id']}").json()["chunks"]}
    for draft in proposed:
        case = case_from_json(draft["case"])
        [label] = case.relevant
        chunk_text = chunks[draft["chunk_id"]]
        found = judge(case.relevant, [Retrieved(draft["chunk_id"], label.doc_id or "", chunk_text)], "chunk")
        assert found.first_ranks == (1,), (label, chunk_text)  # the evidence is in the chunk it was drafted from
        assert case.source == "synthetic"

    # -- an answer grading: two items, two samples each --------------------------------------------------------
    started_at = time.monotonic()
    started = client.post("/eval/answers", json={"set": "day0", "items": ITEMS, "samples": 2})
    assert started.status_code == 202, started.text
    graded = follow(client, started.headers["Location"])
    grading_s = time.monotonic() - started_at
    assert graded["status"] == "done", graded
    report = graded["result"]
    assert report["graded"] + report["ungraded"] == len(ITEMS)
    assert sorted(item["id"] for item in report["items"]) == ["a1", "a2"]
    for item in report["items"]:
        assert item["used"] + item["unreadable"] == 2
        if item["ungraded"]:
            assert item["criteria"] == {}
            assert item["used"] == 0
        else:
            assert set(item["criteria"]) == {"faithfulness", "correctness", "completeness"}
            assert all(0 <= g["median"] <= 1 for g in item["criteria"].values())
    assert report["usage"]["completion_tokens"] > 0

    # -- what the model wrote (pytest -s) ----------------------------------------------------------------------
    reasons = Counter(r for d in discarded for r in d["reasons"])
    print(f"\nsynthesis: {synthesis_s:.1f} s, {summary['usage']}; {len(proposed)} proposed, {dict(reasons)} discarded")
    for draft in proposed + discarded:
        evidence = (draft["case"] or {}).get("relevant", [{}])[0].get("evidence", "")
        check = f" check={draft['check']!r}" if draft.get("check") else ""
        print(f"  {draft['status']:9} {draft['reasons']} {draft['question']!r} evidence={evidence!r}{check}")
    print(f"grading: {grading_s:.1f} s, {report['usage']}; overall {report['overall']}, ungraded {report['ungraded']}")
    for item in report["items"]:
        medians = {c: g["median"] for c, g in item["criteria"].items()}
        print(f"  {item['id']} used={item['used']} unreadable={item['unreadable']} {medians}")
