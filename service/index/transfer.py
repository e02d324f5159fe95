"""Moving an index and its state between deployments: `plumbline export` and `plumbline import`.

The file is gzip-compressed JSON Lines: a header (format, version, the index's vector dimension), one line per
point of the vector store (`{"p": ...}`: id, whole payload, dense vector as base64 float32, sparse vector), one per
row of the state store (`{"t": table, "r": row}`), and a trailer with the counts, so that a truncated file is
refused before anything is written. Points keep their ids, payloads and vectors, so the imported index answers
exactly as the exported one did, without running the model again. On import the heads (each document's commit
marker) are written last: a reader of the target sees whole documents only, even while the import runs.

Leases and eval jobs are not moved (they mean nothing in another deployment); the target's audit entries stay and
the imported ones are appended after them. Every other table, and the collection, must be empty in the target:
an import never merges into what a deployment already holds.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Table, func, insert, select, text

from service.errors import Conflict, InvalidRequest, PlumblineError
from service.filters import Clause
from service.state import StateStore
from service.state import schema as t
from service.state.tx import writing
from service.stores.base import SparseVector, StorePoint, VectorStore
from service.stores.payload import MANIFEST_ID

FORMAT = "plumbline-export"
VERSION = 1
PAGE = 256  # points read or written per engine call
NOT_MOVED = frozenset({t.leases.name, t.jobs.name})
APPENDED = frozenset({t.audit_log.name})  # rows get new ids after the target's own


@dataclass(frozen=True)
class Moved:
    """What an export wrote or an import read: points, and rows per state table."""

    points: int
    rows: dict[str, int]


def export(store: VectorStore, state: StateStore, path: Path) -> Moved:
    """Write every point of `store` and every row of `state` (but leases and jobs) to `path`."""
    manifest = store.retrieve([MANIFEST_ID])
    if not manifest:
        raise InvalidRequest("the index holds no manifest: nothing was ever ingested into it, so there is no index")
    points, rows = 0, {}
    with gzip.open(path, "wt", encoding="utf-8") as out:
        header = {"format": FORMAT, "version": VERSION, "dimension": manifest[0].payload["dimension"]}
        out.write(json.dumps({**header, "exported_at": dt.datetime.now(dt.UTC).isoformat()}) + "\n")
        offset: str | None = None
        while True:
            page, offset = store.dump(offset, PAGE)
            for p in page:
                out.write(json.dumps({"p": _point_json(p)}) + "\n")
            points += len(page)
            if offset is None:
                break
        with state.engine.connect() as conn:
            for table in _moved_tables():
                rows[table.name] = 0
                for row in conn.execute(select(table)).mappings():
                    out.write(json.dumps({"t": table.name, "r": dict(row)}) + "\n")
                    rows[table.name] += 1
        out.write(json.dumps({"end": {"points": points, "rows": rows}}) + "\n")
    return Moved(points, rows)


def import_(path: Path, store: VectorStore, state: StateStore) -> Moved:
    """Read `path` (checked whole first) into an empty `store` and `state`."""
    header, end = _checked(path)
    store.ensure_schema(int(header["dimension"]))
    _refuse_unless_empty(store, state)
    written = [0]  # points written so far, for the message if the import fails
    try:
        _write_points(path, store, written)
        _insert_rows(state, _rows(path))  # one transaction: all of them or none
    except Exception as exc:
        raise PlumblineError(
            f"the import failed after writing {written[0]} of {end['points']} points ({exc}). The target collection "
            "is partly filled and the state store unchanged: delete the collection (or name a new one with "
            "PLUMBLINE_COLLECTION), then import again."
        ) from exc
    return Moved(end["points"], end["rows"])


def _write_points(path: Path, store: VectorStore, written: list[int]) -> None:
    """Every point of the file into `store`, the heads (commit markers) after everything else; `written[0]` counts."""
    heads: list[StorePoint] = []
    batch: list[StorePoint] = []

    def flush(points: list[StorePoint]) -> None:
        store.upsert(points)
        written[0] += len(points)

    for line in _lines(path):
        if "p" in line:
            point = _point_from_json(line["p"])
            (heads if point.payload.get("kind") == "head" else batch).append(point)
            if len(batch) == PAGE:
                flush(batch)
                batch = []
    if batch:
        flush(batch)
    for start in range(0, len(heads), PAGE):
        flush(heads[start : start + PAGE])


def _rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in _lines(path):
        if "t" in line:
            rows.setdefault(line["t"], []).append(line["r"])
    return rows


def _moved_tables() -> list[Table]:
    return [table for table in t.metadata.sorted_tables if table.name not in NOT_MOVED and table.name != t.meta.name]


def _point_json(p: StorePoint) -> dict[str, Any]:
    out: dict[str, Any] = {"id": p.id, "payload": dict(p.payload)}
    if p.dense is not None:
        out["dense"] = base64.b64encode(np.asarray(p.dense, dtype="<f4").tobytes()).decode()
    if p.sparse is not None:
        out["sparse"] = [list(p.sparse.indices), [float(v) for v in p.sparse.values]]
    return out


def _point_from_json(raw: Mapping[str, Any]) -> StorePoint:
    dense = np.frombuffer(base64.b64decode(raw["dense"]), dtype="<f4").tolist() if "dense" in raw else None
    sparse = SparseVector(tuple(raw["sparse"][0]), tuple(raw["sparse"][1])) if "sparse" in raw else None
    return StorePoint(raw["id"], raw["payload"], dense=dense, sparse=sparse)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _checked(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and trailer of a whole, readable export file of a version this code reads."""
    header: dict[str, Any] | None = None
    last: dict[str, Any] = {}
    points, rows = 0, dict[str, int]()
    try:
        for n, line in enumerate(_lines(path)):
            if n == 0:
                header = line
                if header.get("format") != FORMAT or header.get("version") != VERSION:
                    raise InvalidRequest(f"{path} is not a {FORMAT} file of version {VERSION}")
            points += "p" in line
            if "t" in line:
                rows[line["t"]] = rows.get(line["t"], 0) + 1
            last = line
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{path} cannot be read as an export file ({exc}): nothing was imported") from exc
    end = last.get("end")
    if header is None or not isinstance(end, dict):
        raise InvalidRequest(f"{path} is incomplete (no trailer: the export was cut short): nothing was imported")
    if end.get("points") != points or {k: v for k, v in end.get("rows", {}).items() if v} != rows:
        raise InvalidRequest(f"{path} does not hold what its trailer counts: nothing was imported")
    return header, end


def _refuse_unless_empty(store: VectorStore, state: StateStore) -> None:
    held = store.count(Clause())
    if held:
        raise Conflict(
            f"the target collection already holds {held} points: import into an empty collection (a new "
            "PLUMBLINE_COLLECTION name, or delete the collection first). Nothing was imported."
        )
    with state.engine.connect() as conn:
        for table in _moved_tables():
            if table.name not in APPENDED and conn.scalar(select(func.count()).select_from(table)):
                raise Conflict(
                    f"the target state store already has rows in {table.name}: import into a fresh state store "
                    "(a new database); an import never merges. Nothing was imported."
                )


def _insert_rows(state: StateStore, rows: dict[str, list[dict[str, Any]]]) -> None:
    with writing(state.engine) as conn:
        for table in _moved_tables():
            batch = rows.get(table.name, [])
            if not batch:
                continue
            if table.name in APPENDED:
                batch = [{k: v for k, v in r.items() if k != "id"} for r in batch]
            conn.execute(insert(table), batch)
            if conn.dialect.name == "postgresql" and "id" in table.c and table.c.id.autoincrement is True:
                # explicit ids leave the sequence behind: the next row would collide with an imported one
                sequence = f"pg_get_serial_sequence('{table.name}', 'id')"
                conn.execute(text(f"SELECT setval({sequence}, (SELECT MAX(id) FROM {table.name}))"))
