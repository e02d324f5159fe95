"""`plumbline tune`: fine-tune the served embedding model on labelled sets into a new index generation, promote it
through the gate, roll it back; on a data directory (in this process) or a running service (`--url`, an unbound
`eval:admin` key).

    plumbline tune run --set handbook [--set plain] [--epochs 2] [--learning-rate 2e-5] [--batch-size 16]
                       [--negatives 3] [--seed 0] [--test-share 0.5] [--metric ndcg@10] [--min-gain 0]
                       [--promote [--baseline B]] [--json]
    plumbline tune promote ID [--baseline B] [--json]
    plumbline tune rollback [--json]
    plumbline tune status [--json]

`run` prints what was mined, the training and the held-out comparison; with `--promote`, it then promotes through the
gate. Exit 0 when done (and, with `--promote`, promoted), 1 when a promotion was refused, 2 on bad input, 3 when the
tune failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from service.cli.common import EXIT_OK, EXIT_REGRESSION, auditing, data_dir_option
from service.cli.work import print_view, run_local, run_remote


def add_parser(sub: Any) -> None:
    tune = sub.add_parser("tune", help="fine-tune the embedding model on labelled sets").add_subparsers(required=True)
    run = tune.add_parser("run", help="tune into a new index generation and compare it on held-out cases")
    _target(run)
    run.add_argument("--set", dest="sets", action="append", required=True, help="a labelled set (repeat for more)")
    run.add_argument("--epochs", type=int, default=2, help="passes over the training questions (2)")
    run.add_argument("--learning-rate", type=float, default=2e-5, help="AdamW's peak rate (2e-5)")
    run.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="questions per step (16): the others' passages are in-batch negatives",
    )
    run.add_argument("--negatives", type=int, default=3, help="hard negatives mined per question")
    run.add_argument("--depth", type=int, default=30, help="how deep the served search is read when mining")
    run.add_argument("--seed", type=int, default=0, help="seeds the split of unmarked cases and the training")
    run.add_argument(
        "--test-share", type=float, default=0.5, help="share of the human cases without a split held out (0.5)"
    )
    run.add_argument("--metric", default="ndcg@10", help="the held-out quality compared")
    run.add_argument("--min-gain", type=float, default=0.0, help="the held-out gain a promotion needs")
    run.add_argument("--promote", action="store_true", help="then promote it through the gate")
    run.add_argument("--baseline", help="with --promote: gate every set against this baseline")
    run.add_argument("--json", action="store_true")
    run.set_defaults(func=_run)

    promote = tune.add_parser("promote", help="serve a tune's generation, through the gate")
    _target(promote)
    promote.add_argument("tune_id")
    promote.add_argument("--baseline", help="gate every set against this baseline (default: the one named like it)")
    promote.add_argument("--json", action="store_true")
    promote.set_defaults(func=_promote)

    rollback = tune.add_parser("rollback", help="serve the previous generation and its model again")
    _target(rollback)
    rollback.add_argument("--json", action="store_true")
    rollback.set_defaults(func=_rollback)

    status = tune.add_parser("status", help="the served generation and model, and the switches so far")
    _target(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)


def _target(p: argparse.ArgumentParser) -> None:
    target = p.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running Plumbline (an eval:admin key in PLUMBLINE_API_KEY)")
    data_dir_option(target)


def _run(args: argparse.Namespace) -> int:
    body = {
        "sets": list(dict.fromkeys(args.sets)),
        "epochs": args.epochs,
        "learning_rate": args.learning_rate,
        "batch_size": args.batch_size,
        "negatives": args.negatives,
        "depth": args.depth,
        "seed": args.seed,
        "test_share": args.test_share,
        "metric": args.metric,
        "min_gain": args.min_gain,
    }
    promoted: dict[str, Any] = {}
    if args.url:
        view = run_remote(args.url, "/eval/tunes", body, "tunes")
        if args.promote and view["status"] == "done":
            promoted = _call(args, "POST", f"/eval/tunes/{view['id']}/promote", {"baseline": args.baseline})
    else:
        from service.evaluation.tuning import TuneRequest

        def start(work: Any, caller: Any) -> str:
            return str(work.tune(caller, TuneRequest.from_json(body)))

        def after(work: Any, caller: Any, view: dict[str, Any]) -> None:
            if args.promote and view["status"] == "done":
                with auditing(work.runtime, "tune.promote", {"tune": view["id"]}):
                    promoted.update(_local_promotion(work, caller, view["id"], args.baseline))

        view = run_local(args, "tune", start, after)
    code = print_view(view, args.json and not args.promote, tune_lines)
    if promoted:
        return _print_promotion(promoted, args.json)
    return code


def _promote(args: argparse.Namespace) -> int:
    if args.url:
        out = _call(args, "POST", f"/eval/tunes/{args.tune_id}/promote", {"baseline": args.baseline})
    else:
        out = _in_process(
            args, "tune.promote", lambda work, caller: _local_promotion(work, caller, args.tune_id, args.baseline)
        )
    return _print_promotion(out, args.json)


def _rollback(args: argparse.Namespace) -> int:
    if args.url:
        out = _call(args, "POST", "/eval/model/rollback", None)
    else:
        out = _in_process(args, "model.rollback", lambda work, caller: work.rollback(caller))
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"now serving generation {out['generation']} ({out['model']})")
        _print_no_answer(out)
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    if args.url:
        out = _call(args, "GET", "/eval/model", None)
    else:
        out = _in_process(args, None, lambda work, caller: work.model(caller))
    if args.json:
        print(json.dumps(out, indent=1))
        return EXIT_OK
    serving, previous = out["serving"], out["previous"]
    print(f"serving generation {serving['name']}: model {serving['model']}, index {serving['index_dir']}")
    print(f"previous: {previous['name']} ({previous['model']})" if previous else "previous: none")
    for h in out["history"][-10:]:
        print(f"  {h['at']}  {h['from']} -> {h['to']}  ({h['reason']})")
    return EXIT_OK


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    from service.cli.remote import call

    out: dict[str, Any] = call(args.url, method, path, json=body, timeout=3600)
    return out


def _in_process(args: argparse.Namespace, action: str | None, fn: Any) -> dict[str, Any]:
    """`fn(work, caller)` on a runtime of this process over the data directory, audited as `action`."""
    from contextlib import nullcontext

    from service.access.principals import local_cli
    from service.application.work import Work
    from service.cli.work import local_runtime

    with local_runtime(args) as runtime:
        with auditing(runtime, action, {}) if action else nullcontext():
            out: dict[str, Any] = fn(Work(runtime), local_cli())
        return out


def _local_promotion(work: Any, caller: Any, tune_id: str, baseline: str | None) -> dict[str, Any]:
    """A promotion in this process, its runs as the API shows them (gate verdicts, no cases)."""
    from service.application.work import promotion_run

    out: dict[str, Any] = work.promote_tune(caller, tune_id, baseline)
    out["runs"] = [{"set": r["set"], "run": promotion_run(r["evaluation"])} for r in out["runs"]]
    return out


def _print_promotion(out: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(out, indent=1))
    else:
        for r in out["runs"]:
            gate = (r["run"] or {}).get("gate")
            verdict = "no baseline: not gated" if gate is None else gate["verdict"]
            print(f"  gate on set {r['set']}: {verdict}")
        if out["promoted"]:
            print(f"promoted: now serving generation {out['generation']} (copied {out.get('copied')})")
            _print_no_answer(out)
        else:
            print(f"not promoted: {out['refusal']}", file=sys.stderr)
    return EXIT_OK if out["promoted"] else EXIT_REGRESSION


def _print_no_answer(out: dict[str, Any]) -> None:
    """What a switch did to the "nothing matches" threshold, when one had been learned under the other model."""
    learned = out.get("no_answer")
    if learned is None:
        return
    if "error" in learned:
        print(f'the "nothing matches" threshold could not be learned again: {learned["error"]}', file=sys.stderr)
    else:
        from service.cli.calibration import share

        test = learned["test"]
        print(
            f'"nothing matches" threshold learned again for {learned["model"]}: {learned["threshold"]:.4f} '
            f"(test precision {share(test['precision'])}, recall {share(test['recall'])})"
        )


def tune_lines(record: dict[str, Any]) -> list[str]:
    """A finished tune for a terminal: what it learned from, the training, and the held-out comparison."""
    mined, training, held = record["mined"], record["training"], record["held_out"]
    out = [
        f"generation {record['generation']['name']}: {record['generation']['model']} from {record['base_model']}",
        f"  mined {mined['examples']} examples from {mined['cases']} training cases "
        f"({mined['missed']} the served search missed, {mined['no_passage']} without an answering passage)",
        f"  trained {training['steps']} steps in {training['seconds']} s on {training['device']}, "
        f"loss {training['first_loss']} -> {training['last_loss']}",
        f"  re-embedded {record['index']['documents']} documents ({record['index']['chunks']} chunks)",
        f"| held-out {record['quality']} | cases | served | tuned | delta | p |",
        "|---|---|---|---|---|---|",
    ]
    rows = [*held["by_set"].items(), ("all", held["pooled"])]
    for name, c in rows:
        if c is None:
            continue
        p = "n/a" if c["p_value"] is None else f"{c['p_value']:.4f}"
        out.append(
            f"| {name} | {c['cases']} | {c['current_mean']:.3f} | {c['winner_mean']:.3f} | {c['delta']:+.3f} | {p} |"
        )
    out.append("promotable" if record["promotable"] else f"not promotable: {record['refusal']}")
    return out
