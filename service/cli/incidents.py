"""`plumbline incidents post|list|review|export`, against a running Plumbline (`--url`).

plumbline incidents post --question Q --doc-id D [--evidence E | --chunk-id C] --reporter R [--category C] ...
plumbline incidents list [--status new] [--category C] [--reporter R] [--since T] [--set S] [--json]
plumbline incidents review ID (--accept | --reject | --reopen) --reason R --reviewer R
plumbline incidents export [--set S] [--out FILE]     accepted incidents as JSON Lines cases for eval/sets/
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from eval.cases import Case, Label, dump_jsonl
from eval.incidents import incident_case
from service.cli.remote import api_key_headers
from service.errors import PlumblineError
from service.infra.files import write_atomic

DEFAULT_URL = "http://127.0.0.1:8000"


def add_parser(sub: Any) -> None:
    incidents = sub.add_parser("incidents", help="report, list, review and export failed answers").add_subparsers(
        required=True
    )

    post = incidents.add_parser("post", help="report a question answered wrongly, and its right source")
    _url(post)
    post.add_argument("--question", required=True)
    post.add_argument("--doc-id", help="the document that answers it")
    post.add_argument("--evidence", help="the words in it that answer the question")
    post.add_argument("--chunk-id", help="instead of --doc-id: the chunk that answers it")
    post.add_argument("--category", default="uncategorized")
    post.add_argument("--reporter", required=True)
    post.add_argument("--answer", help="the wrong answer the user got")
    post.add_argument("--note")
    post.add_argument("--tenant")
    post.add_argument("--filters", type=json.loads, default={}, help="the user's /search filters, as JSON")
    post.add_argument("--no-fresh-only", dest="fresh_only", action="store_false")
    post.add_argument("--set", help="the labelled set it joins (default: the service's)")
    post.add_argument("--k", type=int, help="how many results the assistant gave its model (default: the service's k)")
    post.add_argument("--json", action="store_true")
    post.set_defaults(func=_post)

    listing = incidents.add_parser("list", help="incidents, newest first")
    _url(listing)
    for name in ("status", "category", "reporter", "since", "set", "tenant"):
        listing.add_argument(f"--{name}")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)

    review = incidents.add_parser("review", help="accept, reject or reopen an incident")
    _url(review)
    review.add_argument("id", type=int)
    verdict = review.add_mutually_exclusive_group(required=True)
    for flag, status in (("--accept", "accepted"), ("--reject", "rejected"), ("--reopen", "new")):
        verdict.add_argument(flag, dest="status", action="store_const", const=status)
    review.add_argument("--reason")
    review.add_argument("--reviewer", required=True)
    review.set_defaults(func=_review)

    export = incidents.add_parser("export", help="accepted incidents as JSON Lines cases, for eval/sets/")
    _url(export)
    export.add_argument("--set", help="only this set's incidents")
    export.add_argument("--out", help="write to this file (default: standard output)")
    export.set_defaults(func=_export)


def _url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=DEFAULT_URL, help=f"a running Plumbline (default {DEFAULT_URL})")


def _client(args: argparse.Namespace) -> httpx.Client:
    return httpx.Client(base_url=args.url.rstrip("/"), timeout=120, headers=api_key_headers())


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise PlumblineError(f"the service answered {response.status_code}: {detail}")
    return response.json()


def _post(args: argparse.Namespace) -> int:
    fields = ("question", "doc_id", "evidence", "chunk_id", "category", "reporter", "answer", "note", "tenant", "k")
    body = {key: getattr(args, key) for key in fields if getattr(args, key) is not None}
    body.update(filters=args.filters, fresh_only=args.fresh_only, **({"set": args.set} if args.set else {}))
    with _client(args) as client:
        out = _checked(client.post("/eval/incidents", json=body))
    if args.json:
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return 0
    merged = f" (a known question: report {out['reports']} of it, merged)" if out["duplicate_of"] else ""
    print(f"incident #{out['incident_id']}: {out['status']}{merged}")
    triage = out.get("triage")
    if triage:
        stages = ", ".join(f"{k} {v if v is not None else '-'}" for k, v in triage["stages"].items())
        print(f"triage: {triage['verdict']} (rank {triage['rank'] or '-'}; {stages}) - {triage['explanation']}")
        for n, hit in enumerate(triage["top"], 1):
            print(f"  came first #{n}: {hit['doc_id']} ({hit['heading_path'] or hit['title']})")
    else:
        print(f"triage failed: {out.get('triage_error')}")
    return 0


def _list(args: argparse.Namespace) -> int:
    params = {k: getattr(args, k) for k in ("status", "category", "reporter", "since", "set", "tenant")}
    with _client(args) as client:
        page = _checked(client.get("/eval/incidents", params={**_present(params), "limit": args.limit}))
    if args.json:
        print(json.dumps(page, indent=1, ensure_ascii=False))
        return 0
    for i in page["incidents"]:
        verdict = (i.get("triage") or {}).get("verdict", "-")
        head = f"#{i['incident_id']:<5} {i['status']:<9} {i['category']:<14} {verdict:<14}"
        print(f"{head} x{i['reports']:<3} {i['question']}")
    return 0


def _review(args: argparse.Namespace) -> int:
    body = _present({"status": args.status, "reason": args.reason, "reviewer": args.reviewer})
    with _client(args) as client:
        out = _checked(client.patch(f"/eval/incidents/{args.id}", json=body))
    print(f"incident #{out['incident_id']}: {out['status']} by {out['reviewer']} ({out['case_id']})")
    return 0


def _export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        text = dump_jsonl(accepted_cases(client, args.set))
    if args.out:
        write_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    return 0


def accepted_cases(client: httpx.Client, set_name: str | None = None) -> list[Case]:
    """Every accepted incident (of `set_name`, or all) as the case it stands for, oldest first."""
    return sorted((_case(i) for i in _pages(client, {"status": "accepted", "set": set_name})), key=_order)


def _order(case: Case) -> int:
    return int(case.id.rpartition("-")[2])


def _case(i: dict[str, Any]) -> Case:
    labels = [Label(**label) for label in i["labels"]]
    return incident_case(
        i["incident_id"], i["question"], labels, i["category"], i["filters"], i["tenant"], i["created_at"]
    )


def _pages(client: httpx.Client, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    before = None
    while True:
        page = _checked(client.get("/eval/incidents", params=_present({**params, "before": before, "limit": 500})))
        yield from page["incidents"]
        before = page["next_before"]
        if before is None:
            return


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
