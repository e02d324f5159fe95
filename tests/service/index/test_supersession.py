"""Supersession stays within a tenant: in the index's writes, its status refresh, the cycle check, and the integrity
check's view of what every status should be (so a start-up repair never undoes it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.domain import Document
from service.errors import Conflict, InvalidRequest
from service.index import integrity
from service.index.index import Index
from service.stores.edge import EdgeStore
from tests.service.index.test_index import make_index


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    store = EdgeStore(tmp_path / "index")
    yield make_index(store)
    store.close()


def doc(doc_id: str, tenant: str | None, supersedes: str | None = None) -> Document:
    return Document(id=doc_id, title=doc_id, text=f"{doc_id} text", tenant=tenant, supersedes=supersedes)


def test_a_document_supersedes_only_within_its_tenant(index: Index) -> None:
    index.ingest([doc("policy", "acme")])
    index.ingest([doc("evil/policy", "evil", supersedes="policy")])  # another tenant: no effect
    index.ingest([doc("none/policy", None, supersedes="policy")])  # no tenant is a tenant of its own
    assert index.get("policy").superseded_by is None
    index.ingest([doc("policy-2", "acme", supersedes="policy")])
    assert index.get("policy").superseded_by == "policy-2"
    # the same within one batch
    index.ingest([doc("b-old", "acme"), doc("b-evil", "evil", supersedes="b-old")])
    assert index.get("b-old").superseded_by is None
    index.ingest([doc("c-old", "acme"), doc("c-new", "acme", supersedes="c-old")])
    assert index.get("c-old").superseded_by == "c-new"
    # and the integrity check agrees with every status: nothing for a start-up repair to undo
    assert integrity.check(index.store).statuses == {}


def test_a_cycle_through_another_tenant_is_no_cycle(index: Index) -> None:
    index.ingest([doc("a", "acme")])
    index.ingest([doc("x", "evil", supersedes="a")])
    index.ingest([doc("a", "acme", supersedes="x")])  # a -> x (evil) is no link, so no cycle
    index.ingest([doc("b", "acme", supersedes="a")])
    with pytest.raises(InvalidRequest, match="cycle"):
        index.ingest([doc("a", "acme", supersedes="b")])


def test_an_id_belongs_to_one_tenant(index: Index) -> None:
    index.ingest([doc("shared", "acme")])
    for tenant in ("evil", None):
        with pytest.raises(Conflict, match="different tenant"):
            index.ingest([doc("fresh", tenant), doc("shared", tenant)])
        with pytest.raises(Exception, match="no document"):
            index.get("fresh")  # the batch was refused whole
    index.delete("shared")
    index.ingest([doc("shared", "evil")])  # once deleted, the id is free
    assert index.get("shared").document.tenant == "evil"


def test_another_tenant_cannot_crowd_out_a_documents_superseder(index: Index) -> None:
    """The trial: 101 `evil` documents naming `policy` made the real superseder fall off the end of one page of heads,
    and the refresh that followed made acme's retired policy current again."""
    index.ingest([doc("policy", "acme")])
    index.ingest([doc("zz-policy-2", "acme", supersedes="policy")])  # sorts after every evil id
    index.ingest([doc(f"evil/{n:03}", "evil", supersedes="policy") for n in range(100)])
    index.ingest([doc("evil/last", "evil", supersedes="policy")])
    assert index.get("policy").superseded_by == "zz-policy-2"
