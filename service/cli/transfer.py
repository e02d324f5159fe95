"""`plumbline export FILE` and `plumbline import FILE`: move an index and its state to another deployment.

Both act on the deployment the settings describe (`--data-dir`, and the `PLUMBLINE_*` variables: `BACKEND`,
`QDRANT_URL`, `COLLECTION`, `STATE_URL`, ...). With the embedded store the data directory's lock is taken, so the
server must be stopped; with a Qdrant server, stop writing while exporting, and import before the replicas start
(a running replica would not see the imported index's manifest). See `service.index.transfer` for the file.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    export = sub.add_parser("export", help="write the index and its state to a file (see plumbline import)")
    export.add_argument(
        "file", type=Path, help="the file to write (gzip-compressed JSON Lines, e.g. plumbline.jsonl.gz)"
    )
    export.add_argument("--data-dir", type=Path, help="data directory (default: $PLUMBLINE_DATA_DIR or ./data)")
    export.set_defaults(func=_export)
    load = sub.add_parser("import", help="read a plumbline export into an empty deployment (e.g. a Qdrant server)")
    load.add_argument("file", type=Path)
    load.add_argument("--data-dir", type=Path, help="data directory (default: $PLUMBLINE_DATA_DIR or ./data)")
    load.set_defaults(func=_import)


@contextmanager
def _deployment(args: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    """The vector store and the state store the settings name, the data directory's lock held."""
    from service.infra.datadir import DataDirLock
    from service.runtime import build_store
    from service.settings import Settings
    from service.state import open_state

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    lock = DataDirLock(settings.data_dir)
    lock.acquire()
    try:
        state = open_state(settings.state_store_url, settings.legacy_eval_dir)
        try:
            store = build_store(settings)
            try:
                yield store, state
            finally:
                store.close()
        finally:
            state.close()
    finally:
        lock.release()


def _export(args: argparse.Namespace) -> int:
    from service.index.transfer import export

    started = time.monotonic()
    with _deployment(args) as (store, state):
        moved = export(store, state, args.file)
    print(json.dumps({"exported": str(args.file), **asdict(moved), "seconds": round(time.monotonic() - started, 1)}))
    return 0


def _import(args: argparse.Namespace) -> int:
    from service.access.principals import local_cli
    from service.index.transfer import import_
    from service.state.audit import Pending

    started = time.monotonic()
    imported = Pending(local_cli().actor, None, "data.import", str(args.file))
    # an index and state rows: no one transaction holds both, so the entry is written after them
    with _deployment(args) as (store, state), state.audit.auditing(imported, after=True) as entry:
        moved = import_(args.file, store, state)
        entry.fill(detail=asdict(moved))
    print(json.dumps({"imported": str(args.file), **asdict(moved), "seconds": round(time.monotonic() - started, 1)}))
    return 0
