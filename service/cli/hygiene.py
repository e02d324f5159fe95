"""`plumbline eval distractors`: the documents that crowd a set's top k without answering, on a data directory (in
this process) or a running service (`--url`).

    plumbline eval distractors (--run ID | --set S [--runs 5]) [--k K] [--limit 20] [--url U | --data-dir D] [--json]

What pruning them would do: `plumbline eval run --set S --exclude-doc ID ...` (a what-if run, compared case by case).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from service.cli.common import EXIT_OK, data_dir_option, settings_of


def add_parsers(ev: Any) -> None:
    p = ev.add_parser("distractors", help="the documents that take top-k slots without answering")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running Plumbline (its key in PLUMBLINE_API_KEY)")
    data_dir_option(target)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", help="one stored run")
    which.add_argument("--set", help="a set: its most recent monitoring runs")
    p.add_argument("--runs", type=int, default=5, help="with --set: how many recent monitoring runs (default 5)")
    p.add_argument("--k", type=int, help="the top k (default: the runs' largest k)")
    p.add_argument("--limit", type=int, default=20, help="documents shown (default 20)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_distractors)


def _distractors(args: argparse.Namespace) -> int:
    from eval.distractors import DistractorReport, format_distractors

    params = {"limit": args.limit, **({"k": args.k} if args.k else {})}
    if args.url:
        from service.cli.remote import call

        path = f"/eval/runs/{args.run}/distractors" if args.run else f"/eval/sets/{args.set}/distractors"
        if args.set:
            params["runs"] = args.runs
        found: dict[str, Any] = call(args.url, "GET", path, params=params)
    else:
        from service.access.principals import local_cli
        from service.application.evaluations import Evaluations
        from service.runtime import Runtime

        runtime = Runtime(settings_of(args))
        runtime.warm_up()
        try:
            evaluations = Evaluations(runtime.evals, runtime.settings, hygiene=runtime.hygiene)
            found = evaluations.distractors(
                local_cli(), run_id=args.run, set_name=args.set, recent=args.runs, k=args.k, limit=args.limit
            ).to_json()
        finally:
            runtime.close()
    if args.json:
        print(json.dumps(found, indent=1, ensure_ascii=False))
    else:
        report = DistractorReport.from_json(found)
        print(format_distractors(report, found.get("freshness"), found.get("duplicate_groups", [])))
    return EXIT_OK
