"""Bodies a caller may not send: a key-less request is refused from its headers, before one byte of its body is
read; a body past its limit is refused as soon as the bytes read pass it, chunked or not; and the routes whose
bodies are small (search, incident reports and reviews) have limits of their own, far under an ingest batch's.

The ASGI app is driven directly where it matters how much of a body was read: `receive` counts the chunks the app
pulled, which an HTTP client cannot see."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from service.access.principals import UNAUTHENTICATED
from service.api.app import ROUTE_LIMITS
from service.settings import Settings
from tests.server import ServerProcess
from tests.service.api.access_helpers import auth, docs, make_key, secured_client

CHUNK = 64 * 1024
CHUNKS = 100  # 6.4 MB in all: 32 times the tests' max_request_bytes (200,000)


class Exchange:
    """One request driven through the ASGI app: its body sent in `chunks` without a Content-Length (a chunked
    upload), and what the app pulled and answered."""

    def __init__(self, method: str, path: str, headers: dict[str, str], chunks: list[bytes]) -> None:
        self.method, self.path, self.headers, self.chunks = method, path, headers, chunks
        self.pulled = 0
        self.sent: list[Message] = []

    async def __call__(self, app: Any) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": self.method,
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in self.headers.items()],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        await app(scope, self.receive, self.send)

    async def receive(self) -> Message:
        if self.pulled >= len(self.chunks):
            return {"type": "http.disconnect"}
        self.pulled += 1
        return {
            "type": "http.request",
            "body": self.chunks[self.pulled - 1],
            "more_body": self.pulled < len(self.chunks),
        }

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(next(m["status"] for m in self.sent if m["type"] == "http.response.start"))

    @property
    def json(self) -> Any:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"))

    @property
    def response_headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode().lower(): v.decode() for k, v in start["headers"]}


def drive(client: TestClient, exchange: Exchange) -> Exchange:
    client.portal.call(exchange, client.app)  # type: ignore[union-attr]
    return exchange


def big_body(prefix: str) -> list[bytes]:
    """A JSON-looking body of `CHUNKS` chunks: `prefix`, then a string that never ends."""
    head = prefix.encode()
    return [head + b"x" * (CHUNK - len(head))] + [b"x" * CHUNK] * (CHUNKS - 1)


JSON = {"content-type": "application/json"}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with secured_client(settings) as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path", "prefix"),
    [
        ("POST", "/search", '{"query": "'),
        ("POST", "/documents", '{"documents": [{"id": "a", "text": "'),
        ("PUT", "/eval/sets/mine", '{"id": "a", "question": "'),
        ("POST", "/eval/incidents", '{"question": "'),
        ("PATCH", "/eval/incidents/1", '{"note": "'),
    ],
)
def test_a_request_without_a_key_is_refused_before_its_body_is_read(
    client: TestClient, method: str, path: str, prefix: str
) -> None:
    for headers in ({}, auth("pl_0123456789abcdef_" + "x" * 43), {"Authorization": "Bearer nope"}):
        exchange = drive(client, Exchange(method, path, {**JSON, **headers}, big_body(prefix)))
        assert exchange.status == 401
        assert exchange.pulled == 0, f"{exchange.pulled} chunks of the body were read before the 401"
        # the very 401 the dependency gives: the same words, the same challenge, the request id
        assert exchange.json == {"detail": UNAUTHENTICATED}
        assert exchange.response_headers["www-authenticate"] == 'Bearer realm="plumbline"'
        assert exchange.response_headers["x-request-id"]
    # with a key, the same body is read (and refused at its limit: see below)
    exchange = drive(client, Exchange(method, path, {**JSON, **auth(make_key(client, "admin"))}, big_body(prefix)))
    assert exchange.status == 413
    assert exchange.pulled > 0


def test_a_key_less_401_is_counted_under_its_endpoint(client: TestClient) -> None:
    drive(client, Exchange("POST", "/search", JSON, big_body('{"query": "')))
    scrape = client.get("/metrics").text
    line = next(
        line
        for line in scrape.splitlines()
        if line.startswith("plumbline_http_requests_total") and 'endpoint="/search"' in line and 'status="401"' in line
    )
    assert float(line.rsplit(" ", 1)[1]) >= 1


def test_open_routes_and_a_still_unknown_path_need_no_key(client: TestClient) -> None:
    assert client.get("/health/live").status_code == 200
    assert client.get("/metrics").status_code == 200  # open unless metrics_auth
    assert client.get("/").status_code == 200
    assert client.post("/nowhere", content=b"{}").status_code == 404
    assert client.get("/search").status_code == 405


def test_a_chunked_body_past_the_limit_is_refused_as_soon_as_it_passes(client: TestClient, settings: Settings) -> None:
    ingest = auth(make_key(client, "ingest"))
    exchange = drive(client, Exchange("POST", "/documents", {**JSON, **ingest}, big_body('{"documents": [')))
    assert exchange.status == 413
    assert f"the limit is {settings.max_request_bytes}" in exchange.json["detail"]
    assert exchange.pulled == settings.max_request_bytes // CHUNK + 1  # the chunk that passed it, and no more
    assert exchange.response_headers["x-request-id"]
    # a valid batch cut off at the limit is not a valid batch the handler took: nothing was ingested
    batch = json.dumps(docs(*((f"t/{i}", "", "alpha " * 2000) for i in range(20)))).encode()
    assert len(batch) > settings.max_request_bytes
    pieces = [batch[i : i + 8192] for i in range(0, len(batch), 8192)]
    exchange = drive(client, Exchange("POST", "/documents", {**JSON, **ingest}, pieces))
    assert exchange.status == 413
    assert exchange.pulled < len(pieces)
    assert client.get("/documents", headers=ingest).json()["documents"] == []
    # under the limit, chunked, it is read whole and taken
    small = json.dumps(docs(("t/a", "", "alpha text"))).encode()
    exchange = drive(client, Exchange("POST", "/documents", {**JSON, **ingest}, [small[:10], small[10:]]))
    assert exchange.status == 200, exchange.json


def test_small_routes_have_limits_of_their_own(settings: Settings) -> None:
    defaults = Settings(data_dir=settings.data_dir)
    for name in set(ROUTE_LIMITS.values()):
        assert getattr(defaults, name) * 32 <= defaults.max_request_bytes, name
    limits = {"max_search_request_bytes": 20_000, "max_incident_request_bytes": 30_000}
    with secured_client(settings, **limits) as c:
        openapi = c.app.openapi()["paths"]  # type: ignore[attr-defined]
        paths = {(method.upper(), path) for path, methods in openapi.items() for method in methods}
        assert set(ROUTE_LIMITS) <= paths  # every limit names a real route
        admin = auth(make_key(c, "admin"))
        ids = [f"doc-{i:04d}" + "-" * 40 for i in range(500)]  # about 27 KB of filters: over 20,000, under 200,000
        over = c.post("/search", headers=admin, json={"query": "alpha", "filters": {"doc_ids": ids}})
        assert over.status_code == 413
        assert "the limit is 20000" in over.json()["detail"]
        assert (
            c.post("/search", headers=admin, json={"query": "alpha", "filters": {"doc_ids": ids[:100]}}).status_code
            == 200
        )
        # chunked, too
        exchange = drive(c, Exchange("POST", "/search", {**JSON, **admin}, big_body('{"query": "')))
        assert (exchange.status, exchange.pulled) == (413, 1)
        long = {"question": "q", "doc_id": "t/a", "reporter": "r", "answer": "a" * 20_000, "note": "n" * 20_000}
        report = c.post("/eval/incidents", headers=admin, json=long)
        assert report.status_code == 413
        assert "the limit is 30000" in report.json()["detail"]
        review = c.patch("/eval/incidents/1", headers=admin, json={"note": "n" * 40_000, "reviewer": "r"})
        assert review.status_code == 413
        # an ingest batch may still be as large as max_request_bytes
        batch = docs(*((f"t/{i}", "", "alpha " * 2500) for i in range(10)))
        assert 20_000 * 5 < len(json.dumps(batch)) < settings.max_request_bytes
        assert c.post("/documents", headers=admin, json=batch).status_code == 200


@pytest.mark.process
def test_a_server_answers_a_key_less_upload_before_it_is_sent(tmp_path: Path) -> None:
    """Over real HTTP: the 401 comes back while the client has sent its headers and one chunk of a body it says
    will be 60 MB; the server never waits for the rest."""
    with ServerProcess(tmp_path / "data", env={"PLUMBLINE_AUTH": "on"}) as server:
        port = int(server.url.rsplit(":", 1)[1])
        for framing in ("Content-Length: 62914560", "Transfer-Encoding: chunked"):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                head = "POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # a host the suite allows (tests/conftest.py)
                head += f"Content-Type: application/json\r\n{framing}\r\n\r\n"
                chunk = b'{"documents": [{"id": "a", "text": "' + b"x" * 65_000
                body = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if "chunked" in framing else chunk
                sock.sendall(head.encode() + body)
                answer = read_response(sock)
            assert answer.startswith("HTTP/1.1 401"), answer[:200]
            assert "a valid API key is required" in answer


def read_response(sock: socket.socket) -> str:
    """One HTTP response, whole: its head, then as many bytes of body as its Content-Length says."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        piece = sock.recv(65_536)
        if not piece:
            break
        data += piece
    return data.decode("latin-1")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0
