"""Trust, round two: with auth off only the loopback host names (and the bound host) are answered, against DNS
rebinding; refused requests (401, 403) are audited, throttled, with the key id and never the secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import accepted_hosts, create_app, host_name
from service.runtime import Components
from service.settings import Settings
from service.state.audit import RefusalThrottle
from tests.fakes import FakeEmbedder
from tests.service.api.access_helpers import auth, make_key, secured_client

SECRET = "S" * 43
BAD_KEY = f"pl_0123456789abcdef_{SECRET}"  # well formed, names a key id nobody holds


def _client(base: Settings, bound_host: str | None = None, **update: Any) -> TestClient:
    app = create_app(
        base.model_copy(update=update), components=Components(embedder=lambda _: FakeEmbedder()), bound_host=bound_host
    )
    return TestClient(app)


@pytest.fixture
def demo(settings: Settings) -> Iterator[TestClient]:
    """Auth off and no allowed hosts set: the demo as `make run` serves it."""
    with _client(settings, auth="off", allowed_hosts=None) as c:
        yield c


def test_with_auth_off_a_foreign_host_is_refused_saying_which_hosts_are_accepted(demo: TestClient) -> None:
    for host in ("evil.example:8000", "evil.example", "127.0.0.1.evil.example", ""):
        answer = demo.get("/health/live", headers={"Host": host})
        assert answer.status_code == 421, (host, answer.text)
        detail = answer.json()["detail"]
        for name in ("localhost", "127.0.0.1", "[::1]", "PLUMBLINE_ALLOWED_HOSTS"):
            assert name in detail, detail
        assert answer.headers["X-Content-Type-Options"] == "nosniff"  # still stamped by Observe
    refused = demo.post("/search", headers={"Host": "evil.example:8000"}, json={"query": "vpn"})
    assert refused.status_code == 421


def test_with_auth_off_the_loopback_names_are_served_on_any_port(demo: TestClient) -> None:
    for host in ("127.0.0.1:8000", "localhost", "localhost:8000", "LOCALHOST.", "[::1]:8000", "127.0.0.1"):
        assert demo.get("/health/live", headers={"Host": host}).status_code == 200, host


def test_the_bound_host_is_accepted_too_but_not_a_wildcard_address(settings: Settings) -> None:
    off = settings.model_copy(update={"auth": "off", "allowed_hosts": None})
    assert accepted_hosts(off, "plumbline.lan") == {"localhost", "127.0.0.1", "[::1]", "plumbline.lan"}
    assert accepted_hosts(off, "0.0.0.0") == accepted_hosts(off, "::") == {"localhost", "127.0.0.1", "[::1]"}
    assert accepted_hosts(off, "fd00::7") == {"localhost", "127.0.0.1", "[::1]", "[fd00::7]"}
    with _client(settings, "plumbline.lan", auth="off", allowed_hosts=None) as c:
        assert c.get("/health/live", headers={"Host": "plumbline.lan:8000"}).status_code == 200
        assert c.get("/health/live", headers={"Host": "evil.example"}).status_code == 421


def test_with_auth_on_the_host_is_left_alone_unless_the_setting_is_set(settings: Settings) -> None:
    assert accepted_hosts(settings.model_copy(update={"auth": "on", "allowed_hosts": None}), None) is None
    with _client(settings, auth="on", allowed_hosts=None) as c:
        assert c.app.state.runtime.wait(timeout=60)  # type: ignore[attr-defined]
        assert c.get("/health/live", headers={"Host": "ingress.example"}).status_code == 200
        assert c.get("/documents", headers={"Host": "ingress.example"}).status_code == 401
    with _client(settings, auth="on", allowed_hosts=["search.corp.example", "*.lan"]) as c:
        for host in ("search.corp.example", "search.corp.example:443", "a.b.lan"):
            assert c.get("/health/live", headers={"Host": host}).status_code == 200, host
        refused = c.get("/health/live", headers={"Host": "localhost"})
        assert refused.status_code == 421
        assert "search.corp.example" in refused.json()["detail"]
        assert "PLUMBLINE_ALLOWED_HOSTS" in refused.json()["detail"]
    with _client(settings, auth="off", allowed_hosts=["*"]) as c:
        assert c.get("/health/live", headers={"Host": "anything.example"}).status_code == 200


def test_host_names_are_read_without_port_case_or_final_dot() -> None:
    assert host_name("Example.COM:8080") == "example.com"
    assert host_name("localhost.") == "localhost"
    assert host_name("[::1]:8000") == "[::1]"
    assert host_name("::1", entry=True) == "[::1]"
    assert host_name("evil.example:80:80") == "evil.example:80"  # never a loopback name


def _denials(client: TestClient, admin: str) -> list[dict[str, Any]]:
    page = client.get("/admin/audit", params={"action": "auth.denied"}, headers=auth(admin))
    assert page.status_code == 200, page.text
    entries: list[dict[str, Any]] = page.json()["entries"]
    return entries


def _failures(client: TestClient, status: int) -> float:
    registry = client.app.state.registry  # type: ignore[attr-defined]
    return registry.get_sample_value("plumbline_auth_failures_total", {"status": str(status)}) or 0.0


def test_a_bad_key_is_audited_with_its_key_id_and_never_its_secret(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = make_key(c, "admin")
        answer = c.get("/documents", headers={**auth(BAD_KEY), "X-Request-ID": "req-bad-key"})
        assert answer.status_code == 401
        assert c.get("/eval/runs", headers={"Authorization": "Bearer not-a-key"}).status_code == 401
        rows = _denials(c, admin)
        assert len(rows) == 2, rows
        malformed, bad = rows
        assert bad["action"] == "auth.denied"
        assert bad["target"] == "GET /documents"
        assert bad["request_id"] == "req-bad-key"
        assert bad["detail"]["status"] == 401
        assert bad["detail"]["key_id"] == "0123456789abcdef"
        assert bad["detail"]["client"] == "testclient"
        assert malformed["detail"]["key_id"] is None
        assert malformed["detail"]["reason"] == "a malformed key"
        assert SECRET not in json.dumps(rows)
        assert "not-a-key" not in json.dumps(rows)
        assert _failures(c, 401) == 2


def test_a_burst_of_bad_keys_writes_a_bounded_number_of_rows_and_counts_every_one(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = make_key(c, "admin")
        for n in range(50):
            key = f"pl_{n:016x}_{SECRET}"  # a different key id each time: the address is what is throttled
            assert c.get("/documents", headers=auth(key)).status_code == 401
        rows = _denials(c, admin)
        assert 1 <= len(rows) <= 3, rows
        assert _failures(c, 401) == 50


def test_a_key_without_the_role_is_audited_naming_the_role_it_lacks(settings: Settings) -> None:
    with secured_client(settings) as c:
        admin = make_key(c, "admin")
        searcher = make_key(c, "search", name="reader")
        answer = c.post("/documents", headers=auth(searcher), json={"documents": []})
        assert answer.status_code == 403
        rows = _denials(c, admin)
        assert len(rows) == 1, rows
        row = rows[0]
        key_id = searcher.split("_")[1]
        assert row["actor"] == f"reader ({key_id})"
        assert row["target"] == "POST /documents"
        assert row["detail"]["status"] == 403
        assert row["detail"]["key_id"] == key_id
        assert row["detail"]["missing_role"] == ["ingest"]
        assert searcher.split("_")[2] not in json.dumps(rows)
        bound = make_key(c, "search", tenant="acme", name="acme-search")
        other = c.post("/search", headers=auth(bound), json={"query": "vpn", "filters": {"tenant": "larkspur"}})
        assert other.status_code == 403
        tenant_row = _denials(c, admin)[0]
        assert tenant_row["tenant"] == "acme"
        assert tenant_row["detail"]["missing_role"] is None
        assert "bound to tenant" in tenant_row["detail"]["reason"]
        assert _failures(c, 403) == 2


def test_the_throttle_writes_one_row_per_caller_a_window_and_carries_the_count() -> None:
    now = [0.0]
    throttle = RefusalThrottle(window=60, rows=3, clock=lambda: now[0])
    assert throttle.admit("address 10.0.0.1", 401, "GET /documents", "a" * 16) == {"suppressed": 0}
    for _ in range(9):
        assert throttle.admit("address 10.0.0.1", 401, "GET /documents", "b" * 16) is None
    assert throttle.admit("address 10.0.0.1", 401, "GET /search", None) == {"suppressed": 0}
    assert throttle.admit("address 10.0.0.2", 401, "GET /documents", None) == {"suppressed": 0}
    assert throttle.admit("address 10.0.0.3", 401, "GET /documents", None) is None  # over the cap of 3 rows
    now[0] = 61.0
    again = throttle.admit("address 10.0.0.1", 401, "GET /documents", None)
    assert again == {"suppressed": 9, "suppressed_key_ids": ["b" * 16], "suppressed_elsewhere": 1}
