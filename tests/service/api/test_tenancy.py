"""Tenant isolation, enforced by the server: a key bound to a tenant reads, writes, searches, evaluates and reports
within it whatever the request says, and another tenant's documents are never returned, counted, explained or named.

The trials that found the holes: ingesting `billing/refunds` as tenant `evil` replaced larkspur's document; an `evil`
document superseding `security/password-policy` hid it from larkspur's fresh searches; a search without a tenant saw
every tenant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.api.access_helpers import auth, docs, make_key, seeded_client

TENANT_ROLES = ("search", "ingest", "eval:run", "incidents:report", "incidents:review")
LARKSPUR = docs(
    ("billing/refunds", "larkspur", "# Refunds\n\nAnnual plans are refunded within 30 days of purchase."),
    ("security/password-policy", "larkspur", "# Passwords\n\nPasswords rotate every 90 days and need 14 characters."),
)
SECRET = "larkspur-only"


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with seeded_client(settings, LARKSPUR) as c:
        yield c


@pytest.fixture
def evil(client: TestClient) -> dict[str, str]:
    return auth(make_key(client, *TENANT_ROLES, tenant="evil"))


@pytest.fixture
def larkspur(client: TestClient) -> dict[str, str]:
    return auth(make_key(client, *TENANT_ROLES, tenant="larkspur"))


def _hit_docs(response: object) -> set[str]:
    body = response.json()  # type: ignore[attr-defined]
    return {h["doc_id"] for h in body["hits"]}


def test_a_document_id_cannot_be_taken_over_by_another_tenant(
    client: TestClient, evil: dict[str, str], larkspur: dict[str, str]
) -> None:
    takeover = docs(("billing/refunds", "evil", "# Refunds\n\nNo refunds, ever. Call 555-0100."))
    for headers in (evil, auth(make_key(client, "ingest"))):  # bound or unbound, the id is larkspur's document
        response = client.post("/documents", headers=headers, json=takeover)
        assert response.status_code == 409
        assert "different tenant" in response.json()["detail"]
        assert "larkspur" not in response.json()["detail"]
    kept = client.get("/documents/billing/refunds", headers=larkspur).json()
    assert kept["tenant"] == "larkspur"
    assert "30 days" in kept["text"]
    # a bound key writes its own tenant only; naming another is refused, leaving it out means its own
    other = client.post("/documents", headers=evil, json=docs(("evil/a", "larkspur", "text")))
    assert other.status_code == 403
    own = client.post("/documents", headers=evil, json={"documents": [{"id": "evil/a", "text": "evil words"}]})
    assert own.status_code == 200
    assert client.get("/documents/evil/a", headers=evil).json()["tenant"] == "evil"


def test_supersedes_cannot_cross_tenants(client: TestClient, evil: dict[str, str], larkspur: dict[str, str]) -> None:
    fake = docs(("evil/policy", "evil", "# Passwords\n\nPasswords never rotate.", "security/password-policy"))
    assert client.post("/documents", headers=evil, json=fake).status_code == 200
    policy = client.get("/documents/security/password-policy", headers=larkspur).json()
    assert policy["status"] == "current"
    assert policy["superseded_by"] is None
    found = client.post(
        "/search", headers=larkspur, json={"query": "passwords rotate 90 days", "fresh_only": True, "k": 5}
    )
    assert "security/password-policy" in _hit_docs(found)
    # within a tenant it still works
    newer = docs(("security/password-policy-2", "larkspur", "# Passwords\n\n120 days.", "security/password-policy"))
    assert client.post("/documents", headers=larkspur, json=newer).status_code == 200
    policy = client.get("/documents/security/password-policy", headers=larkspur).json()
    assert policy["superseded_by"] == "security/password-policy-2"
    found = client.post(
        "/search", headers=larkspur, json={"query": "passwords rotate 90 days", "fresh_only": True, "k": 5}
    )
    assert "security/password-policy" not in _hit_docs(found)


def test_a_bound_key_searches_its_tenant_only(
    client: TestClient, evil: dict[str, str], larkspur: dict[str, str]
) -> None:
    assert (
        client.post(
            "/documents", headers=evil, json=docs(("evil/refunds", "evil", "Refunds take 30 days."))
        ).status_code
        == 200
    )
    query = {"query": "refunds annual plans 30 days", "k": 10, "explain": True}
    mine = client.post("/search", headers=evil, json=query)
    assert _hit_docs(mine) == {"evil/refunds"}
    assert mine.json()["params"]["filters"]["tenant"] == "evil"
    assert "larkspur" not in mine.text
    assert "billing/refunds" not in mine.text
    # the request's filters cannot widen it: another tenant is refused, doc_ids of another tenant find nothing
    other = client.post("/search", headers=evil, json={**query, "filters": {"tenant": "larkspur"}})
    assert other.status_code == 403
    assert "billing" not in other.text
    named = client.post("/search", headers=evil, json={**query, "filters": {"doc_ids": ["billing/refunds"]}})
    assert named.status_code == 200
    assert named.json()["hits"] == []
    # an unbound search key sees every tenant (an application serving several); larkspur's its own
    unbound = client.post("/search", headers=auth(make_key(client, "search")), json=query)
    assert {"evil/refunds", "billing/refunds"} <= _hit_docs(unbound)
    assert "evil/refunds" not in _hit_docs(client.post("/search", headers=larkspur, json=query))


def test_another_tenants_document_reads_as_missing(client: TestClient, evil: dict[str, str]) -> None:
    missing = client.get("/documents/no/such", headers=evil)
    theirs = client.get("/documents/billing/refunds", headers=evil)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace("billing/refunds", "no/such") == missing.json()["detail"]
    assert client.delete("/documents/billing/refunds", headers=evil).status_code == 404
    assert client.get("/documents/billing/refunds", headers=auth(make_key(client, "search"))).status_code == 200


def test_a_bound_key_lists_its_tenants_documents_only(
    client: TestClient, evil: dict[str, str], larkspur: dict[str, str]
) -> None:
    mine = docs(("evil/notes", "evil", "# Notes\n\nNothing to see."))
    assert client.post("/documents", headers=evil, json=mine).status_code == 200
    assert [d["id"] for d in client.get("/documents", headers=evil).json()["documents"]] == ["evil/notes"]
    assert client.get("/documents", headers=evil).json()["total"] == 1
    listed = client.get("/documents", headers=larkspur).json()
    assert sorted(d["id"] for d in listed["documents"]) == ["billing/refunds", "security/password-policy"]
    naming = client.get("/documents", headers=evil, params={"tenant": "larkspur"})
    assert naming.status_code == 403
    assert "bound to tenant" in naming.json()["detail"]
    everyone = client.get("/documents", headers=auth(make_key(client, "search"))).json()["documents"]
    assert {d["tenant"] for d in everyone} == {"evil", "larkspur"}


SET = (
    "\n".join(
        [
            '{"id": "mine", "question": "refund window", "relevant": [{"doc_id": "evil/refunds"}], '
            '"filters": {"tenant": "evil"}}',
            '{"id": "open", "question": "annual refunds", "relevant": [{"doc_id": "billing/refunds"}]}',
            '{"id": "theirs", "question": "password rotation", "relevant": [{"doc_id": "security/password-policy"}], '
            '"filters": {"tenant": "larkspur"}}',
            '{"id": "theirs-2", "question": "refunds for larkspur", "relevant": [{"doc_id": "billing/refunds"}], '
            '"filters": {"tenant": "larkspur"}}',
        ]
    )
    + "\n"
)


def test_a_bound_keys_eval_run_stays_in_its_tenant(
    client: TestClient, evil: dict[str, str], larkspur: dict[str, str]
) -> None:
    assert (
        client.post(
            "/documents", headers=evil, json=docs(("evil/refunds", "evil", "Refund window: 30 days."))
        ).status_code
        == 200
    )
    admin = auth(make_key(client, "eval:admin"))
    assert client.put("/eval/sets/shared", headers=admin, content=SET).status_code == 200
    report = client.post("/eval/run", headers=evil, json={"set": "shared", "k": [10]})
    assert report.status_code == 200, report.text
    body = report.json()
    # only the cases filed for evil are replayed: larkspur's are not, nor the tenant-less one, whose labels may name
    # any tenant's documents (here larkspur's)
    assert [c["id"] for c in body["cases"]] == ["mine"]
    retrieved = {hit["doc_id"] for c in body["cases"] for hit in c["top"]}
    assert retrieved == {"evil/refunds"}
    assert "security/password-policy" not in report.text
    assert '"larkspur"' not in report.text
    # its runs are its own
    run_id = body["run_id"]
    assert [r["run_id"] for r in client.get("/eval/runs", headers=evil).json()] == [run_id]
    assert client.get(f"/eval/runs/{run_id}", headers=larkspur).status_code == 404
    assert client.get(f"/eval/runs/{run_id}/trec", headers=larkspur).status_code == 404
    exported = client.get("/eval/sets/shared", headers=evil).text
    assert "larkspur" not in exported
    assert exported.count("\n") == 1
    # a set holding no case for its tenant, and monitoring runs (they feed every tenant's gauges), are refused
    only_theirs = SET.splitlines()[2] + "\n"
    assert client.put("/eval/sets/theirs", headers=admin, content=only_theirs).status_code == 200
    assert client.post("/eval/run", headers=evil, json={"set": "theirs"}).status_code == 422
    assert client.post("/eval/run", headers=evil, json={"set": "shared", "monitoring": True}).status_code == 403
    # refused before anything it asks for is looked at: a bad filter as well is still a 403, not a 422
    dates = {"updated_after": "2026-02-01", "updated_before": "2026-01-01"}  # an empty range: refused by the domain
    bad_filter = {"set": "shared", "monitoring": True, "overrides": {"filters": dates}}
    refused = client.post("/eval/run", headers=evil, json=bad_filter)
    assert refused.status_code == 403, refused.text
    # a tenant's run cannot become everyone's baseline
    promoted = client.post("/eval/baselines", headers=admin, json={"run_id": run_id, "name": "b"})
    assert promoted.status_code == 422


def test_a_bound_keys_incidents_stay_in_its_tenant(
    client: TestClient, evil: dict[str, str], larkspur: dict[str, str]
) -> None:
    theirs = {"question": "how long do refunds take", "doc_id": "billing/refunds", "reporter": "mallory"}
    assert client.post("/eval/incidents", headers=evil, json={**theirs, "tenant": "larkspur"}).status_code == 403
    refused = client.post("/eval/incidents", headers=evil, json=theirs)  # larkspur's document does not exist for evil
    assert refused.status_code == 422
    assert "larkspur" not in refused.text
    packaged = client.post(
        "/eval/incidents", headers=evil, json={**theirs, "doc_id": "evil/x", "set": "handbook"}
    )  # a tenant's key cannot add cases to the set that ships with Plumbline
    assert packaged.status_code == 403
    filtered = client.post("/eval/incidents", headers=evil, json={**theirs, "filters": {"tenant": "larkspur"}})
    assert filtered.status_code == 403
    posted = client.post("/eval/incidents", headers=larkspur, json={**theirs, "reporter": "sam"})
    assert posted.status_code == 201, posted.text
    incident = posted.json()["incident_id"]
    assert posted.json()["tenant"] == "larkspur"
    assert client.get("/eval/incidents", headers=evil).json()["incidents"] == []
    assert client.get("/eval/incidents", headers=evil, params={"tenant": "larkspur"}).status_code == 403
    assert client.get(f"/eval/incidents/{incident}", headers=evil).status_code == 404
    review = {"status": "rejected", "reason": "spam", "reviewer": "mallory"}
    assert client.patch(f"/eval/incidents/{incident}", headers=evil, json=review).status_code == 404
    assert client.get(f"/eval/incidents/{incident}", headers=larkspur).json()["status"] == "new"
    assert [i["incident_id"] for i in client.get("/eval/incidents", headers=larkspur).json()["incidents"]] == [incident]


SHARED = (
    '{"id": "open", "question": "annual refunds", "relevant": [{"doc_id": "billing/refunds"}]}\n'
    '{"id": "pw", "question": "password rotation", "relevant": [{"doc_id": "security/password-policy"}], '
    '"filters": {"tenant": "larkspur"}}\n'
)
VPN = {"question": "vpn error LC-419", "doc_id": "larkspur/vpn", "evidence": "token expired", "reporter": "sam"}


def _tenant_incident(client: TestClient, larkspur: dict[str, str]) -> tuple[dict[str, str], int]:
    """The shared set, larkspur's own document and its incident on it, accepted by larkspur's (bound) reviewer;
    the unbound eval key."""
    admin = auth(make_key(client, "eval:run", "eval:admin", "incidents:review", name="admin"))
    assert client.put("/eval/sets/shared", headers=admin, content=SHARED).status_code == 200
    vpn = docs(("larkspur/vpn", "larkspur", "# VPN\n\nVPN error LC-419 means the token expired: sign in again."))
    assert client.post("/documents", headers=larkspur, json=vpn).status_code == 200
    posted = client.post("/eval/incidents", headers=larkspur, json={**VPN, "set": "shared"})
    assert posted.status_code == 201, posted.text
    incident = posted.json()["incident_id"]
    accept = {"status": "accepted", "reason": "the answer is there", "reviewer": "lark-lead"}
    accepted = client.patch(f"/eval/incidents/{incident}", headers=larkspur, json=accept)
    assert accepted.status_code == 200, accepted.text
    return admin, incident


def _ids(response: object) -> list[str]:
    body = response.json()  # type: ignore[attr-defined]
    assert "cases" in body, body
    return [c["id"] for c in body["cases"]]


def test_a_tenants_incident_decides_that_tenants_gate_only(client: TestClient, larkspur: dict[str, str]) -> None:
    admin, incident = _tenant_incident(client, larkspur)
    case = f"incident-{incident}"
    run = {"set": "shared", "k": [10]}
    # the tenant's own run replays its incident (and records that it passed); a run over every tenant does not
    own = client.post("/eval/run", headers=larkspur, json=run)
    assert case in _ids(own)
    assert own.json()["incidents"]["passed"] == 1
    everyone = client.post("/eval/run", headers=admin, json=run)
    assert case not in _ids(everyone)
    lax = {"tolerance": 1.0, "category_tolerance": None}  # only the incident rule can fail this baseline's gate
    baseline = {"run_id": everyone.json()["run_id"], "name": "shared", "policy": lax}
    assert client.post("/eval/baselines", headers=admin, json=baseline).status_code == 201
    # the tenant deletes its document: its own gate fails on the regressed incident, nobody else's does
    assert client.delete("/documents/larkspur/vpn", headers=larkspur).status_code == 200
    gated = {**run, "baseline": "shared"}
    mine = client.post("/eval/run", headers=larkspur, json=gated).json()
    assert mine["incidents"]["regressed"] == [case]
    assert mine["gate"]["verdict"] == "fail"
    for body in (gated, {**run, "monitoring": True}):  # manual, and monitoring (the alerts)
        all_tenants = client.post("/eval/run", headers=admin, json=body)
        assert all_tenants.status_code == 200, all_tenants.text
        assert case not in _ids(all_tenants)
        assert all_tenants.json()["gate"]["verdict"] == "pass"


def test_an_unbound_reviewer_promotes_a_tenants_incident_to_every_run(
    client: TestClient, larkspur: dict[str, str]
) -> None:
    admin, incident = _tenant_incident(client, larkspur)
    assert client.get(f"/eval/incidents/{incident}", headers=admin).json()["scope"] == "tenant"
    run = {"set": "shared", "k": [10]}
    promote = {"scope": "all", "reviewer": "ops/ana", "reason": "every tenant's assistant asks this"}
    promoted = client.patch(f"/eval/incidents/{incident}", headers=admin, json=promote)
    assert promoted.status_code == 200, promoted.text
    assert (promoted.json()["scope"], promoted.json()["status"]) == ("all", "accepted")
    assert promoted.json()["history"][-1]["action"] == "promoted"
    assert promoted.json()["history"][-1]["actor"] == "ops/ana"
    assert f"incident-{incident}" in _ids(client.post("/eval/run", headers=admin, json=run))
    assert f"incident-{incident}" in _ids(client.post("/eval/run", headers=larkspur, json=run))
    # and back: only the tenant's runs again
    demote = {"scope": "tenant", "reviewer": "ops/ana", "reason": "larkspur only"}
    demoted = client.patch(f"/eval/incidents/{incident}", headers=admin, json=demote).json()
    assert (demoted["scope"], demoted["history"][-1]["action"]) == ("tenant", "demoted")
    assert f"incident-{incident}" not in _ids(client.post("/eval/run", headers=admin, json=run))


def test_a_bound_reviewer_cannot_promote(client: TestClient, larkspur: dict[str, str]) -> None:
    admin, incident = _tenant_incident(client, larkspur)
    for scope in ("all", "tenant"):
        asked = {"scope": scope, "reviewer": "lark-lead", "reason": "mine for everyone"}
        refused = client.patch(f"/eval/incidents/{incident}", headers=larkspur, json=asked)
        assert refused.status_code == 403, refused.text
        assert "unbound" in refused.json()["detail"]
    assert client.get(f"/eval/incidents/{incident}", headers=larkspur).json()["scope"] == "tenant"
    # an incident reported without a tenant counts in every run already: it has no tenant scope to leave
    open_doc = {"question": "annual plan refunds", "doc_id": "billing/refunds", "reporter": "ops"}
    posted = client.post("/eval/incidents", headers=auth(make_key(client, "incidents:report")), json=open_doc)
    assert posted.status_code == 201, posted.text
    assert posted.json()["scope"] == "all"
    asked = {"scope": "tenant", "reviewer": "ops/ana", "reason": "x"}
    assert client.patch(f"/eval/incidents/{posted.json()['incident_id']}", headers=admin, json=asked).status_code == 422


def test_a_tenant_is_held_to_its_storage_caps_and_can_free_its_share(settings: Settings) -> None:
    caps = {"tenant_max_documents": 3, "tenant_max_incident_reports": 2, "tenant_max_runs": 1}
    with seeded_client(settings.model_copy(update=caps), LARKSPUR) as client:
        larkspur = auth(make_key(client, *TENANT_ROLES, tenant="larkspur"))
        admin = auth(make_key(client, "eval:run", "eval:admin", name="admin"))
        assert client.put("/eval/sets/shared", headers=admin, content=SHARED).status_code == 200
        # documents: larkspur holds 2; one more fits, the next is refused, naming the cap
        vpn = docs(("larkspur/vpn", "larkspur", "# VPN\n\nVPN error LC-419 means the token expired: sign in again."))
        assert client.post("/documents", headers=larkspur, json=vpn).status_code == 200
        full = client.post("/documents", headers=larkspur, json=docs(("larkspur/x", "larkspur", "# X\n\nmore")))
        assert full.status_code == 507
        assert "PLUMBLINE_TENANT_MAX_DOCUMENTS" in full.json()["detail"]
        ingest = auth(make_key(client, "ingest"))
        assert client.post("/documents", headers=ingest, json=docs(("x", None, "# X\n\nok"))).status_code == 200
        # incident reports, duplicates included
        for _ in range(2):
            assert client.post("/eval/incidents", headers=larkspur, json={**VPN, "set": "shared"}).status_code == 201
        refused = client.post("/eval/incidents", headers=larkspur, json={**VPN, "set": "shared"})
        assert refused.status_code == 507
        assert "PLUMBLINE_TENANT_MAX_INCIDENT_REPORTS" in refused.json()["detail"]
        # stored runs: the second is refused before it starts; deleting the first frees its place
        first = client.post("/eval/run", headers=larkspur, json={"set": "shared", "k": [10]})
        assert first.status_code == 200, first.text
        refused = client.post("/eval/run", headers=larkspur, json={"set": "shared", "k": [10]})
        assert refused.status_code == 507
        assert "PLUMBLINE_TENANT_MAX_RUNS" in refused.json()["detail"]
        assert client.post("/eval/run", headers=admin, json={"set": "shared", "k": [10]}).status_code == 200
        gone = client.delete(f"/eval/runs/{first.json()['run_id']}", headers=larkspur)
        assert gone.json() == {"run_id": first.json()["run_id"], "set": "shared", "kind": "manual"}
        assert client.get(f"/eval/runs/{first.json()['run_id']}", headers=larkspur).status_code == 404
        assert client.post("/eval/run", headers=larkspur, json={"set": "shared", "k": [10]}).status_code == 200
        # a run over every tenant is everyone's: only eval:admin removes it
        shared = client.get("/eval/runs", headers=admin).json()[-1]["run_id"]
        assert client.delete(f"/eval/runs/{shared}", headers=larkspur).status_code == 404  # not visible to it
        assert client.delete(f"/eval/runs/{shared}", headers=auth(make_key(client, "eval:run"))).status_code == 403
        assert client.delete(f"/eval/runs/{shared}", headers=admin).status_code == 200
