"""Results of their own kind and synthetic drafts in the state store: a result's row from start to finish, listings
confined to a tenant, a passage's drafts in one transaction, and a review that adds accepted cases to the set in the
same transaction as the status change."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from eval.cases import parse_jsonl
from service.state import StateStore, open_state
from service.state.work import NewDraft


@pytest.fixture
def state() -> Iterator[StateStore]:
    store = open_state("sqlite:///:memory:")
    yield store
    store.close()


def case(case_id: str, question: str) -> dict[str, Any]:
    return {
        "id": case_id,
        "question": question,
        "relevant": [{"doc_id": "hr/leave", "evidence": "25 working days"}],
        "category": "leave",
        "source": "synthetic",
        "generator": {"model": "m", "prompt_version": "synth-v1"},
    }


def draft(case_id: str, question: str, status: str = "proposed") -> NewDraft:
    return NewDraft(case_id, status, question, {"case": case(case_id, question), "reasons": []})


def test_a_result_is_started_then_finished_and_listed_for_its_tenant_only(state: StateStore) -> None:
    results = state.results
    results.start("r1", "sweep", "s", None, {"space": {"k": [5]}})
    results.start("r2", "sweep", "s", "acme", {"space": {"k": [10]}})
    results.start("r3", "answers", "s", None, {})
    assert results.get("r1").finished_at is None  # type: ignore[union-attr]
    results.finish("r1", {"winner": "k=5"}, {"rows": []})
    got = results.get("r1")
    assert got is not None
    assert (got.summary, got.record, got.params) == ({"winner": "k=5"}, {"rows": []}, {"space": {"k": [5]}})
    assert [r.result_id for r in results.listing("sweep", set_name="s", tenant=None, limit=10)] == ["r2", "r1"]
    assert [r.result_id for r in results.listing("sweep", set_name="s", tenant="acme", limit=10)] == ["r2"]
    assert results.listing("sweep", set_name="s", tenant=None, limit=10)[1].record is None  # a listing leaves it out


def test_accepting_drafts_adds_their_cases_to_the_set_once_and_rejecting_does_not(state: StateStore) -> None:
    drafts = state.drafts
    state.put_set("day0", json.dumps(case("human-1", "a human question")) + "\n")
    drafts.add("day0", "j1", None, "hr/leave#0", [draft("syn-a", "q a"), draft("syn-b", "q b", "discarded")])
    drafts.add("day0", "j1", None, "hr/leave#1", [draft("syn-c", "q c")])
    assert drafts.chunks_done("j1") == {"hr/leave#0", "hr/leave#1"}
    assert drafts.counts("day0", None) == {"proposed": 2, "discarded": 1}
    ids = {d.case_id: d.id for d in drafts.of_job("j1")}

    accepted = drafts.review([ids["syn-a"], ids["syn-b"]], "accepted", "ann", None)
    assert [d.case_id for d in accepted] == ["syn-a"]  # a discarded draft is not reviewable
    assert drafts.review([ids["syn-a"]], "rejected", "bob", "changed my mind") == []  # reviewed once
    drafts.review([ids["syn-c"]], "rejected", "bob", "vague")
    body = state.get_set("day0")
    assert body is not None
    cases = parse_jsonl(body, "day0")
    assert [c.id for c in cases] == ["human-1", "syn-a"]
    assert cases[1].generator == {"model": "m", "prompt_version": "synth-v1"}
    assert drafts.counts("day0", None) == {"accepted": 1, "rejected": 1, "discarded": 1}


def test_a_late_discard_touches_only_proposed_drafts_and_keeps_their_reasons(state: StateStore) -> None:
    drafts = state.drafts
    drafts.add("day0", "j1", "acme", "a#0", [draft("syn-a", "q a"), draft("syn-b", "q b")])
    ids = [d.id for d in drafts.of_job("j1")]
    drafts.review([ids[0]], "accepted", "ann", None)
    drafts.discard(ids, "near_duplicate")
    statuses = {d.case_id: (d.status, d.record["reasons"]) for d in drafts.of_job("j1")}
    assert statuses == {"syn-a": ("accepted", []), "syn-b": ("discarded", ["near_duplicate"])}
    assert drafts.counts("day0", "other") == {}  # another tenant's drafts are not counted
