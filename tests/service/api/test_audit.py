"""The audit log over HTTP (issue 34, item 7): writes refused with 409 or 422 are audited (throttled, with the key id,
never the body) and counted; each entry names the tenant of what changed beside the caller's; and an entry commits
with the state-store change it records, so a write whose entry cannot be written is not made."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from eval.storage import PACKAGE_DIR
from service.api.auth import READ_ONLY, is_write
from service.settings import Settings
from tests.service.api.access_helpers import auth, docs, make_key, secured_client

ONE_CASE = (PACKAGE_DIR / "sets" / "handbook.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[0]
BODY_TEXT = "NOTHING-OF-THE-BODY-GOES-TO-THE-LOG"


def entries(client: TestClient, admin: dict[str, str], **params: str) -> list[dict[str, Any]]:
    page = client.get("/admin/audit", headers=admin, params=params)
    assert page.status_code == 200, page.text
    found: list[dict[str, Any]] = page.json()["entries"]
    return found


def refused(client: TestClient, status: int) -> float:
    registry = client.app.state.registry  # type: ignore[attr-defined]
    return registry.get_sample_value("plumbline_writes_refused_total", {"status": str(status)}) or 0.0


def test_the_writes_are_every_route_with_a_write_method_but_search(settings: Settings) -> None:
    with secured_client(settings) as c:
        paths = c.get("/openapi.json").json()["paths"]
    routes = {(method.upper(), path) for path, methods in paths.items() for method in methods}
    assert routes & READ_ONLY == READ_ONLY
    writes = {(method, path) for method, path in routes if is_write(method, path)}
    assert writes == {
        ("POST", "/documents"),
        ("DELETE", "/documents/{doc_id}"),
        ("POST", "/documents/{doc_id}/archive"),
        ("POST", "/documents/{doc_id}/restore"),
        ("POST", "/eval/run"),
        ("POST", "/eval/runs/{run_id}/cancel"),
        ("DELETE", "/eval/runs/{run_id}"),
        ("POST", "/eval/baselines"),
        ("PUT", "/eval/sets/{name}"),
        ("POST", "/eval/sets/{name}/synthesize"),
        ("POST", "/eval/syntheses/{result_id}/resume"),
        ("POST", "/eval/syntheses/{result_id}/cancel"),
        ("POST", "/eval/sets/{name}/proposals/review"),
        ("POST", "/eval/sweeps"),
        ("POST", "/eval/sweeps/{result_id}/cancel"),
        ("POST", "/eval/sweeps/{result_id}/promote"),
        ("POST", "/eval/no-answer/calibrate"),
        ("POST", "/eval/tunes"),
        ("POST", "/eval/tunes/{result_id}/cancel"),
        ("POST", "/eval/tunes/{result_id}/promote"),
        ("POST", "/eval/model/rollback"),
        ("POST", "/eval/answers"),
        ("POST", "/eval/answers/{result_id}/cancel"),
        ("POST", "/eval/incidents"),
        ("PATCH", "/eval/incidents/{incident_id}"),
        ("POST", "/admin/keys"),
        ("POST", "/admin/keys/{key_id}/rotate"),
        ("DELETE", "/admin/keys/{key_id}"),
    }


def test_a_refused_write_is_audited_throttled_with_its_key_and_counted(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        writer = make_key(c, "ingest", "search", tenant="acme", name="writer")
        key_id = writer.split("_")[1]
        assert c.post("/documents", headers=admin, json=docs(("d1", "beta", "beta's text"))).status_code == 200
        for _ in range(3):  # an id another tenant holds: 409, audited once a minute
            taken = c.post("/documents", headers=auth(writer), json=docs(("d1", "acme", BODY_TEXT)))
            assert taken.status_code == 409
        invalid = c.post("/documents", headers=auth(writer), json={"documents": [{"text": BODY_TEXT}]})
        assert invalid.status_code == 422
        assert c.put("/eval/sets/handbook", headers=admin, content=ONE_CASE).status_code == 409  # packaged: read-only
        assert c.post("/search", headers=auth(writer), json={"query": ""}).status_code == 422  # not a write
        rows = entries(c, admin, action="write.refused")
        assert [(e["target"], e["detail"]["status"]) for e in rows] == [
            ("PUT /eval/sets/{name}", 409),
            ("POST /documents", 422),
            ("POST /documents", 409),
        ]
        conflict = rows[-1]
        assert (conflict["actor"], conflict["tenant"], conflict["target_tenant"]) == (
            f"writer ({key_id})",
            "acme",
            None,
        )
        assert conflict["detail"]["key_id"] == key_id
        assert conflict["detail"]["client"] == "testclient"
        assert "different tenant" in conflict["detail"]["reason"]
        assert conflict["detail"]["suppressed"] == 0
        assert "documents[0].id" in rows[1]["detail"]["reason"]
        assert all(len(e["detail"]["reason"]) <= 300 for e in rows)
        assert BODY_TEXT not in str(entries(c, admin))
        assert rows[0]["actor"].startswith("admin (")
        assert (refused(c, 409), refused(c, 422)) == (4.0, 1.0)  # every refusal counts, audited or not


def test_a_refused_write_is_audited_with_auth_off_too(client: TestClient) -> None:
    assert client.post("/eval/baselines", json={"run_id": "nope", "name": "x"}).status_code == 404  # not refused
    assert client.put("/eval/sets/bad", content="not json\n").status_code == 422
    [row] = entries(client, {}, action="write.refused")
    assert (row["actor"], row["target"], row["detail"]["key_id"]) == (
        "anonymous (auth off)",
        "PUT /eval/sets/{name}",
        None,
    )


def test_each_entry_names_the_tenant_of_what_changed(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        acme = auth(make_key(c, "ingest", "incidents:report", "eval:run", tenant="acme", name="acme"))
        assert (
            c.post("/documents", headers=acme, json=docs(("a/1", None, "refunds take thirty days"))).status_code == 200
        )
        mixed = docs(("b/1", "beta", "beta text"), ("g/1", "gamma", "gamma text"), ("n/1", None, "shared text"))
        assert c.post("/documents", headers=admin, json=mixed).status_code == 200
        assert c.delete("/documents/b/1", headers=admin).status_code == 200
        reported = c.post(
            "/eval/incidents",
            headers=acme,
            json={"set": "mine", "question": "refunds?", "doc_id": "a/1", "evidence": "thirty days", "reporter": "ann"},
        )
        assert reported.status_code == 201, reported.text
        incident = str(reported.json()["incident_id"])
        assert (
            c.put(
                "/eval/sets/mine",
                headers=admin,
                content='{"id": "c", "question": "q", "relevant": [{"doc_id": "a/1"}]}\n',
            ).status_code
            == 200
        )
        made = c.post("/admin/keys", headers=admin, json={"name": "bot", "roles": ["search"], "tenant": "acme"}).json()
        assert c.delete(f"/admin/keys/{made['key_id']}", headers=admin).status_code == 200
        listed = [(e["action"], e["target"], e["tenant"], e["target_tenant"]) for e in entries(c, admin)]
        assert listed == [
            ("key.revoke", made["key_id"], None, "acme"),
            ("key.create", made["key_id"], None, "acme"),
            ("set.put", "mine", None, None),  # what every tenant shares
            ("incident.report", incident, "acme", "acme"),
            ("documents.delete", "b/1", None, "beta"),
            ("documents.ingest", "b/1, g/1, n/1", None, None),  # several tenants: the detail names them
            ("documents.ingest", "a/1", "acme", "acme"),
        ]
        assert entries(c, admin, action="documents.ingest")[0]["detail"]["tenants"] == [None, "beta", "gamma"]
        assert [e["action"] for e in entries(c, admin, target_tenant="acme")] == [
            "key.revoke",
            "key.create",
            "incident.report",
            "documents.ingest",
        ]


def test_an_eval_run_and_a_promotion_are_audited_with_what_the_store_wrote(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        assert c.put("/eval/sets/mine", headers=admin, content=ONE_CASE).status_code == 200
        run = c.post("/eval/run", headers=admin, json={"set": "mine"}).json()
        promoted = c.post("/eval/baselines", headers=admin, json={"run_id": run["run_id"], "name": "mine"}).json()
        started = c.post("/eval/run", headers=admin, json={"set": "mine", "async": True})
        assert started.status_code == 202
        c.app.state.runtime.evals.wait(30)  # type: ignore[attr-defined]
        background, baseline, foreground = entries(c, admin)[:3]
        assert (foreground["action"], foreground["target"], foreground["target_tenant"]) == (
            "eval.run",
            run["run_id"],
            None,
        )
        assert foreground["detail"] == {"set": "mine", "kind": "manual", "gate": None}
        assert (baseline["action"], baseline["target"]) == ("baseline.promote", "mine")
        assert baseline["detail"]["sha256"] == promoted["sha256"]  # the hash of the baseline as stored
        assert (baseline["detail"]["run_id"], baseline["detail"]["replaced"]) == (run["run_id"], None)
        assert (background["action"], background["target"]) == ("eval.run", started.json()["run_id"])
        assert background["detail"] == {"set": "mine", "async": True, "kind": "manual"}


def test_a_write_whose_audit_entry_cannot_be_written_is_not_made(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        engine = c.app.state.runtime.state.engine  # type: ignore[attr-defined]
        with engine.begin() as conn:  # the audit log cannot be written (a full table, a lost privilege)
            conn.execute(text("ALTER TABLE audit_log RENAME TO audit_log_away"))
        try:
            answer = c.put("/eval/sets/mine", headers=admin, content=ONE_CASE)
            made = c.post("/admin/keys", headers=admin, json={"name": "bot", "roles": ["search"]})
        finally:
            with engine.begin() as conn:
                conn.execute(text("ALTER TABLE audit_log_away RENAME TO audit_log"))
        assert (answer.status_code, made.status_code) == (503, 503)
        assert c.get("/eval/sets/mine", headers=admin).status_code == 404
        assert [k["name"] for k in c.get("/admin/keys", headers=admin).json()] == ["admin"]
        assert entries(c, admin) == []
