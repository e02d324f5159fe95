"""Who is calling: a `Principal` (a key's name and id, its roles, the tenant it is bound to) and the checks every
service makes with it.

Roles (`ROLES`): `search`, `ingest`, `eval:run`, `eval:admin` (sets and baselines), `incidents:report`,
`incidents:review`, `metrics` (the scrape endpoint, when it is protected) and `admin` (everything, keys and the
audit log included). A key bound to a tenant is confined to it: `confine` forces its searches, evals and
incidents onto that tenant whatever the request says, and documents of other tenants read as absent. Global
powers (`UNBINDABLE`) cannot be bound: a tenant's key must not edit the sets, baselines or keys every tenant
shares.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace

from service.errors import Forbidden
from service.filters import FilterSpec

ROLES = ("search", "ingest", "eval:run", "eval:admin", "incidents:report", "incidents:review", "metrics", "admin")


UNBINDABLE = frozenset({"admin", "eval:admin", "metrics"})


UNAUTHENTICATED = "a valid API key is required: send it in the X-API-Key header (or Authorization: Bearer <key>)"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key's name and id, its roles, and the tenant it is bound to (None: unbound).

    Example:
        >>> p = Principal("support-bot", "0123456789abcdef", frozenset({"incidents:report"}), tenant="acme")
        >>> p.has("incidents:report"), p.has("incidents:review"), p.actor
        (True, False, 'support-bot (0123456789abcdef)')
    """

    name: str
    key_id: str | None
    roles: frozenset[str]
    tenant: str | None = None

    def has(self, role: str) -> bool:
        return "admin" in self.roles or role in self.roles

    @property
    def actor(self) -> str:
        """How the audit log names the caller."""
        return f"{self.name} ({self.key_id})" if self.key_id else self.name


ANONYMOUS = Principal("anonymous (auth off)", None, frozenset({"admin"}))  # every caller when auth is off


LOCAL = Principal("local CLI", None, frozenset({"admin"}))  # code working on a data directory or store directly


def local_cli() -> Principal:
    """The CLI working on a data directory or state store directly, named by user and host in the audit log (by
    UID where the user has no name: a container run under an arbitrary UID, as OpenShift does)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return replace(LOCAL, name=f"local CLI ({user}@{socket.gethostname()})")


def require(principal: Principal, any_of: Iterable[str], what: str) -> None:
    """`Forbidden` unless the caller holds one of the roles (admin holds all)."""
    roles = tuple(any_of)
    if not any(principal.has(r) for r in roles):
        raise Forbidden(f"this key lacks the role {' or '.join(map(repr, roles))} that {what} needs")


def confine(principal: Principal, filters: FilterSpec, where: str = "filters.tenant") -> FilterSpec:
    """The filters a tenant-bound caller gets: its own tenant, whatever it asked; asking for another is a 403."""
    if principal.tenant is None:
        return filters
    if filters.tenant is not None and filters.tenant != principal.tenant:
        raise Forbidden(f"{where}: this key is bound to tenant {principal.tenant!r} and may not name another")
    return replace(filters, tenant=principal.tenant)


def write_tenant(principal: Principal, tenant: str | None, where: str) -> str | None:
    """The tenant a write lands in: a bound key's own (given or not); naming another is a 403."""
    if principal.tenant is None:
        return tenant
    if tenant is not None and tenant != principal.tenant:
        raise Forbidden(f"{where}: this key is bound to tenant {principal.tenant!r} and may not write another")
    return principal.tenant


def visible(principal: Principal, tenant: str | None) -> bool:
    """Whether the caller may see something of `tenant`: an unbound key sees all, a bound one its own."""
    return principal.tenant is None or principal.tenant == tenant
