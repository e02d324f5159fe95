"""`plumbline ingest PATH [--url U | --data-dir D] [--batch-size N]`: index a folder in batches, in-process or
through a running service's `POST /documents`, with a progress bar (or a log line per batch) and, when a batch fails,
a report of every document: committed, not committed, or not known."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from service.cli.common import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, audit, data_dir_option, settings_of
from service.errors import IngestFailed, PlumblineError, StoreUnavailable


def add_parser(sub: Any) -> None:
    ingest = sub.add_parser("ingest", help="index a folder of .md/.txt/.html files or a BEIR corpus.jsonl")
    ingest.add_argument("path", type=Path)
    target = ingest.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running Plumbline (POST /documents)")
    data_dir_option(target)
    ingest.add_argument("--batch-size", type=int, default=64)
    ingest.set_defaults(func=_ingest)


def _ingest(args: argparse.Namespace) -> int:
    """Index a folder in batches. When a batch fails (the store went away, a document was refused), say which
    documents are committed (earlier batches), which are not (the rest, unless undone was not possible) and which
    may be either: a JSON report on stdout, exit 3. Re-running the command is safe: unchanged documents are
    skipped."""
    from service.index.loaders import batched, count_documents, iter_documents

    docs = iter_documents(args.path)
    totals = {"documents": 0, "chunks": 0, "unchanged": 0}
    committed: list[str] = []
    with _IngestProgress(count_documents(args.path)) as bar:
        if args.url:
            from service.cli.remote import no_delay_client
            from service.inputs import DocumentIn

            with no_delay_client(timeout=600) as client:
                for batch in batched(docs, args.batch_size):
                    body = {"documents": [DocumentIn.model_validate(asdict(d)).model_dump(mode="json") for d in batch]}
                    try:
                        response = client.post(f"{args.url.rstrip('/')}/documents", json=body)
                    except httpx.TransportError as exc:  # the server may have applied the batch before the failure
                        failure = IngestFailed(f"{args.url}: {exc}", unknown=[d.id for d in batch])
                        return _ingest_failed(failure, committed, docs, totals)
                    if response.status_code != 200:
                        failure = _remote_failure(args.url, response, [d.id for d in batch])
                        code = EXIT_BAD_INPUT if response.status_code < 500 else EXIT_ERROR
                        return _ingest_failed(failure, committed, docs, totals, code)
                    _add(totals, response.json(), bar, len(batch))
                    committed += [d.id for d in batch]
        else:
            from service.runtime import Runtime

            runtime = Runtime(settings_of(args))
            runtime.warm_up(search=False)
            try:
                for batch in batched(docs, args.batch_size):
                    try:
                        result = runtime.index.ingest(batch)
                    except IngestFailed as failure:
                        return _ingest_failed(failure, committed, docs, totals)
                    except PlumblineError as exc:  # refused before any write (a bad document, a full disk)
                        refused = IngestFailed(str(exc), not_committed=[d.id for d in batch])
                        code = EXIT_ERROR if isinstance(exc, StoreUnavailable) else EXIT_BAD_INPUT
                        return _ingest_failed(refused, committed, docs, totals, code)
                    _add(totals, asdict(result), bar, len(batch))
                    committed += [d.id for d in batch]
            finally:
                if totals["documents"]:
                    audit(runtime, "documents.ingest", str(args.path), dict(totals))
                runtime.close()
    print(json.dumps(totals))
    return EXIT_OK


def _remote_failure(url: str, response: httpx.Response, batch: list[str]) -> IngestFailed:
    """What a refused `POST /documents` left: its own report of a failed write; else none of the batch for a 4xx
    (refused before any write), and not known for a 5xx without one (a proxy's 502 may follow an applied batch)."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    message = f"{url} answered {response.status_code}: {detail or response.text[:500]}"
    if isinstance(body, dict) and isinstance(body.get("not_committed"), list):
        return IngestFailed(message, not_committed=body["not_committed"], unknown=body.get("unknown", []))
    if response.status_code < 500:
        return IngestFailed(message, not_committed=batch)
    return IngestFailed(message, unknown=batch)


def _ingest_failed(
    failure: IngestFailed, committed: list[str], rest: Any, totals: dict[str, int], code: int = EXIT_ERROR
) -> int:
    """The report of an ingest that stopped at a failed batch: what is committed, what is not, what may be; exit
    `code` (2 when the batch was refused as bad input, 3 when the store failed)."""
    not_sent: list[str] = []
    unread = ""
    try:
        not_sent += (d.id for d in rest)
    except (PlumblineError, OSError, ValueError) as exc:  # the report must not be lost to a file that cannot be read
        unread = f"; the rest of the folder was not read ({exc})"
    not_committed = failure.not_committed + not_sent
    report = {**totals, "error": str(failure) + unread, "committed": committed, "not_committed": not_committed}
    print(json.dumps({**report, "unknown": failure.unknown}))
    print(
        f"plumbline: error: the ingest stopped: {len(committed)} document(s) committed, "
        f"{len(not_committed)} not{' (and the rest of the folder)' if unread else ''}, {len(failure.unknown)} "
        f"unknown (the JSON report on stdout lists them). {failure}",
        file=sys.stderr,
    )
    return code


class _IngestProgress:
    """A bar on a terminal; a log line per batch elsewhere (a CI log, a Kubernetes Job), with the rate."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.total, self.done, self.start = total, 0, time.monotonic()
        self.bar = tqdm(total=total, unit="doc", desc="ingest") if sys.stderr.isatty() else None

    def __enter__(self) -> _IngestProgress:
        return self

    def __exit__(self, *_: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, n: int, totals: dict[str, int]) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix(chunks=totals["chunks"], unchanged=totals["unchanged"])
            return
        rate = totals["chunks"] / max(time.monotonic() - self.start, 1e-9)
        logging.getLogger("plumbline").info(
            "ingest: %d/%d documents, %d chunks written, %d unchanged (%.1f chunks/s)",
            self.done,
            self.total,
            totals["chunks"],
            totals["unchanged"],
            rate,
        )


def _add(totals: dict[str, int], result: dict[str, int], bar: _IngestProgress, n: int) -> None:
    for key in totals:
        totals[key] += int(result.get(key, 0))
    bar.update(n, totals)
