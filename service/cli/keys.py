"""`plumbline keys create|list|rotate|revoke`: API keys in the state store, in a secrets file, or through a running
service's /admin/keys.

plumbline keys create NAME --role search [--role ingest ...] [--tenant T]   prints the key once
plumbline keys list
plumbline keys rotate KEY_ID [--grace SECONDS]                             prints the new key once
plumbline keys revoke KEY_ID

Where: the state store of the settings (`--data-dir`, or `PLUMBLINE_STATE_URL`; the server may be running, the
data directory's lock is not needed for it), `--secrets-file F` (the JSON list `PLUMBLINE_API_KEYS_FILE` names:
only hashes are written), or `--url U` (a running service, with an admin key in `PLUMBLINE_API_KEY`). Changes to
the state store are written to the audit log as made by "local CLI (<user>@<host>)".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from service.access.keys import (
    Authenticator,
    create_key,
    file_entry,
    hash_token,
    new_key,
    new_secret,
    read_key_file,
    revoke_key,
    rotate_key,
)
from service.access.principals import ROLES, local_cli
from service.errors import NotFound, PlumblineError
from service.infra.files import write_atomic
from service.state.audit import Pending
from service.state.keys import ApiKey
from service.state.schema import now_iso


def add_parser(sub: Any) -> None:
    keys = sub.add_parser("keys", help="create, list, rotate and revoke API keys").add_subparsers(required=True)
    create = keys.add_parser("create", help="a new key with roles, optionally bound to a tenant (printed once)")
    _where(create)
    create.add_argument("name", help="who uses it, e.g. ci or support-bot")
    create.add_argument("--role", action="append", required=True, choices=ROLES, dest="roles")
    create.add_argument("--tenant", help="confine the key to this tenant")
    create.set_defaults(func=_create)
    listing = keys.add_parser("list", help="every key, without secrets")
    _where(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    rotate = keys.add_parser("rotate", help="a new secret for a key (printed once)")
    _where(rotate)
    rotate.add_argument("key_id")
    rotate.add_argument(
        "--grace", type=float, default=3600, help="seconds the old secret keeps working (state store and --url only)"
    )
    rotate.set_defaults(func=_rotate)
    revoke = keys.add_parser("revoke", help="revoke a key at once")
    _where(revoke)
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_revoke)


def _where(p: argparse.ArgumentParser) -> None:
    target = p.add_mutually_exclusive_group()
    target.add_argument("--data-dir", type=Path, help="the state store of this data directory")
    target.add_argument("--secrets-file", type=Path, help="a JSON keys file (PLUMBLINE_API_KEYS_FILE)")
    target.add_argument("--url", help="a running Plumbline, with an admin key in PLUMBLINE_API_KEY")


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[tuple[Authenticator, Any]]:
    from service.settings import Settings
    from service.state import open_state

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    state = open_state(settings.state_store_url)
    try:
        yield Authenticator(state.keys, None), state
    finally:
        state.close()


def _remote(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    from service.cli.remote import no_delay_client

    with no_delay_client(timeout=60) as client:
        response = client.request(method, f"{args.url.rstrip('/')}/admin/keys{path}", json=body)
    if response.status_code >= 400:
        raise PlumblineError(f"{args.url} answered {response.status_code}: {response.text[:500]}")
    return response.json()


def _file_keys(path: Path) -> list[ApiKey]:
    return read_key_file(path) if path.exists() else []


def _write_file(path: Path, keys: list[ApiKey]) -> None:
    write_atomic(path, json.dumps([file_entry(k) for k in keys], indent=1) + "\n")


def _issued(key: dict[str, Any], token: str) -> int:
    print(token)
    roles = ", ".join(key["roles"])
    bound = f", bound to tenant {key['tenant']!r}" if key.get("tenant") else ""
    print(f"key {key['key_id']} ({key['name']}: {roles}{bound}); shown once, store it now", file=sys.stderr)
    return 0


def _create(args: argparse.Namespace) -> int:
    if args.url:
        out = _remote(args, "POST", "", {"name": args.name, "roles": args.roles, "tenant": args.tenant})
        return _issued(out, out["key"])
    if args.secrets_file:
        from service.access.keys import check_key_fields

        key_id, token = new_key()
        roles = check_key_fields(args.name, args.roles, args.tenant)
        key = ApiKey(key_id, args.name, roles, args.tenant, hash_token(token), now_iso(), "file", "file")
        _write_file(args.secrets_file, [*_file_keys(args.secrets_file), key])
        return _issued(file_entry(key), token)
    with _store(args) as (_, state):
        me = local_cli()
        with state.audit.auditing(Pending(me.actor, None, "key.create")):  # with the key's row
            key, token = create_key(state.keys, args.name, args.roles, args.tenant, me)
    return _issued(file_entry(key), token)


def _list(args: argparse.Namespace) -> int:
    if args.url:
        rows = _remote(args, "GET", "")
    elif args.secrets_file:
        rows = [{**file_entry(k), "source": "file", "revoked_at": None} for k in _file_keys(args.secrets_file)]
    else:
        with _store(args) as (auth, _):
            rows = [{**file_entry(k), "source": k.source, "revoked_at": k.revoked_at} for k in auth.all_keys()]
    rows = [{k: v for k, v in row.items() if k != "sha256"} for row in rows]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        state = f"revoked {r['revoked_at']}" if r.get("revoked_at") else "live"
        tenant = f" tenant={r['tenant']}" if r.get("tenant") else ""
        print(f"{r['key_id']}  {r['name']}  {','.join(r['roles'])}{tenant}  {state}")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    if args.url:
        out = _remote(args, "POST", f"/{args.key_id}/rotate", {"grace_seconds": args.grace})
        return _issued(out, out["key"])
    if args.secrets_file:
        keys = _file_keys(args.secrets_file)
        old = _in_file(keys, args.key_id)
        token = new_secret(args.key_id)
        new = replace(old, secret_hash=hash_token(token))
        _write_file(args.secrets_file, [new if k.key_id == args.key_id else k for k in keys])
        return _issued(file_entry(new), token)
    with _store(args) as (auth, state):
        entry = Pending(local_cli().actor, None, "key.rotate", args.key_id, {"grace_seconds": args.grace})
        with state.audit.auditing(entry):  # with the new hash
            token = rotate_key(auth, args.key_id, args.grace)
        key = state.keys.get(args.key_id)
    return _issued(file_entry(key), token)


def _revoke(args: argparse.Namespace) -> int:
    if args.url:
        _remote(args, "DELETE", f"/{args.key_id}")
    elif args.secrets_file:
        keys = _file_keys(args.secrets_file)
        _in_file(keys, args.key_id)
        _write_file(args.secrets_file, [k for k in keys if k.key_id != args.key_id])
    else:
        entry = Pending(local_cli().actor, None, "key.revoke", args.key_id)
        with _store(args) as (auth, state), state.audit.auditing(entry):  # in the revocation's transaction
            revoke_key(auth, args.key_id)
    print(f"key {args.key_id} revoked", file=sys.stderr)
    return 0


def _in_file(keys: list[ApiKey], key_id: str) -> ApiKey:
    found = next((k for k in keys if k.key_id == key_id), None)
    if found is None:
        raise NotFound(f"no key {key_id!r} in the secrets file")
    return found
