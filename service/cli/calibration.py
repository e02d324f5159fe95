"""`plumbline eval calibrate`: learn the "nothing matches" threshold every search's `no_answer` applies, from labelled
sets, on a data directory (in this process) or a running service (`--url`, an `eval:admin` key).

    plumbline eval calibrate --set handbook [--set plain] [--k 5] [--seed 0] [--beta 0.5] [--url U | --data-dir D]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from service.cli.common import EXIT_OK, auditing, data_dir_option, settings_of


def add_parsers(ev: Any) -> None:
    p = ev.add_parser("calibrate", help='learn the "nothing matches" threshold from labelled sets')
    target = p.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running Plumbline (an eval:admin key in PLUMBLINE_API_KEY)")
    data_dir_option(target)
    p.add_argument("--set", dest="sets", action="append", required=True, help="a labelled set (repeat for more)")
    p.add_argument("--k", type=int, default=5, help='"an answer in the top k" (default 5)')
    p.add_argument("--seed", type=int, default=0, help="splits cases that carry no split (default 0)")
    p.add_argument("--beta", type=float, default=0.5, help="F-beta to maximise: below 1 precision weighs more (0.5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    body = {"sets": args.sets, "k": args.k, "seed": args.seed, "beta": args.beta}
    if args.url:
        from service.cli.remote import call

        record: dict[str, Any] = call(args.url, "POST", "/eval/no-answer/calibrate", json=body, timeout=600)
    else:
        from service.evaluation.calibration import CalibrationRequest
        from service.runtime import Runtime

        runtime = Runtime(settings_of(args))
        runtime.warm_up()
        try:
            with auditing(runtime, "no_answer.calibrate", {"sets": args.sets, "k": args.k}):
                record = runtime.calibrate_no_answer(
                    CalibrationRequest(tuple(dict.fromkeys(args.sets)), args.k, args.seed, args.beta)
                )
        finally:
            runtime.close()
    print(json.dumps(record, indent=1) if args.json else format_calibration(record))
    return EXIT_OK


def share(x: float | None) -> str:
    """A precision or recall for a terminal ("-": undefined, nothing flagged or nothing to find)."""
    return "-" if x is None else f"{x:.2f}"


def format_calibration(record: dict[str, Any]) -> str:
    """The threshold and how it flags searches on each split, for a terminal."""
    lines = [
        f"nothing matches below {record['signal']} = {record['threshold']:.4f} "
        f"(model {record['model']}, top {record['k']}, F{record['beta']:g}, sets {', '.join(record['sets'])}, "
        f"split by {record['split']})",
        f"{'split':<6} {'searches':>8} {'no answer':>9} {'flagged':>7} {'precision':>9} {'recall':>6}",
    ]
    for split in ("tune", "test"):
        d = record[split]
        lines.append(
            f"{split:<6} {d['searches']:>8} {d['unanswered']:>9} {d['flagged']:>7} "
            f"{share(d['precision']):>9} {share(d['recall']):>6}"
        )
    return "\n".join(lines)
