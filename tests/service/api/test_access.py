"""Who may call what: every endpoint against every role, 401 and 403 that hint at nothing, keys, the audit log,
the demo's auth-off mode, CORS and security headers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.access.principals import ROLES
from service.settings import Settings
from tests.fakes import GatedFakeEmbedder
from tests.service.api.access_helpers import auth, docs, make_key, secured_client

NO_KEY = "00000000000000000000000000000000"
# every endpoint, with a request that is valid (or a harmless 404/422) for a caller who may make it, and the roles
# that may (admin may do everything)
TABLE: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("POST", "/documents", {"json": docs(("t/a", "", "alpha text"))}, ("ingest",)),
    ("GET", "/documents", {}, ("search", "ingest")),
    ("GET", "/documents/{doc_id}", {"url": "/documents/t/none"}, ("search", "ingest")),
    ("DELETE", "/documents/{doc_id}", {"url": "/documents/t/none"}, ("ingest",)),
    ("POST", "/documents/{doc_id}/archive", {"url": "/documents/t/none/archive"}, ("ingest",)),
    ("POST", "/documents/{doc_id}/restore", {"url": "/documents/t/none/restore"}, ("ingest",)),
    ("POST", "/search", {"json": {"query": "alpha"}}, ("search",)),
    ("POST", "/eval/run", {"json": {"set": "none"}}, ("eval:run",)),
    ("GET", "/eval/runs", {}, ("eval:run",)),
    ("GET", "/eval/runs/{run_id}", {"url": "/eval/runs/20990101T000000-ffffff"}, ("eval:run",)),
    ("POST", "/eval/runs/{run_id}/cancel", {"url": "/eval/runs/20990101T000000-ffffff/cancel"}, ("eval:run",)),
    ("DELETE", "/eval/runs/{run_id}", {"url": "/eval/runs/20990101T000000-ffffff"}, ("eval:run",)),
    ("GET", "/eval/runs/{run_id}/trec", {"url": "/eval/runs/20990101T000000-ffffff/trec"}, ("eval:run",)),
    ("GET", "/eval/runs/{run_id}/distractors", {"url": "/eval/runs/20990101T000000-ffffff/distractors"}, ("eval:run",)),
    ("GET", "/eval/sets/{name}/distractors", {"url": "/eval/sets/handbook/distractors"}, ("eval:run",)),
    ("POST", "/eval/baselines", {"json": {"run_id": "20990101T000000-ffffff", "name": "b"}}, ("eval:admin",)),
    ("GET", "/eval/baselines/{name}", {"url": "/eval/baselines/handbook"}, ("eval:run",)),
    ("GET", "/eval/sets", {}, ("eval:run",)),
    ("GET", "/eval/sets/{name}", {"url": "/eval/sets/handbook"}, ("eval:run",)),
    (
        "PUT",
        "/eval/sets/{name}",
        {"url": "/eval/sets/mine", "content": '{"id": "a", "question": "q", "relevant": [{"doc_id": "t/a"}]}\n'},
        ("eval:admin",),
    ),
    ("POST", "/eval/sets/{name}/synthesize", {"url": "/eval/sets/mine/synthesize", "json": {}}, ("eval:admin",)),
    ("GET", "/eval/syntheses", {}, ("eval:run",)),
    ("GET", "/eval/syntheses/{result_id}", {"url": "/eval/syntheses/none"}, ("eval:run",)),
    ("POST", "/eval/syntheses/{result_id}/resume", {"url": "/eval/syntheses/none/resume"}, ("eval:admin",)),
    ("POST", "/eval/syntheses/{result_id}/cancel", {"url": "/eval/syntheses/none/cancel"}, ("eval:run",)),
    ("GET", "/eval/sets/{name}/proposals", {"url": "/eval/sets/mine/proposals"}, ("eval:run",)),
    (
        "POST",
        "/eval/sets/{name}/proposals/review",
        {"url": "/eval/sets/mine/proposals/review", "json": {"status": "rejected", "all": True}},
        ("eval:admin",),
    ),
    ("POST", "/eval/sweeps", {"json": {"set": "none", "space": {"k": [5]}}}, ("eval:run",)),
    ("GET", "/eval/sweeps", {}, ("eval:run",)),
    ("GET", "/eval/sweeps/{result_id}", {"url": "/eval/sweeps/none"}, ("eval:run",)),
    ("POST", "/eval/sweeps/{result_id}/cancel", {"url": "/eval/sweeps/none/cancel"}, ("eval:run",)),
    ("POST", "/eval/sweeps/{result_id}/promote", {"url": "/eval/sweeps/none/promote", "json": {}}, ("eval:admin",)),
    ("POST", "/eval/tunes", {"json": {"sets": ["none"]}}, ("eval:admin",)),
    ("GET", "/eval/tunes", {}, ("eval:run",)),
    ("GET", "/eval/tunes/{result_id}", {"url": "/eval/tunes/none"}, ("eval:run",)),
    ("POST", "/eval/tunes/{result_id}/cancel", {"url": "/eval/tunes/none/cancel"}, ("eval:admin",)),
    ("POST", "/eval/tunes/{result_id}/promote", {"url": "/eval/tunes/none/promote", "json": {}}, ("eval:admin",)),
    ("GET", "/eval/model", {}, ("eval:run",)),
    ("POST", "/eval/model/rollback", {}, ("eval:admin",)),
    ("POST", "/eval/no-answer/calibrate", {"json": {"sets": ["none"]}}, ("eval:admin",)),
    ("GET", "/eval/no-answer", {}, ("eval:run",)),
    (
        "POST",
        "/eval/answers",
        {"json": {"set": "none", "items": [{"id": "a", "question": "q", "answer": "a", "contexts": ["c"]}]}},
        ("eval:run",),
    ),
    ("GET", "/eval/answers", {}, ("eval:run",)),
    ("GET", "/eval/answers/{result_id}", {"url": "/eval/answers/none"}, ("eval:run",)),
    ("POST", "/eval/answers/{result_id}/cancel", {"url": "/eval/answers/none/cancel"}, ("eval:run",)),
    (
        "POST",
        "/eval/incidents",
        {"json": {"question": "q", "doc_id": "t/none", "reporter": "r"}},
        ("incidents:report",),
    ),
    ("GET", "/eval/incidents", {}, ("incidents:report", "incidents:review")),
    ("GET", "/eval/incidents/{incident_id}", {"url": "/eval/incidents/999"}, ("incidents:report", "incidents:review")),
    (
        "PATCH",
        "/eval/incidents/{incident_id}",
        {"url": "/eval/incidents/999", "json": {"status": "rejected", "reason": "x", "reviewer": "r"}},
        ("incidents:review",),
    ),
    ("GET", "/admin/keys", {}, ("admin",)),
    ("POST", "/admin/keys", {"json": {"name": "n", "roles": ["search"]}}, ("admin",)),
    ("POST", "/admin/keys/{key_id}/rotate", {"url": "/admin/keys/0000000000000000/rotate", "json": {}}, ("admin",)),
    ("DELETE", "/admin/keys/{key_id}", {"url": "/admin/keys/0000000000000000"}, ("admin",)),
    ("GET", "/admin/audit", {}, ("admin",)),
    ("GET", "/metrics", {}, ("metrics",)),  # with metrics_auth on
    ("GET", "/auth/me", {}, ROLES),  # any valid key
]
OPEN = {("GET", "/health/live"), ("GET", "/health/ready")}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with secured_client(settings, metrics_auth=True) as c:
        yield c


@pytest.fixture
def keys(client: TestClient) -> dict[str, str]:
    return {role: make_key(client, role) for role in ROLES}


def _call(client: TestClient, method: str, path: str, request: dict[str, Any], headers: dict[str, str]) -> Any:
    args = {k: v for k, v in request.items() if k != "url"}
    return client.request(method, request.get("url", path), headers=headers, **args)


def test_the_table_covers_every_endpoint(client: TestClient) -> None:
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    routes = {(method.upper(), path) for path, methods in paths.items() for method in methods}
    assert routes == {(m, p) for m, p, _, _ in TABLE} | OPEN


@pytest.mark.parametrize(("method", "path", "request_", "allowed"), TABLE, ids=[f"{m} {p}" for m, p, _, _ in TABLE])
def test_every_role_on_every_endpoint(
    client: TestClient,
    keys: dict[str, str],
    method: str,
    path: str,
    request_: dict[str, Any],
    allowed: tuple[str, ...],
) -> None:
    unauthenticated = []
    for headers in ({}, auth("pl_0123456789abcdef_" + "x" * 43), auth(NO_KEY), {"Authorization": "Bearer nope"}):
        response = _call(client, method, path, request_, headers)
        unauthenticated.append((response.status_code, response.json(), response.headers.get("www-authenticate")))
    # missing, malformed and unknown keys all read the same: nothing says which keys exist
    assert {(s, str(b), w) for s, b, w in unauthenticated} == {
        (401, str(unauthenticated[0][1]), 'Bearer realm="plumbline"')
    }
    outcomes = {}
    for role, token in keys.items():
        outcomes[role] = _call(client, method, path, request_, auth(token)).status_code
    may = {role for role in ROLES if role in allowed or role == "admin"}
    assert {r for r, status in outcomes.items() if status == 403} == set(ROLES) - may, outcomes
    assert all(outcomes[r] not in (401, 403) and outcomes[r] < 500 for r in may), outcomes


def test_health_stays_open_and_the_demo_mode_says_so(settings: Settings) -> None:
    with secured_client(settings) as c:
        assert c.get("/health/live").status_code == 200
        assert c.get("/health/ready").status_code == 200
        assert c.get("/metrics").status_code == 200  # open unless metrics_auth
        assert "x-plumbline-auth" not in c.get("/health/live").headers
    with secured_client(settings, auth="off") as c:
        for response in (c.get("/health/live"), c.post("/search", json={"query": "x"}), c.get("/nope")):
            assert response.headers["x-plumbline-auth"] == "off"
        assert c.post("/search", json={"query": "x"}).status_code == 200


def test_auth_me_says_who_the_key_is(client: TestClient, settings: Settings) -> None:
    bound = client.post(
        "/admin/keys",
        headers=auth(make_key(client, "admin")),
        json={"name": "desk", "roles": ["incidents:report", "search"], "tenant": "acme"},
    ).json()
    me = client.get("/auth/me", headers=auth(bound["key"])).json()
    assert me == {
        "name": "desk",
        "key_id": bound["key_id"],
        "roles": ["search", "incidents:report"],
        "tenant": "acme",
        "auth": "on",
    }
    assert client.get("/auth/me", headers=auth(make_key(client, "admin"))).json()["roles"] == list(ROLES)
    with secured_client(settings.model_copy(update={"data_dir": settings.data_dir / "demo"}), auth="off") as c:
        anonymous = c.get("/auth/me").json()
        assert (anonymous["auth"], anonymous["roles"], anonymous["key_id"]) == ("off", list(ROLES), None)


def test_security_headers_and_cors(settings: Settings) -> None:
    with secured_client(settings) as c:
        response = c.get("/health/live")
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
        assert "access-control-allow-origin" not in c.options("/search", headers=preflight).headers  # off by default
    with secured_client(settings, cors_origins=["https://app.example"]) as c:
        response = c.options("/search", headers={**preflight, "Access-Control-Request-Headers": "x-api-key"})
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        other = c.options("/search", headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_keys_over_the_admin_api_rotate_and_revoke(client: TestClient) -> None:
    admin = auth(make_key(client, "admin"))
    made = client.post("/admin/keys", headers=admin, json={"name": "app", "roles": ["search"], "tenant": "acme"})
    assert made.status_code == 201
    key, key_id = made.json()["key"], made.json()["key_id"]
    assert client.post("/search", headers=auth(key), json={"query": "x"}).status_code == 200
    assert client.post("/search", headers={"Authorization": f"Bearer {key}"}, json={"query": "x"}).status_code == 200
    listed = client.get("/admin/keys", headers=admin).json()
    assert key_id in {k["key_id"] for k in listed}
    assert key not in str(listed)
    assert key.split("_", 2)[2] not in str(listed)  # the whole secret: it may itself hold "_"
    assert all("hash" not in field for k in listed for field in k)
    # rotation with a grace period: both work; without one, only the new
    rotated = client.post(f"/admin/keys/{key_id}/rotate", headers=admin, json={"grace_seconds": 600}).json()["key"]
    assert rotated != key
    for token in (key, rotated):
        assert client.post("/search", headers=auth(token), json={"query": "x"}).status_code == 200
    newest = client.post(f"/admin/keys/{key_id}/rotate", headers=admin, json={"grace_seconds": 0}).json()["key"]
    assert client.post("/search", headers=auth(rotated), json={"query": "x"}).status_code == 401
    assert client.post("/search", headers=auth(newest), json={"query": "x"}).status_code == 200
    # revoked: refused at once on this replica
    assert client.delete(f"/admin/keys/{key_id}", headers=admin).json()["revoked_at"]
    assert client.post("/search", headers=auth(newest), json={"query": "x"}).status_code == 401
    assert client.delete(f"/admin/keys/{key_id}", headers=admin).status_code == 404
    # global powers cannot be bound to a tenant; unknown roles are named
    for roles in (["admin"], ["eval:admin"], ["metrics"]):
        bound = client.post("/admin/keys", headers=admin, json={"name": "x", "roles": roles, "tenant": "acme"})
        assert bound.status_code == 422
        assert "cannot be bound" in bound.json()["detail"]
    unknown = client.post("/admin/keys", headers=admin, json={"name": "x", "roles": ["root"]})
    assert unknown.status_code == 422
    assert "root" in unknown.json()["detail"]


def test_only_the_key_that_started_a_run_or_an_eval_admin_may_cancel_it(settings: Settings) -> None:
    embedder = GatedFakeEmbedder()
    # three slots: the key's two runs at once (one caller group holds at most all but one, and the last is kept
    # for monitoring runs)
    with secured_client(settings, embedder=embedder, max_concurrent_evals=3) as client:
        starter, other, eval_admin, admin = (
            auth(make_key(client, *roles, name=name))
            for name, roles in (
                ("starter", ("eval:run",)),
                ("other", ("eval:run",)),
                ("eval-admin", ("eval:run", "eval:admin")),
                ("admin", ("admin",)),
            )
        )
        assert client.post("/documents", headers=admin, json=docs(("t/a", "", "alpha text"))).status_code == 200
        embedder.hold()  # the runs wait at their first batch of questions (the packaged set has 78 cases)
        try:
            mine, theirs = (
                client.post("/eval/run", headers=starter, json={"set": "handbook", "async": True}).json()["run_id"]
                for _ in range(2)
            )
            refused = client.post(f"/eval/runs/{mine}/cancel", headers=other)
            assert refused.status_code == 403
            assert "started by another key" in refused.json()["detail"]
            assert "'eval:admin'" in refused.json()["detail"]
            assert client.get(f"/eval/runs/{mine}", headers=other).json()["cancel_requested"] is False
            assert client.post(f"/eval/runs/{mine}/cancel", headers=starter).status_code == 202
            for key in (eval_admin, admin):  # eval:admin, and admin, which implies it
                cancelled = client.post(f"/eval/runs/{theirs}/cancel", headers=key)
                assert (cancelled.status_code, cancelled.json()["cancel_requested"]) == (202, True)
        finally:
            embedder.release()
        client.app.state.runtime.evals.wait(30)  # type: ignore[attr-defined]
        ended = [client.get(f"/eval/runs/{r}", headers=starter).json()["status"] for r in (mine, theirs)]
        assert ended == ["cancelled", "cancelled"]
        cancels = client.get("/admin/audit", headers=admin, params={"action": "eval.cancel"}).json()["entries"]
        assert [e["actor"].split(" ")[0] for e in cancels] == ["admin", "eval-admin", "starter"]


def test_every_write_is_in_the_audit_log_with_who_and_when(client: TestClient) -> None:
    admin, ingest, review = (auth(make_key(client, r, name=f"{r}-key")) for r in ("admin", "ingest", "admin"))
    assert client.post("/documents", headers=ingest, json=docs(("t/a", "acme", "alpha text"))).status_code == 200
    assert client.delete("/documents/t/a", headers=ingest).status_code == 200
    jsonl = '{"id": "a", "question": "q", "relevant": [{"doc_id": "t/a"}]}\n'
    assert client.put("/eval/sets/mine", headers=admin, content=jsonl).status_code == 200
    made = client.post("/admin/keys", headers=review, json={"name": "bot", "roles": ["search"]}).json()
    assert client.delete(f"/admin/keys/{made['key_id']}", headers=admin).status_code == 200
    entries = client.get("/admin/audit", headers=admin).json()["entries"]
    assert [(e["action"], e["target"]) for e in entries] == [
        ("key.revoke", made["key_id"]),
        ("key.create", made["key_id"]),
        ("set.put", "mine"),
        ("documents.delete", "t/a"),
        ("documents.ingest", "t/a"),
    ]
    assert entries[-1]["actor"].startswith("ingest-key (")
    assert entries[-1]["detail"]["documents"] == ["t/a"]
    assert all(e["at"].endswith("Z") and e["request_id"] for e in entries)
    page = client.get("/admin/audit", headers=admin, params={"limit": 2}).json()
    rest = client.get("/admin/audit", headers=admin, params={"limit": 10, "before": page["next_before"]}).json()
    assert [e["id"] for e in page["entries"] + rest["entries"]] == [e["id"] for e in entries]
    only = client.get("/admin/audit", headers=admin, params={"action": "set.put"}).json()["entries"]
    assert [e["target"] for e in only] == ["mine"]
