"""POST/GET/PATCH /eval/incidents: validation, dedup, triage verdicts, review, and the cases incidents become."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eval.cases import dump_jsonl, parse_jsonl
from service.api.app import create_app
from service.cli.incidents import accepted_cases
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.postgres import fresh_postgres_database

NOISE = "refund window annual plans refund window annual plans"
DOCS: list[dict[str, Any]] = [
    {"id": "billing/refunds", "title": "Refunds", "text": "Annual plans are refundable within 30 days of purchase."},
    {"id": "billing/refund-faq", "title": "Refund FAQ", "text": f"{NOISE}. Ask billing."},
    {"id": "it/vpn", "title": "VPN", "text": "VPN error LC-419 means the token expired.", "tags": ["it"]},
    {"id": "hr/leave", "title": "Leave", "text": "Parental leave is 16 weeks.", "tenant": "acme"},
    {
        "id": "billing/pricing-2025",
        "title": "Pricing 2025",
        "text": "Zephyr tier costs 10 euros per seat.",
    },
    {
        "id": "billing/pricing",
        "title": "Pricing",
        "text": "Zephyr tier costs 12 euros per seat.",
        "supersedes": "billing/pricing-2025",
    },
    {
        "id": "hr/travel-freeze",
        "title": "Travel freeze",
        "text": "Quokka travel is frozen until March.",
        "valid_until": "2025-01-01",
    },
    {"id": "zh/refund", "title": "退款", "text": "年度计划的退款期限为三十天。"},
    *({"id": f"noise/{n}", "title": "Noise", "text": f"orbital lattice {n} orbital lattice"} for n in range(6)),
    {"id": "misc/lattice", "title": "Garden", "text": "The garden gate is painted green."},
]
CASES = [{"id": "c1", "question": "LC-419 vpn", "relevant": [{"doc_id": "it/vpn"}], "category": "it"}]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data", index_copies=1, max_k=5, default_k=1, default_candidates=5, incident_set="mini"
    )
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        assert c.post("/documents", json={"documents": DOCS}).status_code == 200
        assert c.put("/eval/sets/mini", content="".join(json.dumps(x) + "\n" for x in CASES)).status_code == 200
        yield c


def post(client: TestClient, **body: Any) -> Any:
    body = {"reporter": "ann", "category": "billing", **body}
    return client.post("/eval/incidents", json=body)


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"question": "refunds?"}, "doc_id", "name the document"),
        ({"question": "refunds?", "doc_id": "billing/nope"}, "doc_id", "no document 'billing/nope'"),
        ({"question": "leave?", "doc_id": "hr/leave", "tenant": "globex"}, "doc_id", "in tenant 'globex'"),
        ({"question": "refunds?", "doc_id": "billing/refunds", "evidence": "60 days"}, "evidence", "not found in"),
        ({"question": "refunds?", "chunk_id": "billing/refunds#9"}, "chunk_id", "has no chunk"),
        (
            {"question": "refunds?", "chunk_id": "billing/refunds#0", "doc_id": "billing/refunds"},
            "chunk_id",
            "not both",
        ),
        ({"question": "?!…", "doc_id": "billing/refunds"}, "question", "no letters"),
        ({"question": "refunds?", "doc_id": "billing/refunds", "set": "../x"}, "set", "invalid"),
        (
            {"question": "leave?", "doc_id": "hr/leave", "tenant": "acme", "filters": {"tenant": "globex"}},
            "filters.tenant",
            "differs",
        ),
    ],
)
def test_bad_reports_get_a_4xx_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str, words: str
) -> None:
    r = post(client, **body)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"]
    assert words in r.json()["detail"]
    assert client.get("/eval/incidents").json()["incidents"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"question": "x\x00y", "doc_id": "billing/refunds", "reporter": "ann"},  # PostgreSQL cannot store NUL
        {"question": "x", "doc_id": "billing/refunds", "reporter": "ann", "note": "a\x07b"},
        {"question": "x", "doc_id": "billing/refunds"},  # no reporter
        {"question": "x", "doc_id": "billing/refunds", "reporter": "ann", "filters": {"tennant": "a"}},
        {"question": "", "doc_id": "billing/refunds", "reporter": "ann"},
    ],
)
def test_malformed_bodies_are_422(client: TestClient, body: dict[str, Any]) -> None:
    assert client.post("/eval/incidents", json=body).status_code == 422


def test_evidence_is_found_whatever_its_case_spacing_and_width(client: TestClient) -> None:
    r = post(client, question="refund window", doc_id="billing/refunds", evidence="ＷＩＴＨＩＮ   ３０ days")
    assert r.status_code == 201, r.text
    assert r.json()["labels"] == [{"doc_id": "billing/refunds", "evidence": "ＷＩＴＨＩＮ   ３０ days"}]


# -- deduplication ---------------------------------------------------------------------------------


def test_spelling_variants_merge_into_one_incident(client: TestClient) -> None:
    first = post(client, question="What is the refund window?", doc_id="billing/refunds", evidence="30 days").json()
    variants = ["what is the REFUND window", "  WHAT IS the refund-window?? ", "ｗｈａｔ ｉｓ ｔｈｅ refund window？"]
    for n, question in enumerate(variants, start=2):
        r = post(client, question=question, doc_id="billing/refunds", reporter=f"r{n}")
        assert r.status_code == 201
        assert (r.json()["duplicate_of"], r.json()["reports"]) == (first["incident_id"], n)
    assert first["duplicate_of"] is None
    detail = client.get(f"/eval/incidents/{first['incident_id']}").json()
    assert detail["reporters"] == ["ann", "r2", "r3", "r4"]
    # the later reports named only the document: the first report's evidence says more, and is kept alone
    assert detail["labels"] == [{"doc_id": "billing/refunds", "evidence": "30 days"}]
    assert [e["action"] for e in detail["history"]] == ["reported", "merged", "merged", "merged"]


def test_chinese_full_width_punctuation_and_spacing_merge(client: TestClient) -> None:
    ids = {
        post(client, question=q, doc_id="zh/refund", evidence="三十天", category="billing").json()["incident_id"]
        for q in ("退款期限是多少？", "退款期限是多少?", " 退款 期限，是多少。")
    }
    assert len(ids) == 1
    assert client.get("/eval/incidents").json()["incidents"][0]["reports"] == 3


def test_the_same_question_in_another_tenant_or_set_is_another_incident(client: TestClient) -> None:
    a = post(client, question="refund window", doc_id="billing/refunds").json()
    b = post(client, question="refund window", doc_id="billing/refunds", set="other").json()
    assert a["incident_id"] != b["incident_id"]
    assert b["duplicate_of"] is None


# -- triage ----------------------------------------------------------------------------------------


def triage(client: TestClient, **body: Any) -> dict[str, Any]:
    r = post(client, **body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()["triage"]
    return out


def test_triage_retrieved(client: TestClient) -> None:
    t = triage(client, question="vpn error LC-419", doc_id="it/vpn", evidence="token expired")
    assert (t["verdict"], t["rank"], t["k"]) == ("retrieved", 1, 1)
    assert t["stages"]["keyword"] == 1
    assert t["stages"]["fused"] == 1
    assert t["top"][0]["doc_id"] == "it/vpn"


def test_triage_ranked_low_names_the_hits_that_came_first(client: TestClient) -> None:
    t = triage(client, question="refund window annual plans", doc_id="billing/refunds")
    assert t["verdict"] == "ranked_low"
    assert t["rank"] > 1
    assert t["top"][0]["doc_id"] == "billing/refund-faq"
    assert set(t["stages"]) == {"dense", "keyword", "fused", "rerank"}
    assert t["stages"]["rerank"] is None  # no cross-encoder configured


def test_triage_within_the_assistants_own_k(client: TestClient) -> None:
    t = triage(client, question="refund window annual plans", doc_id="billing/refunds", k=5)
    assert (t["verdict"], t["k"]) == ("retrieved", 5)
    assert (
        client.post("/eval/incidents", json={"question": "q", "doc_id": "it/vpn", "reporter": "a", "k": 0}).status_code
        == 422
    )


def test_triage_not_retrieved(client: TestClient) -> None:
    t = triage(client, question="orbital lattice quasar", doc_id="misc/lattice", evidence="painted green")
    assert t["verdict"] == "not_retrieved", t
    assert t["rank"] is None
    assert t["filtered_by"] == []


def test_triage_filtered_out_by_a_tag_filter(client: TestClient) -> None:
    t = triage(client, question="vpn error LC-419", doc_id="it/vpn", filters={"tags": ["hr"]})
    assert (t["verdict"], t["filtered_by"]) == ("filtered_out", ["tags"])


def test_triage_filtered_out_by_a_superseding_document_that_was_not_shown(client: TestClient) -> None:
    # the user asked about the 10-euro price; the freshness guard hid pricing-2025 (superseded by pricing), and
    # pricing did not reach the top k either: the supersession hid the source the reporter trusts
    t = triage(client, question="orbital lattice zephyr 10", doc_id="billing/pricing-2025", evidence="10 euros")
    assert t["verdict"] == "filtered_out", t
    assert t["filtered_by"] == ["superseded by billing/pricing"]
    assert t["source"]["superseded_by"] == "billing/pricing"


def test_triage_stale_source_when_the_current_version_was_shown(client: TestClient) -> None:
    t = triage(client, question="zephyr tier euros per seat", doc_id="billing/pricing-2025")
    assert t["verdict"] == "stale_source", t
    assert t["top"][0]["doc_id"] == "billing/pricing"
    assert "superseded by billing/pricing" in t["explanation"]


def test_triage_stale_source_for_an_expired_document(client: TestClient) -> None:
    t = triage(client, question="quokka travel frozen", doc_id="hr/travel-freeze")
    assert t["verdict"] == "stale_source", t
    assert t["filtered_by"] == ["expired on 2025-01-01T00:00:00Z"]


def test_triage_searches_within_the_reports_tenant(client: TestClient) -> None:
    t = triage(client, question="parental leave weeks", doc_id="hr/leave", tenant="acme")
    assert t["verdict"] == "retrieved"
    assert all(h["doc_id"] == "hr/leave" for h in t["top"])  # only acme's documents were searched


# -- review and the cases incidents become ---------------------------------------------------------


def test_review_accept_reject_and_history(client: TestClient) -> None:
    a = post(client, question="refund window", doc_id="billing/refunds").json()["incident_id"]
    b = post(client, question="vpn token", doc_id="it/vpn", category="it").json()["incident_id"]
    no_reason = client.patch(f"/eval/incidents/{a}", json={"status": "accepted", "reviewer": "rev"})
    assert no_reason.status_code == 422
    assert "reason" in no_reason.json()["detail"]
    ok = client.patch(f"/eval/incidents/{a}", json={"status": "accepted", "reason": "real miss", "reviewer": "rev"})
    assert ok.status_code == 200, ok.text
    assert (ok.json()["status"], ok.json()["reviewer"], ok.json()["reason"]) == ("accepted", "rev", "real miss")
    rejected = client.patch(f"/eval/incidents/{b}", json={"status": "rejected", "reason": "dup", "reviewer": "rev"})
    assert [e["action"] for e in rejected.json()["history"]] == ["reported", "rejected"]
    edited = client.patch(f"/eval/incidents/{b}", json={"category": "security", "reviewer": "eve"})
    assert edited.json()["status"] == "rejected"
    assert [e["actor"] for e in edited.json()["history"]] == ["ann", "rev", "eve"]
    assert [i["incident_id"] for i in client.get("/eval/incidents?status=accepted").json()["incidents"]] == [a]
    assert [i["incident_id"] for i in client.get("/eval/incidents?category=security").json()["incidents"]] == [b]
    assert client.get("/eval/incidents?status=bogus").status_code == 422
    assert client.patch("/eval/incidents/999", json={"category": "x", "reviewer": "r"}).status_code == 404
    bad_label = client.patch(f"/eval/incidents/{a}", json={"labels": [{"doc_id": "nope"}], "reviewer": "r"})
    assert bad_label.status_code == 422
    assert "labels" in bad_label.json()["detail"]


def test_listing_pages_and_filters_by_reporter_and_time(client: TestClient) -> None:
    ids = [
        post(client, question=f"refund question {n}", doc_id="billing/refunds").json()["incident_id"] for n in range(5)
    ]
    post(client, question="refund question 2", doc_id="billing/refunds", reporter="zed")
    page = client.get("/eval/incidents?limit=2").json()
    assert [i["incident_id"] for i in page["incidents"]] == [ids[4], ids[3]]
    rest = client.get(f"/eval/incidents?limit=10&before={page['next_before']}").json()
    assert [i["incident_id"] for i in rest["incidents"]] == [ids[2], ids[1], ids[0]]
    assert rest["next_before"] is None
    assert [i["incident_id"] for i in client.get("/eval/incidents?reporter=zed").json()["incidents"]] == [ids[2]]
    assert client.get("/eval/incidents?since=2999-01-01T00:00:00Z").json()["incidents"] == []
    assert client.get("/eval/incidents?since=2999-01-01T00:00:00").status_code == 422
    assert client.get("/eval/incidents?since=0001-01-01T00:00:00+14:00").status_code == 422  # not in UTC's range
    assert len(client.get("/eval/incidents?since=2000-01-01").json()["incidents"]) == 5  # a date: midnight UTC


def accept(client: TestClient, incident_id: int) -> None:
    body = {"status": "accepted", "reason": "confirmed", "reviewer": "rev"}
    assert client.patch(f"/eval/incidents/{incident_id}", json=body).status_code == 200


def test_an_accepted_incident_counts_in_the_next_run(client: TestClient) -> None:
    before = client.post("/eval/run", json={"set": "mini", "k": [1, 5]}).json()
    new = post(client, question="refund window annual plans", doc_id="billing/refunds").json()["incident_id"]
    assert client.post("/eval/run", json={"set": "mini", "k": [1, 5]}).json()["cases_total"] == 1  # new: not yet
    accept(client, new)
    after = client.post("/eval/run", json={"set": "mini", "k": [1, 5]}).json()
    assert (before["cases_total"], after["cases_total"]) == (1, 2)
    assert after["metrics"]["hit@1"] < before["metrics"]["hit@1"]  # it ranks below 1
    assert {g["name"]: g["cases"] for g in after["by_source"]}["incident"] == 1
    assert after["incidents"] == {"cases": 1, "passed": 1, "failed": [], "regressed": []}  # at rank 2 of 5
    case = next(c for c in after["cases"] if c["source"] == "incident")
    assert case["id"] == f"incident-{new}"
    assert client.get(f"/eval/incidents/{new}").json()["last_outcome"] == "passed"
    assert "incident-" in client.get("/eval/sets/mini?incidents=true").text
    assert "incident-" not in client.get("/eval/sets/mini").text


def test_an_incident_passes_only_within_the_assistants_k(client: TestClient) -> None:
    # the source ranks 2nd: within the run's k of 5, but the assistant that failed read only the first result
    new = post(client, question="refund window annual plans", doc_id="billing/refunds", k=1).json()
    assert (new["k"], new["triage"]["verdict"]) == (1, "ranked_low")
    accept(client, new["incident_id"])
    run = client.post("/eval/run", json={"set": "mini", "k": [1, 5]}).json()
    assert run["incidents"] == {"cases": 1, "passed": 0, "failed": [f"incident-{new['incident_id']}"], "regressed": []}
    case = next(c for c in run["cases"] if c["source"] == "incident")
    assert (case["metrics"]["hit@5"], case["first_relevant_rank"]) == (1.0, 2)


@pytest.mark.engine
def test_new_incidents_count_when_the_setting_says_so(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d", incident_set="fresh", incidents_count_new=True)
    app = create_app(settings, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as c:
        assert app.state.runtime.wait(timeout=60)
        c.post("/documents", json={"documents": DOCS[:1]})
        assert post(c, question="refund window", doc_id="billing/refunds").status_code == 201
        assert [s["name"] for s in c.get("/eval/sets").json()] == ["fresh", "handbook", "plain"]
        assert c.post("/eval/run", json={"set": "fresh", "k": [1]}).json()["cases_total"] == 1


def test_a_regressed_incident_fails_the_gate(client: TestClient) -> None:
    new = post(client, question="vpn error LC-419", doc_id="it/vpn", evidence="token expired").json()["incident_id"]
    accept(client, new)
    first = client.post("/eval/run", json={"set": "mini", "k": [1]}).json()
    assert first["incidents"]["passed"] == 1
    # baselines whose policies forgive any drop in the metrics: only the incident rule can fail their gates
    lax = {"tolerance": 1.0, "category_tolerance": None}
    for name, forgive in (("mini", False), ("mini-forgiving", True)):
        policy = {**lax, "fail_on_regressed_incidents": not forgive}
        promoted = client.post("/eval/baselines", json={"run_id": first["run_id"], "name": name, "policy": policy})
        assert promoted.status_code == 201, promoted.text
    # the source is rewritten: the evidence is gone, so the incident's case fails now
    changed = {**DOCS[2], "text": "VPN error LC-419: sign in again."}
    assert client.post("/documents", json={"documents": [changed]}).status_code == 200
    gated = client.post("/eval/run", json={"set": "mini", "k": [1], "baseline": "mini"}).json()
    assert gated["incidents"]["regressed"] == [f"incident-{new}"]
    assert gated["gate"]["verdict"] == "fail"
    assert any("regressed" in reason for reason in gated["gate"]["reasons"])
    assert client.get(f"/eval/runs/{gated['run_id']}").json()["incidents"]["regressed"] == [f"incident-{new}"]
    assert client.get(f"/eval/incidents/{new}").json()["last_outcome"] == "regressed"
    # the caller cannot forgive it: only the baseline's policy can (its promoter's choice)
    forgive = {"set": "mini", "k": [1], "baseline": "mini", "fail_on_regressed_incidents": False}
    refused = client.post("/eval/run", json=forgive)
    assert refused.status_code == 403
    assert "fail_on_regressed_incidents false" in refused.json()["detail"]
    allowed = client.post("/eval/run", json={"set": "mini", "k": [1], "baseline": "mini-forgiving"}).json()
    assert allowed["gate"]["verdict"] == "pass"
    assert allowed["incidents"]["regressed"] == [f"incident-{new}"]
    assert allowed["gate"]["policy"]["fail_on_regressed_incidents"] is False


def test_an_experiment_reports_incident_outcomes_without_recording_them(client: TestClient) -> None:
    new = post(client, question="refund window annual plans", doc_id="billing/refunds", k=1).json()["incident_id"]
    accept(client, new)
    only_refunds = {"set": "mini", "k": [1], "overrides": {"filters": {"doc_ids": ["billing/refunds", "it/vpn"]}}}
    experiment = client.post("/eval/run", json=only_refunds).json()
    assert experiment["incidents"]["passed"] == 1  # with the FAQ filtered away it ranks first
    assert client.get(f"/eval/incidents/{new}").json()["last_run"] is None
    served = client.post("/eval/run", json={"set": "mini", "k": [1]}).json()
    # failing in the served configuration is a failure, not a regression: it never passed there
    assert served["incidents"] == {"cases": 1, "passed": 0, "failed": [f"incident-{new}"], "regressed": []}
    assert client.get(f"/eval/incidents/{new}").json()["last_outcome"] == "failed"


def test_export_then_load_gives_the_same_cases(client: TestClient) -> None:
    a = post(client, question="refund window", doc_id="billing/refunds", evidence="30 days").json()["incident_id"]
    b = post(client, question="leave weeks", doc_id="hr/leave", tenant="acme", category="hr").json()["incident_id"]
    post(client, question="never accepted", doc_id="it/vpn")
    accept(client, a)
    accept(client, b)
    # a tenant's incident counts in runs over every tenant once promoted (auth off: an unbound reviewer)
    promote = {"scope": "all", "reviewer": "lead", "reason": "every tenant"}
    assert client.patch(f"/eval/incidents/{b}", json=promote).json()["scope"] == "all"
    exported = accepted_cases(client)
    text = dump_jsonl(exported)
    assert [c.id for c in parse_jsonl(text)] == [f"incident-{a}", f"incident-{b}"]
    assert parse_jsonl(text) == exported
    assert exported[1].filters == {"tenant": "acme"}
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    assert runtime.evals.cases("mini")[1:] == exported
    # committed into the set, the cases are not counted twice
    client.put("/eval/sets/mini", content="".join(json.dumps(x) + "\n" for x in CASES) + text)
    assert [c.id for c in runtime.evals.cases("mini")] == ["c1", f"incident-{a}", f"incident-{b}"]


def test_incident_gauge(client: TestClient) -> None:
    a = post(client, question="refund window", doc_id="billing/refunds").json()["incident_id"]
    post(client, question="vpn token", doc_id="it/vpn", category="it")
    accept(client, a)
    post(client, question="refund window annual", doc_id="billing/refunds", category="xyz-free-text-123")
    post(client, question="vpn token expired", doc_id="it/vpn", category="Ask Bob, ext. 4711")
    text = client.get("/metrics").text
    assert 'plumbline_incidents{category="billing",status="accepted"} 1.0' in text
    assert 'plumbline_incidents{category="it",status="new"} 1.0' in text
    # a category no labelled set has is not a label value of its own: free text would make a series per spelling
    assert 'plumbline_incidents{category="other",status="new"} 2.0' in text
    assert not any(words in text for words in ("xyz-free-text", "4711"))
    # once a stored set has the category, the gauge shows it
    cases = [*CASES, {**CASES[0], "id": "c2", "category": "xyz-free-text-123"}]
    assert client.put("/eval/sets/mini", content="".join(json.dumps(x) + "\n" for x in cases)).status_code == 200
    text = client.get("/metrics").text
    assert 'plumbline_incidents{category="xyz-free-text-123",status="new"} 1.0' in text
    assert 'plumbline_incidents{category="other",status="new"} 1.0' in text


@pytest.mark.engine
def test_replicas_sharing_a_postgresql_state_store_see_each_others_incidents(tmp_path: Path, postgres_url: str) -> None:
    url = fresh_postgres_database(postgres_url)
    apps = [
        create_app(
            Settings(data_dir=tmp_path / name, state_url=url, incident_set="mini"),
            components=Components(embedder=lambda _: FakeEmbedder()),
        )
        for name in ("a", "b")
    ]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        assert all(app.state.runtime.wait(timeout=60) for app in apps)
        a.post("/documents", json={"documents": DOCS[:3]})
        posted = post(a, question="vpn error LC-419", doc_id="it/vpn", evidence="token expired").json()
        assert posted["triage"]["verdict"] == "retrieved"
        seen = b.get(f"/eval/incidents/{posted['incident_id']}").json()
        assert (seen["question"], seen["triage"]["verdict"]) == ("vpn error LC-419", "retrieved")
        accept(b, posted["incident_id"])
        assert a.get("/eval/incidents?status=accepted").json()["incidents"][0]["reviewer"] == "rev"
        assert 'plumbline_incidents{category="billing",status="accepted"} 1.0' in b.get("/metrics").text
        run = a.post("/eval/run", json={"set": "mini", "k": [1]}).json()
        assert [r["run_id"] for r in b.get("/eval/runs").json()] == [run["run_id"]]
        nul = b.get("/eval/incidents", params={"reporter": "a\x00"})  # PostgreSQL cannot compare with NUL
        assert nul.status_code == 422
        assert "cannot hold a value" in nul.json()["detail"]
    assert not (tmp_path / "a" / "state.db").exists()
