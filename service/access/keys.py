"""API keys: roles, optionally bound to a tenant (`service.access.principals`), checked on every request but health.

A key reads `pl_<key id>_<secret>`. Only its SHA-256 hash is kept, in the state store (`plumbline keys create`,
`POST /admin/keys`) or in a secrets file (a JSON list, e.g. a mounted Kubernetes Secret; see `KeyFile`). The
secret is 256 random bits, so a plain hash is as strong as a slow one and costs microseconds per request.

Example:
    >>> key_id, token = new_key()
    >>> parse_token(token) == key_id, len(hash_token(token))
    (True, 64)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from service.access.principals import ROLES, UNAUTHENTICATED, UNBINDABLE, Principal
from service.errors import Conflict, InvalidRequest, NotFound, StoreUnavailable, Unauthenticated
from service.state.keys import ApiKey, KeyRecords
from service.state.schema import now_iso

log = logging.getLogger("plumbline")


CACHE_SECONDS = 5.0  # how long a replica trusts a key it looked up: a revocation elsewhere takes this long here


TOKEN = re.compile(r"^pl_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,160}$")  # with " (<key id>)", an actor fits the audit log's 200


def new_key() -> tuple[str, str]:
    """A new key: (key id, the whole key to hand out once)."""
    key_id = secrets.token_hex(8)
    return key_id, new_secret(key_id)


def new_secret(key_id: str) -> str:
    """A whole key with a fresh 256-bit secret for `key_id`."""
    return f"pl_{key_id}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_token(token: str) -> str | None:
    """The key id of a well-formed key, else None."""
    match = TOKEN.match(token)
    return match.group(1) if match else None


def check_key_fields(name: str, roles: Sequence[str], tenant: str | None) -> tuple[str, ...]:
    """Validate a key's name, roles and binding; the roles in canonical order."""
    if not NAME.match(name) or not name.strip():
        raise InvalidRequest("name: 1-160 characters without control characters")
    unknown = sorted(set(roles) - set(ROLES))
    if unknown or not roles:
        raise InvalidRequest(f"roles: {unknown or 'none given'}; each must be one of {', '.join(ROLES)}")
    if tenant is not None and (not tenant.strip() or len(tenant) > 200):
        raise InvalidRequest("tenant: 1-200 characters")
    bound_global = sorted(set(roles) & UNBINDABLE)
    if tenant is not None and bound_global:
        raise InvalidRequest(
            f"roles {bound_global} act on what every tenant shares (keys, sets, baselines, metrics): "
            "such a key cannot be bound to a tenant"
        )
    return tuple(r for r in ROLES if r in roles)


class KeyFile:
    """Keys from a JSON file: `[{"key_id": "...", "name": "...", "sha256": "<hex>", "roles": [...], "tenant": null}]`.
    Read again when the file changes (a rotated Kubernetes Secret), never written here: `plumbline keys create
    --secrets-file F` adds entries. A file that becomes unreadable or malformed is logged, and its last good
    contents stay in use; one that never was good refuses every request with 503 (saying nothing of the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._keys: dict[str, ApiKey] = {}
        self._lock = threading.Lock()

    def entries(self) -> dict[str, ApiKey]:
        with self._lock:
            try:
                stat = self.path.stat()
                stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a rewrite replaces the file: a new inode
                if self._stamp != stamp:
                    self._keys = {k.key_id: k for k in read_key_file(self.path)}
                    self._stamp = stamp
            except (OSError, InvalidRequest) as exc:
                if self._stamp is None:
                    log.error("the API keys file cannot be used: %s", exc)
                    raise StoreUnavailable("the API keys file cannot be read: the service log says why") from None
                log.error("the API keys file cannot be used; keeping the keys last read from it: %s", exc)
            return self._keys


def read_key_file(path: Path) -> list[ApiKey]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8") or "[]")
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"the API keys file {path} cannot be read as JSON: {exc}") from None
    if not isinstance(entries, list):
        raise InvalidRequest(f"the API keys file {path} must hold a JSON list of keys")
    out = []
    for n, e in enumerate(entries):
        try:
            if not isinstance(e, dict) or not all(isinstance(e.get(f), str) for f in ("name", "key_id", "sha256")):
                raise InvalidRequest("name, key_id and sha256 are strings")
            if not isinstance(e.get("roles"), list) or not all(isinstance(r, str) for r in e["roles"]):
                raise InvalidRequest("roles is a list of strings")
            if not isinstance(e.get("tenant"), str | None):
                raise InvalidRequest("tenant is a string or null")
            roles = check_key_fields(e["name"], e["roles"], e.get("tenant"))
            if not re.fullmatch(r"[0-9a-f]{16}", e["key_id"]) or not re.fullmatch(r"[0-9a-f]{64}", e["sha256"]):
                raise InvalidRequest("key_id is 16 hex digits and sha256 64")
        except InvalidRequest as exc:
            raise InvalidRequest(f"the API keys file {path}, entry {n}: {exc}") from None
        out.append(
            ApiKey(
                e["key_id"],
                e["name"],
                roles,
                e.get("tenant"),
                e["sha256"],
                str(e.get("created_at", "")),
                "file",
                "file",
            )
        )
    return out


def file_entry(key: ApiKey) -> dict[str, object]:
    """A key as the secrets file holds it."""
    return {
        "key_id": key.key_id,
        "name": key.name,
        "sha256": key.secret_hash,
        "roles": list(key.roles),
        "tenant": key.tenant,
        "created_at": key.created_at,
    }


class Authenticator:
    """Turns a presented key into a `Principal`, or raises `Unauthenticated` (missing, malformed, unknown, wrong
    or revoked keys all read the same). Keys come from the secrets file first, then the state store, whose
    answers are cached for `CACHE_SECONDS`.

    Example:
        >>> auth = Authenticator(state.keys, None)  # doctest: +SKIP
        >>> auth.authenticate(request.headers.get("x-api-key")).roles  # doctest: +SKIP
        frozenset({'search'})
    """

    def __init__(self, records: KeyRecords | None, file: Path | None) -> None:
        self.records = records
        self.file = KeyFile(file) if file is not None else None
        self._cache: dict[str, tuple[float, ApiKey | None]] = {}
        self._lock = threading.Lock()

    def authenticate(self, token: str | None) -> Principal:
        key_id = parse_token(token) if token else None
        if key_id is None or token is None:
            raise Unauthenticated(UNAUTHENTICATED)
        digest = hash_token(token)
        key = self._lookup(key_id)
        if key is not None and key.source == "store" and not _matches(key, digest):
            key = self._lookup(key_id, fresh=True)  # rotated on another replica since it was cached
        principal = _principal(key, digest)
        if principal is None:
            raise Unauthenticated(UNAUTHENTICATED)
        return principal

    def cached(self, token: str | None) -> Principal | None:
        """The caller, if the key is a store key cached and valid now (no I/O: safe on the event loop); else None,
        and `authenticate` decides."""
        key_id = parse_token(token) if token else None
        hit = self._from_cache(key_id) if key_id else None
        return _principal(hit[0], hash_token(token)) if hit is not None and token is not None else None

    def forget(self, key_id: str) -> None:
        """Drop a cached key (after this replica changed it)."""
        with self._lock:
            self._cache.pop(key_id, None)

    def all_keys(self) -> list[ApiKey]:
        """Every key: the file's, then the store's."""
        stored = self.records.all() if self.records is not None else []
        return [*(self.file.entries().values() if self.file is not None else ()), *stored]

    def _lookup(self, key_id: str, *, fresh: bool = False) -> ApiKey | None:
        in_file = self.file.entries().get(key_id) if self.file is not None else None
        if in_file is not None:
            return in_file
        if self.records is None:
            return None
        hit = None if fresh else self._from_cache(key_id)
        if hit is not None:
            return hit[0]
        now = time.monotonic()
        key = self.records.get(key_id)
        with self._lock:
            if len(self._cache) > 10_000:  # unknown ids are cached too: a flood of them must not grow memory
                self._cache.clear()
            self._cache[key_id] = (now, key)
        return key

    def _from_cache(self, key_id: str) -> tuple[ApiKey | None] | None:
        """The cached answer for `key_id` while it is trusted, else None. An unknown id is trusted for 1 s only,
        so a key created on another replica works almost at once."""
        with self._lock:
            cached = self._cache.get(key_id)
        if cached is None or time.monotonic() - cached[0] >= (CACHE_SECONDS if cached[1] else 1.0):
            return None
        return (cached[1],)


def _principal(key: ApiKey | None, digest: str) -> Principal | None:
    """The caller a key of hash `digest` is, if `key` is live and `digest` its secret's (or its previous one's in
    the rotation's grace period); else None."""
    if key is None or key.revoked_at is not None or not _matches(key, digest):
        return None
    return Principal(key.name, key.key_id, frozenset(key.roles), key.tenant)


def _matches(key: ApiKey, digest: str) -> bool:
    if hmac.compare_digest(key.secret_hash, digest):
        return True
    return (
        key.previous_hash is not None
        and key.previous_expires_at is not None
        and key.previous_expires_at > now_iso()
        and hmac.compare_digest(key.previous_hash, digest)
    )


def create_key(
    records: KeyRecords, name: str, roles: Sequence[str], tenant: str | None, by: Principal
) -> tuple[ApiKey, str]:
    """A new key in the store: (its record, the key itself, to hand out once: only its hash is kept)."""
    key_id, token = new_key()
    key = ApiKey(key_id, name, check_key_fields(name, roles, tenant), tenant, hash_token(token), now_iso(), by.actor)
    records.create(key)
    return key, token


def rotate_key(auth: Authenticator, key_id: str, grace_seconds: float) -> str:
    """A new secret for a stored key (the old one stays valid `grace_seconds`); the new key, to hand out once."""
    _stored(auth, key_id)
    token = new_secret(key_id)
    if auth.records is None or not auth.records.rotate(key_id, hash_token(token), grace_seconds):
        raise NotFound(f"no live key {key_id!r}")
    auth.forget(key_id)
    return token


def revoke_key(auth: Authenticator, key_id: str) -> None:
    _stored(auth, key_id)
    if auth.records is None or not auth.records.revoke(key_id):
        raise NotFound(f"no live key {key_id!r}")
    auth.forget(key_id)


def _stored(auth: Authenticator, key_id: str) -> None:
    if auth.file is not None and key_id in auth.file.entries():
        raise Conflict(f"key {key_id!r} comes from the API keys file: change it there (--secrets-file)")
