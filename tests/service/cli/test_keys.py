"""`plumbline keys`: create, list, rotate and revoke keys in the state store and in a secrets file; what it prints
authenticates, and only hashes are written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from service.access.keys import Authenticator, read_key_file
from service.access.principals import local_cli
from service.cli.main import EXIT_BAD_INPUT, EXIT_OK, main
from service.errors import StoreUnavailable, Unauthenticated
from service.state import open_state


def _issue(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == EXIT_OK
    out = capsys.readouterr().out.strip()
    assert out.startswith("pl_")
    return out


def test_keys_in_the_state_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    (tmp_path / "data").mkdir()
    token = _issue(capsys, "keys", "create", "support-bot", "--role", "incidents:report", "--tenant", "acme", *data)
    assert main(["keys", "list", "--json", *data]) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)
    assert [(k["name"], k["roles"], k["tenant"]) for k in listed] == [("support-bot", ["incidents:report"], "acme")]
    assert token not in json.dumps(listed)
    key_id = listed[0]["key_id"]
    state = open_state(f"sqlite:///{tmp_path / 'data' / 'state.db'}")
    try:
        auth = Authenticator(state.keys, None)
        assert auth.authenticate(token).tenant == "acme"
        new = _issue(capsys, "keys", "rotate", key_id, "--grace", "0", *data)
        auth.forget(key_id)
        assert auth.authenticate(new).name == "support-bot"
        with pytest.raises(Unauthenticated):
            auth.authenticate(token)
        assert main(["keys", "revoke", key_id, *data]) == EXIT_OK
        auth.forget(key_id)
        with pytest.raises(Unauthenticated):
            auth.authenticate(new)
        actions = [(e.action, e.target, e.target_tenant) for e in state.audit.page()]
        assert actions == [(a, key_id, "acme") for a in ("key.revoke", "key.rotate", "key.create")]
        assert state.audit.page()[0].actor.startswith("local CLI (")
    finally:
        state.close()
    # a tenant-bound admin is refused with the reason, and nothing is written
    assert main(["keys", "create", "x", "--role", "admin", "--tenant", "acme", *data]) == EXIT_BAD_INPUT
    assert "cannot be bound" in capsys.readouterr().err


def test_keys_in_a_secrets_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secrets = tmp_path / "keys.json"
    target = ["--secrets-file", str(secrets)]
    token = _issue(capsys, "keys", "create", "ci", "--role", "eval:run", *target)
    other = _issue(capsys, "keys", "create", "ops", "--role", "admin", *target)
    assert token not in secrets.read_text()
    assert token.split("_", 2)[2] not in secrets.read_text()
    auth = Authenticator(None, secrets)
    assert auth.authenticate(token).roles == frozenset({"eval:run"})
    key_id = read_key_file(secrets)[0].key_id
    rotated = _issue(capsys, "keys", "rotate", key_id, *target)
    assert auth.authenticate(rotated).name == "ci"  # the file is read again when it changes
    with pytest.raises(Unauthenticated):
        auth.authenticate(token)
    assert main(["keys", "revoke", key_id, *target]) == EXIT_OK
    with pytest.raises(Unauthenticated):
        auth.authenticate(rotated)
    assert auth.authenticate(other).name == "ops"
    assert main(["keys", "revoke", "0000000000000000", *target]) == EXIT_BAD_INPUT


@pytest.mark.engine
def test_local_cli_writes_are_audited(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("---\ntenant: acme\n---\n# Refunds\n\nWithin 30 days.\n", encoding="utf-8")
    data = tmp_path / "data"
    assert main(["ingest", str(folder), "--data-dir", str(data)]) == EXIT_OK
    capsys.readouterr()
    state = open_state(f"sqlite:///{data / 'state.db'}")
    try:
        [entry] = state.audit.page()
    finally:
        state.close()
    assert (entry.action, entry.target, entry.detail["documents"]) == ("documents.ingest", str(folder), 1)
    assert entry.actor.startswith("local CLI (")


def test_a_broken_secrets_file_keeps_its_last_good_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secrets = tmp_path / "keys.json"
    secrets.write_text('[{"key_id": "0123456789abcdef", "name": "x", "sha256": "' + "0" * 64 + '", "roles": {}}]')
    with pytest.raises(StoreUnavailable, match="the service log says why") as refused:
        Authenticator(None, secrets).authenticate("pl_0123456789abcdef_" + "a" * 43)
    assert str(secrets) not in str(refused.value)
    token = _issue(capsys, "keys", "create", "ci", "--role", "search", "--secrets-file", str(tmp_path / "good.json"))
    auth = Authenticator(None, tmp_path / "good.json")
    assert auth.authenticate(token).name == "ci"
    (tmp_path / "good.json").write_text('[{"tenant": 5}]')  # a bad edit: the keys last read stay in use
    assert auth.authenticate(token).name == "ci"


def test_a_user_without_a_name_is_named_by_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_passwd_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 1000660000")

    monkeypatch.setattr("getpass.getuser", no_passwd_entry)
    assert local_cli().actor.startswith(f"local CLI (uid {os.getuid()}@")
