"""Import a data directory written by the file layout (before the state store) into the state store, once.

    <data>/eval/sets/<name>.jsonl                      -> eval_sets
    <data>/eval/runs/<run id>.json                     -> eval_runs
    <data>/eval/baselines/<name>.json                  -> eval_baselines
    <data>/eval/baselines/history/<name>.<run id>.json -> eval_baseline_history

Everything is imported in one transaction, with the marker that says it was done: a crash leaves all or
nothing, and the next start tries again. The files stay where they are (nothing is deleted); rows already
in the store win over a file of the same name. A file that cannot be read stops the import with its path,
rather than starting without it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Table, insert, select

from eval.cases import dump_jsonl, parse_jsonl
from eval.storage import dump_run, dump_summary, load_run
from service.state import schema as t
from service.state.schema import now_iso
from service.state.tx import one_at_a_time

if TYPE_CHECKING:
    from service.state.store import StateStore

log = logging.getLogger("plumbline")
MARKER = "file_layout_imported"


def import_file_layout(state: StateStore, eval_dir: Path) -> dict[str, int] | None:
    """Import `eval_dir` (sets/, runs/, baselines/) unless already done; counts per kind, or None if skipped."""
    if state.get_meta(MARKER) is not None:
        return None
    counts = {"sets": 0, "runs": 0, "baselines": 0, "history": 0}
    with state.engine.begin() as conn:
        one_at_a_time(conn)
        if conn.scalar(select(t.meta.c.value).where(t.meta.c.key == MARKER)) is not None:
            return None  # another replica finished it first
        for path in _files(eval_dir / "sets", "*.jsonl"):
            cases = parse_jsonl(path.read_text(encoding="utf-8"), str(path))
            counts["sets"] += _add(conn, t.sets, "name", path.stem, body=dump_jsonl(cases), updated_at=now_iso())
        for path in _files(eval_dir / "runs", "*.json"):
            run = load_run(path)
            counts["runs"] += _add(
                conn,
                t.runs,
                "run_id",
                run.run_id,
                set_name=run.set_name,
                created_at=run.created_at,
                summary=dump_summary(run),
                record=dump_run(run),
                kind=run.kind,
            )
        for path in _files(eval_dir / "baselines", "*.json"):
            run = load_run(path)
            counts["baselines"] += _add(
                conn, t.baselines, "name", path.stem, run_id=run.run_id, record=dump_run(run), promoted_at=now_iso()
            )
        for path in _files(eval_dir / "baselines" / "history", "*.json"):
            run = load_run(path)
            name = path.name.removesuffix(f".{run.run_id}.json")
            conn.execute(
                insert(t.baseline_history).values(
                    name=name, run_id=run.run_id, record=dump_run(run), replaced_at=now_iso()
                )
            )
            counts["history"] += 1
        conn.execute(insert(t.meta).values(key=MARKER, value=json.dumps({"from": str(eval_dir), **counts})))
    if any(counts.values()):
        log.info("imported the file layout of %s into the state store: %s (the files are kept)", eval_dir, counts)
    return counts


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def _add(conn: Connection, table: Table, key: str, value: str, **row: object) -> int:
    """Insert a row unless one with that key is there already (the store's wins); 1 if inserted."""
    if conn.scalar(select(table.c[key]).where(table.c[key] == value)) is not None:
        return 0
    conn.execute(insert(table).values({key: value, **row}))
    return 1
