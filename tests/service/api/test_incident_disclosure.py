"""An incident report reveals nothing its key could not read with its own roles (issue "Trust, round two", item 4).

The trial that found the hole: a key holding only `incidents:report` confirmed another tenant's document ids, told
"the words are not in it" from "they are in a heading", and read triage's top hits (ids, titles, headings of any
document) for any question it made up. Now a key without `search` on the report's tenant gets one answer for a
document that does not exist, one it may not see and words that are not in a passage, and triage's verdict without
the hits, ranks or the source's status; a key with `search` there (it could read all that anyway) keeps the precise
messages and the whole triage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.api.access_helpers import auth, docs, make_key, seeded_client

DOCUMENTS = docs(
    ("acme/refunds", "acme", "# Refund policy\n\nAnnual plans are refunded within 30 days of purchase."),
    ("acme/orbital", "acme", "# Orbital lattice\n\nOrbital lattice refunds orbital lattice quasar."),
    ("globex/secret", "globex", "# Merger\n\nThe merger with Initech closes in May."),
)
QUESTION = "orbital lattice refunds quasar"
OTHERS = ("acme/orbital", "Orbital lattice")  # what the hits that came first would name


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with seeded_client(settings, DOCUMENTS) as c:
        yield c


def report(client: TestClient, headers: dict[str, str], **body: Any) -> Any:
    return client.post("/eval/incidents", headers=headers, json={"question": QUESTION, "reporter": "ann", **body})


# the four ways a report's source can be refused, each of which told the reporter something about the index
REFUSALS = {
    "missing": {"doc_id": "acme/nope", "evidence": "refunded within 30 days"},
    "another tenant's": {"doc_id": "globex/secret", "evidence": "refunded within 30 days"},
    "words not in it": {"doc_id": "acme/refunds", "evidence": "refunded within 60 days"},
    "words only in a heading": {"doc_id": "acme/refunds", "evidence": "refund policy"},
}
PRECISE = {
    "missing": "there is no document 'acme/nope'",
    "another tenant's": "there is no document 'globex/secret' in tenant 'acme'",
    "words not in it": "the words were not found in document 'acme/refunds'",
    "words only in a heading": "in no single passage of its body",
}


@pytest.mark.parametrize("bound", [True, False], ids=["bound to acme", "unbound, reporting for acme"])
def test_a_reporter_without_search_gets_one_answer_for_every_source_it_cannot_report_on(
    client: TestClient, bound: bool
) -> None:
    key = auth(make_key(client, "incidents:report", tenant="acme" if bound else None))
    tenant = {} if bound else {"tenant": "acme"}
    answers = {name: report(client, key, **body, **tenant) for name, body in REFUSALS.items()}
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(REFUSALS, 422)
    details = {r.json()["detail"] for r in answers.values()}
    assert len(details) == 1, details  # not found, not visible, not in a passage: one answer
    (detail,) = details
    assert "doc_id" in detail
    assert "evidence" in detail  # it still says what to check
    for word in ("globex", "Merger", "there is no document", "not found", "single passage"):
        assert word not in detail
    chunks = [report(client, key, chunk_id=c, **tenant) for c in ("acme/refunds#9", "globex/secret#0", "acme/nope#0")]
    assert {r.status_code for r in chunks} == {422}
    assert len({r.json()["detail"] for r in chunks}) == 1
    assert client.get("/eval/incidents", headers=auth(make_key(client, "admin"))).json()["incidents"] == []


@pytest.mark.parametrize("bound", [True, False], ids=["bound to acme", "unbound"])
def test_a_reporter_with_search_keeps_the_precise_messages(client: TestClient, bound: bool) -> None:
    key = auth(make_key(client, "incidents:report", "search", tenant="acme" if bound else None))
    for name, body in REFUSALS.items():
        r = report(client, key, **body, tenant="acme")
        assert r.status_code == 422, r.text
        assert PRECISE[name] in r.json()["detail"], (name, r.text)


def _shows_other_documents(body: Any) -> bool:
    text = str(body)
    return any(word in text for word in OTHERS)


def test_a_reporter_without_search_gets_the_verdict_without_the_hits(client: TestClient) -> None:
    reporter = auth(make_key(client, "incidents:report", tenant="acme"))
    posted = report(client, reporter, doc_id="acme/refunds", evidence="refunded within 30 days")
    assert posted.status_code == 201, posted.text
    t = posted.json()["triage"]
    assert t["verdict"] in {"retrieved", "ranked_low", "not_retrieved", "filtered_out", "stale_source"}
    assert (t["top"], t["rank"], t["stages"], t["filtered_by"], t["source"]) == ([], None, {}, [], {})
    assert "search role" in t["explanation"]  # says that the rest is left out, and why
    assert not _shows_other_documents(posted.json())
    incident = posted.json()["incident_id"]
    reviewer = auth(make_key(client, "incidents:review", tenant="acme"))
    for headers in (reporter, reviewer):  # reading it back shows no more
        listed = client.get("/eval/incidents", headers=headers)
        got = client.get(f"/eval/incidents/{incident}", headers=headers)
        assert listed.status_code == got.status_code == 200
        assert listed.json()["incidents"][0]["triage"] == t
        assert got.json()["triage"] == t
        assert not _shows_other_documents(listed.json())
        assert not _shows_other_documents(got.json())
    edited = client.patch(f"/eval/incidents/{incident}", headers=reviewer, json={"reviewer": "rev", "category": "x"})
    assert edited.status_code == 200, edited.text
    assert edited.json()["triage"] == t


def test_a_key_that_may_search_the_tenant_sees_the_whole_triage(client: TestClient) -> None:
    searcher = auth(make_key(client, "incidents:report", "search", tenant="acme"))
    posted = report(client, searcher, doc_id="acme/refunds", evidence="refunded within 30 days")
    assert posted.status_code == 201, posted.text
    t = posted.json()["triage"]
    assert t["top"][0]["doc_id"] == "acme/orbital"
    assert t["source"]["doc_id"] == "acme/refunds"
    incident = posted.json()["incident_id"]
    for roles in (("incidents:review", "search"), ("admin",)):
        tenant = "acme" if "admin" not in roles else None
        headers = auth(make_key(client, *roles, tenant=tenant))
        assert client.get(f"/eval/incidents/{incident}", headers=headers).json()["triage"] == t
        assert client.get("/eval/incidents", headers=headers).json()["incidents"][0]["triage"] == t
    # the same stored triage, read by a key that may not search, is the verdict alone
    reader = auth(make_key(client, "incidents:report"))
    withheld = client.get(f"/eval/incidents/{incident}", headers=reader).json()["triage"]
    assert (withheld["verdict"], withheld["top"]) == (t["verdict"], [])


def test_a_reviewer_without_search_editing_labels_gets_the_one_answer_too(client: TestClient) -> None:
    reporter = auth(make_key(client, "incidents:report", "search", tenant="acme"))
    incident = report(client, reporter, doc_id="acme/refunds").json()["incident_id"]
    reviewer = auth(make_key(client, "incidents:review", tenant="acme"))
    answers = [
        client.patch(f"/eval/incidents/{incident}", headers=reviewer, json={"reviewer": "rev", "labels": [body]})
        for body in REFUSALS.values()
    ]
    assert {r.status_code for r in answers} == {422}
    assert len({r.json()["detail"] for r in answers}) == 1, [r.json()["detail"] for r in answers]
    precise = auth(make_key(client, "incidents:review", "search", tenant="acme"))
    missing = {"reviewer": "rev", "labels": [REFUSALS["another tenant's"]]}
    assert (
        PRECISE["another tenant's"] in client.patch(f"/eval/incidents/{incident}", headers=precise, json=missing).text
    )
