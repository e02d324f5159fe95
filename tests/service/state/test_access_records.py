"""The API keys and the audit log, on SQLite and on a real PostgreSQL server: hashes only, rotation with a grace
period, revocation, and an append-only log read newest first a page at a time."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from service.access.keys import Authenticator, create_key, hash_token, revoke_key, rotate_key
from service.access.principals import LOCAL
from service.errors import NotFound, Unauthenticated
from service.state import open_state
from service.state import schema as t


def test_keys_are_stored_as_hashes_and_rotate_and_revoke(state_url: str) -> None:
    state = open_state(state_url)
    try:
        key, token = create_key(state.keys, "ci", ["eval:run", "search"], None, LOCAL)
        with state.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(select(t.api_keys))]
        assert len(rows) == 1
        assert token not in json.dumps(rows)
        assert token.split("_", 2)[2] not in json.dumps(rows)
        assert rows[0]["secret_hash"] == hash_token(token)
        assert key.roles == ("search", "eval:run")  # canonical order
        auth = Authenticator(state.keys, None)
        assert auth.authenticate(token).roles == frozenset({"search", "eval:run"})
        graced = rotate_key(auth, key.key_id, 600)
        assert auth.authenticate(token).name == auth.authenticate(graced).name == "ci"
        newest = rotate_key(auth, key.key_id, 0)
        with pytest.raises(Unauthenticated):
            auth.authenticate(graced)
        assert auth.authenticate(newest).key_id == key.key_id
        revoke_key(auth, key.key_id)
        with pytest.raises(Unauthenticated):
            auth.authenticate(newest)
        with pytest.raises(NotFound):
            revoke_key(auth, key.key_id)
        with pytest.raises(NotFound):
            rotate_key(auth, key.key_id, 0)
        assert state.keys.all()[0].revoked_at is not None
    finally:
        state.close()


def test_another_replica_sees_a_revocation_within_the_cache_time(state_url: str) -> None:
    first, second = open_state(state_url), open_state(state_url)
    try:
        key, token = create_key(first.keys, "app", ["search"], "acme", LOCAL)
        other = Authenticator(second.keys, None)
        assert other.authenticate(token).tenant == "acme"
        revoke_key(Authenticator(first.keys, None), key.key_id)
        other.forget(key.key_id)  # what CACHE_SECONDS does by itself
        with pytest.raises(Unauthenticated):
            other.authenticate(token)
    finally:
        first.close()
        second.close()


def test_the_audit_log_pages_newest_first(state_url: str) -> None:
    state = open_state(state_url)
    try:
        ids = [
            state.audit.append(f"actor-{i % 2}", None, "documents.ingest", f"doc-{i}", {"n": i}, f"r{i}")
            for i in range(5)
        ]
        assert ids == sorted(ids)
        page = state.audit.page(limit=2)
        assert [e.target for e in page] == ["doc-4", "doc-3"]
        rest = state.audit.page(before=page[-1].id, limit=10)
        assert [e.target for e in rest] == ["doc-2", "doc-1", "doc-0"]
        assert [e.target for e in state.audit.page(actor="actor-1")] == ["doc-3", "doc-1"]
        assert state.audit.page(action="key.create") == []
        assert rest[-1].detail == {"n": 0}
        assert rest[-1].request_id == "r0"
        assert state.audit.page(since="2999-01-01T00:00:00.000000Z") == []
        # the longest actor a key makes and the longest X-Request-ID the service accepts fit: no entry is lost
        long_actor, long_request = "n" * 160 + " (0123456789abcdef)", "r" * 128
        state.audit.append(long_actor, "t" * 200, "key.create", "x", {}, long_request)
        assert state.audit.page(limit=1)[0].actor == long_actor
    finally:
        state.close()
