"""Trust, round two: per-caller rate limits (`PLUMBLINE_RATE_LIMIT` per key, `PLUMBLINE_RATE_LIMIT_PER_ADDRESS` for
callers without one), checked with the key before the body is read: past the limit a 429 with `Retry-After`; the
health probes never count."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.fakes import FakeEmbedder
from tests.service.api.access_helpers import auth, make_key, secured_client


def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    retry = int(answer.headers["Retry-After"])
    assert 1 <= retry <= 60
    detail = answer.json()["detail"]
    assert "3 per 1 minute" in detail, detail
    assert f"retry after {retry} s" in detail, detail


def test_the_request_past_a_keys_limit_gets_429_with_retry_after_and_other_keys_go_on(settings: Settings) -> None:
    with secured_client(settings, rate_limit="3/minute") as client:
        first, second = make_key(client, "search", name="first"), make_key(client, "search", name="second")
        for _ in range(3):
            assert client.get("/documents", headers=auth(first)).status_code == 200
        _refused(client.get("/documents", headers=auth(first)))
        # refused before the body is read or validated: an invalid body still gets the 429
        _refused(client.post("/search", headers=auth(first), content=b"{not json"))
        assert client.get("/documents", headers=auth(second)).status_code == 200  # another key is not affected
        for _ in range(10):  # the probes never count, and are never refused
            assert client.get("/health/live").status_code == 200
            assert client.get("/health/ready").status_code == 200
        # a refusal for want of a key is a 401, not a 429: the limit counts a key's requests
        assert client.get("/documents").status_code == 401


def test_callers_without_a_key_are_limited_by_address_when_asked(settings: Settings) -> None:
    limited = settings.model_copy(update={"auth": "off", "rate_limit_per_address": "3/minute"})
    app = create_app(limited, components=Components(embedder=lambda _: FakeEmbedder()))
    with TestClient(app) as client:
        assert app.state.runtime.wait(timeout=60)
        for _ in range(3):
            assert client.get("/documents").status_code == 200
        _refused(client.get("/documents"))
        assert client.get("/health/live").status_code == 200
        other = TestClient(app, client=("10.0.0.2", 5000))  # another address has its own window
        assert other.get("/documents").status_code == 200


def test_the_default_limits_a_key_and_not_an_address_and_empty_turns_it_off() -> None:
    assert Settings.model_fields["rate_limit"].default == "6000/minute"
    assert Settings.model_fields["rate_limit_per_address"].default is None
    assert Settings(rate_limit="").rate_limit is None
    assert Settings(rate_limit="10/second;600/minute").rate_limit == "10/second;600/minute"
    with pytest.raises(ValidationError, match="not a rate limit"):
        Settings(rate_limit="lots")
