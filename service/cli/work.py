"""`plumbline eval synthesize | review | sweep | answers`: the service's eval work from the command line, on a data
directory (in this process, as the service does it) or against a running service (`--url`), followed to its end.

    plumbline eval synthesize --set day0 [--passages 50] [--per-passage 2] [--seed 0] [--tags T ...] [--accept-all]
                              [--resume ID] [--no-check]
    plumbline eval review --set day0 (--accept-all | --reject-all | --accept ID ... | --reject ID ...)
    plumbline eval sweep --set S --space '{"alpha": [0.3, 0.5, 0.7], "k": [5, 10]}' [--search random --samples 20]
                         [--metric ndcg@10] [--seed 0] [--test-share 0.5]
    plumbline eval answers FILE --set S [--run-id R] [--k 5] [--samples 3]

Each prints what it made (`--json`: the whole result). Exit 0 when it finished, 2 on bad input, 3 when it failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eval.errors import EvalError
from service.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    POLL_SECONDS,
    data_dir_option,
    poll,
    progress_bar,
    settings_of,
)

ENDED = ("done", "failed", "cancelled", "lost")


def add_parsers(ev: Any) -> None:
    synth = ev.add_parser("synthesize", help="draft a day-0 set from the index's chunks with an LLM")
    _target(synth)
    synth.add_argument("--set", required=True, help="the set the questions are proposed for")
    synth.add_argument("--passages", type=int, default=50, help="chunks to sample (default 50)")
    synth.add_argument("--per-passage", type=int, default=2, help="questions per chunk (default 2)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--tags", nargs="+", default=[], help="only documents with one of these tags")
    synth.add_argument("--tenant", help="only this tenant's documents")
    synth.add_argument("--no-check", action="store_true", help="skip the LLM's check that the chunk answers")
    synth.add_argument("--accept-all", action="store_true", help="add the survivors to the set unreviewed")
    synth.add_argument("--resume", metavar="ID", help="resume a synthesis that ended unfinished")
    synth.add_argument("--json", action="store_true")
    synth.set_defaults(func=_synthesize)

    review = ev.add_parser("review", help="accept or reject a set's proposed synthetic cases")
    _target(review)
    review.add_argument("--set", required=True)
    which = review.add_mutually_exclusive_group(required=True)
    which.add_argument("--accept-all", action="store_true")
    which.add_argument("--reject-all", action="store_true")
    which.add_argument("--accept", type=int, nargs="+", metavar="ID")
    which.add_argument("--reject", type=int, nargs="+", metavar="ID")
    review.add_argument("--reason")
    review.set_defaults(func=_review)

    sweep = ev.add_parser("sweep", help="choose chunking and search parameters by the numbers")
    _target(sweep)
    sweep.add_argument("--set", required=True, help="set name, or (with --data-dir) a path to a .jsonl file")
    sweep.add_argument("--space", required=True, help="JSON object parameter -> values, or @FILE holding one")
    sweep.add_argument("--search", choices=["grid", "random"], default="grid")
    sweep.add_argument("--samples", type=int, default=20, help="random search: configurations to try")
    sweep.add_argument("--seed", type=int, default=0)
    sweep.add_argument("--metric", default="ndcg@10", help="the quality the winner is chosen by")
    sweep.add_argument("--unit", choices=["chunk", "doc"], default="chunk")
    sweep.add_argument("--test-share", type=float, default=0.5)
    sweep.add_argument("--json", action="store_true")
    sweep.set_defaults(func=_sweep)

    answers = ev.add_parser("answers", help="grade answers with an LLM judge")
    _target(answers)
    answers.add_argument("file", type=Path, help="JSON Lines: {id, question, answer, contexts?, reference?, category?}")
    answers.add_argument("--set", required=True, help="the set the questions come from")
    answers.add_argument("--run-id", help="take missing contexts from this run's retrieved chunks")
    answers.add_argument("--k", type=int, default=5, help="contexts per item taken from the run")
    answers.add_argument("--samples", type=int, default=3, help="judge samples per item")
    answers.add_argument("--json", action="store_true")
    answers.set_defaults(func=_answers)


def _target(p: argparse.ArgumentParser) -> None:
    target = p.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running Plumbline (its key in PLUMBLINE_API_KEY)")
    data_dir_option(target)


# -- the commands -------------------------------------------------------------------------------------------------


def _synthesize(args: argparse.Namespace) -> int:
    body = {
        "passages": args.passages,
        "per_passage": args.per_passage,
        "seed": args.seed,
        "tags": args.tags,
        "tenant": args.tenant,
        "check": not args.no_check,
        "accept_all": args.accept_all,
    }
    if args.url:
        path = f"/eval/syntheses/{args.resume}/resume" if args.resume else f"/eval/sets/{args.set}/synthesize"
        view = run_remote(args.url, path, {} if args.resume else body, "syntheses")
    else:
        from service.evaluation.synthesis import SynthesisRequest

        def start(work: Any, caller: Any) -> str:
            if args.resume:
                return str(work.resume(caller, args.resume))
            req = SynthesisRequest(set_name=args.set, **{**body, "tags": tuple(args.tags)})
            return str(work.synthesize(caller, req))

        view = run_local(args, "synthesis", start)
    return print_view(view, args.json, _synthesis_lines)


def _review(args: argparse.Namespace) -> int:
    status = "accepted" if args.accept_all or args.accept else "rejected"
    ids = args.accept or args.reject
    if args.url:
        from service.cli.remote import call

        body = {"status": status, "ids": ids, "all": ids is None, "reason": args.reason}
        changed = call(args.url, "POST", f"/eval/sets/{args.set}/proposals/review", json=body)["changed"]
    else:
        from service.access.principals import local_cli
        from service.application.work import Work

        with local_runtime(args) as runtime:
            changed = Work(runtime).review(local_cli(), args.set, ids, status, args.reason)
    print(f"{len(changed)} case(s) {status}" + (f" into set {args.set}" if status == "accepted" else ""))
    return EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    space = _space(args.space)
    body = {
        "set": args.set,
        "space": space,
        "search": args.search,
        "samples": args.samples,
        "seed": args.seed,
        "metric": args.metric,
        "unit": args.unit,
        "test_share": args.test_share,
    }
    if args.url:
        view = run_remote(args.url, "/eval/sweeps", body, "sweeps")
    else:
        from eval.storage import load_set
        from service.evaluation.sweeps import SweepRequest

        name, cases = load_set(args.set) if Path(args.set).suffix == ".jsonl" else (args.set, None)

        def start(work: Any, caller: Any) -> str:
            req = SweepRequest(
                name, space, args.search, args.samples, args.seed, args.metric, args.unit, args.test_share
            )
            return str(work.sweep(caller, req, cases))

        view = run_local(args, "sweep", start)
    return print_view(view, args.json, _sweep_lines)


def _answers(args: argparse.Namespace) -> int:
    from eval.judge import parse_items

    try:
        text = args.file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalError(f"{args.file} does not exist") from None
    items = parse_items(text, str(args.file))
    if args.url:
        body = {
            "set": args.set,
            "items": [i.to_json() for i in items],
            "run_id": args.run_id,
            "k": args.k,
            "samples": args.samples,
        }
        view = run_remote(args.url, "/eval/answers", body, "answers")
    else:
        from service.evaluation.answers import AnswersRequest

        def start(work: Any, caller: Any) -> str:
            return str(work.grade(caller, AnswersRequest(args.set, tuple(items), args.run_id, args.k, args.samples)))

        view = run_local(args, "answers", start)
    return print_view(view, args.json, _answer_lines)


def _space(value: str) -> dict[str, Any]:
    text = Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value
    try:
        space = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalError(f"--space is not JSON ({exc.msg}): write e.g. '{{\"alpha\": [0.3, 0.5]}}'") from None
    if not isinstance(space, dict):
        raise EvalError('--space must be a JSON object, e.g. {"alpha": [0.3, 0.5]}')
    return space


# -- running and following ----------------------------------------------------------------------------------------


@contextmanager
def local_runtime(args: argparse.Namespace) -> Iterator[Any]:
    from service.runtime import Runtime

    runtime = Runtime(settings_of(args))
    runtime.warm_up()
    try:
        yield runtime
    finally:
        runtime.close()


def run_local(
    args: argparse.Namespace,
    kind: str,
    start: Callable[[Any, Any], str],
    after: Callable[[Any, Any, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Start the work in this process, as the service would, follow it to its end; its view as the API shows it.
    `after(work, caller, view)` runs once it has ended, before the data directory is let go."""
    from service.access.principals import local_cli
    from service.application.work import Work

    caller = local_cli()
    with local_runtime(args) as runtime:
        work = Work(runtime)
        result_id = start(work, caller)
        print(f"{kind} {result_id} started", file=sys.stderr)
        said: tuple[int, int] | None = None
        with progress_bar(kind) as bar:
            while True:
                view = work.view(caller, kind, result_id)
                if view.job is not None:
                    bar(view.job.done, view.job.total)
                    said = _say(kind, result_id, (view.job.done, view.job.total), said)
                if view.status in ENDED:
                    break
                runtime.evals.wait(POLL_SECONDS)
        out: dict[str, Any] = view.to_json(full=True)
        if after is not None:
            after(work, caller, out)
        return out


def run_remote(url: str, path: str, body: dict[str, Any], plural: str) -> dict[str, Any]:
    from service.cli.remote import no_delay_client

    url = url.rstrip("/")
    with no_delay_client(timeout=60) as client, progress_bar(plural) as bar:
        response = client.post(f"{url}{path}", json=body)
        if response.status_code != 202:
            raise EvalError(f"{url} answered {response.status_code}: {response.text[:500]}")
        result_id = response.json()["id"]
        print(f"{plural} {result_id} started on {url}", file=sys.stderr)
        said: tuple[int, int] | None = None
        while True:
            view = poll(client, f"{url}/eval/{plural}/{result_id}")
            progress = view.get("progress") or {}
            bar(progress.get("done", 0), progress.get("total", 0))
            said = _say(plural, result_id, (progress.get("done", 0), progress.get("total", 0)), said)
            if view["status"] in ENDED:
                return view
            time.sleep(POLL_SECONDS)


def _say(kind: str, result_id: str, now: tuple[int, int], said: tuple[int, int] | None) -> tuple[int, int]:
    """Where the work stands, a line on stderr each time it moves, where no progress bar shows (not a terminal)."""
    if now != said and not sys.stderr.isatty():
        print(f"{kind} {result_id}: {now[0]}/{now[1]}", file=sys.stderr)
    return now


def print_view(view: dict[str, Any], as_json: bool, lines: Callable[[dict[str, Any]], list[str]]) -> int:
    if as_json:
        print(json.dumps(view, indent=1, ensure_ascii=False))
    elif view["status"] == "done":
        print("\n".join(lines(view["result"] or view["summary"] or {})))
    if view["status"] != "done":
        print(f"plumbline: {view['kind']} {view['id']} ended {view['status']}: {view.get('error')}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _synthesis_lines(s: dict[str, Any]) -> list[str]:
    by = s.get("by_status", {})
    overlap = s.get("overlap", {})
    usage = s.get("usage", {})
    out = [
        f"set {s.get('set')}: {s.get('drafted', 0)} questions drafted from {s.get('passages', 0)} chunks "
        f"by {s.get('generator', {}).get('model')} ({s.get('generator', {}).get('prompt_version')})",
        "  " + ", ".join(f"{status} {n}" for status, n in sorted(by.items())),
    ]
    if s.get("discarded_by_reason"):
        out.append("  discarded: " + ", ".join(f"{r} {n}" for r, n in s["discarded_by_reason"].items()))
    if overlap.get("count"):
        out.append(
            f"  copy overlap (longest run of the chunk's words / question words): p50 {overlap['p50']:.2f}, "
            f"p90 {overlap['p90']:.2f}, max {overlap['max']:.2f}"
        )
    out.append(
        f"  LLM: {usage.get('requests', 0)} requests, {usage.get('prompt_tokens', 0)} prompt + "
        f"{usage.get('completion_tokens', 0)} completion tokens, {usage.get('retries', 0)} retries"
    )
    if by.get("proposed"):
        out.append(f"  review them in the web page, or: plumbline eval review --set {s.get('set')} --accept-all")
    return out


def _sweep_lines(record: dict[str, Any]) -> list[str]:
    from eval.sweep import SweepResult, format_sweep_table

    return [format_sweep_table(SweepResult.from_json(record))]


def _answer_lines(r: dict[str, Any]) -> list[str]:
    out = [
        f"set {r.get('set_name')}: {r.get('graded', 0)} answers graded ({r.get('ungraded', 0)} ungraded) by "
        f"{r.get('judge_model')} ({r.get('prompt_version')}), {r.get('samples_per_item')} samples each",
        "| scope | " + " | ".join(sorted(r.get("overall", {}))) + " |",
        "|---|" + "---|" * len(r.get("overall", {})),
        "| all | " + " | ".join(f"{v:.2f}" for _, v in sorted(r.get("overall", {}).items())) + " |",
    ]
    for c in r.get("by_category", []):
        means = c.get("means", {})
        out.append(
            f"| {c['name']} ({c['graded']}) | " + " | ".join(f"{v:.2f}" for _, v in sorted(means.items())) + " |"
        )
    note = (r.get("retrieval") or {}).get("note")
    if note:
        out.append(note)
    return out
