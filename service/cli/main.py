"""The `plumbline` command: serve, ingest, and evaluate (in-process or against a URL).

    plumbline serve [--data-dir D] [--host H] [--port P] [--ingest PATH ...]
    plumbline ingest PATH [--url U | --data-dir D]
    plumbline eval run [--url U | --data-dir D] --set S [--k 1 5 10] [--unit doc|chunk] [--baseline B] [--json]
                       [--monitoring]   (with --url: the service runs it; this follows its progress)
    plumbline doctor [--data-dir D] [--repair]
    plumbline incidents post|list|review|export [--url U] ...   (see service.cli.incidents)
    plumbline keys create|list|rotate|revoke [--data-dir D | --secrets-file F | --url U]   (see service.cli.keys)
    plumbline export FILE [--data-dir D] / plumbline import FILE [--data-dir D]   (see service.cli.transfer)
    plumbline tune run|promote|rollback|status [--url U | --data-dir D] ...   (see service.cli.tune)

`ingest` stops at a batch that fails (exit 3) or is refused (exit 2), with a JSON report of what is committed, what
is not, and what may be either.
`eval run` exits 0 when the gate passes (or no baseline was given), 1 on a regression, 2 on bad input,
3 on an unexpected error: what a CI job needs. `doctor` exits 0 when the index is clean (or was repaired),
1 when it found problems it left (or could not fix), 2 when the data directory cannot be used (e.g. a
server holds it). Every command that opens a data directory takes its lock first, and a refused one
exits 2 having touched nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from eval.errors import EvalError
from eval.gate import judging
from eval.present import format_table, report_json
from eval.report import build_report
from eval.runner import Retriever, Run, run_set
from eval.storage import dump_run, load_baseline, load_set
from eval.verdict import GatePolicy, GateRequest, GateResult
from service.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REGRESSION,
    POLL_SECONDS,
    audit,
    auditing,
    data_dir_option,
    poll,
    progress_bar,
    settings_of,
)
from service.errors import PlumblineError
from service.infra import logs
from service.infra.files import write_atomic


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing model must fail fast, not retry the hub
    args = _parser().parse_args(argv)
    logs.configure("text")  # `serve` switches to the configured format (JSON by default)
    try:
        result: int = args.func(args)
        return result
    except (EvalError, PlumblineError, OSError, ValueError) as exc:  # ValueError: pydantic, decoding
        print(f"plumbline: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception:  # never 1: CI reads 1 as a regression
        logging.getLogger("plumbline").exception("unexpected error")
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    from service.cli import calibration as calibration_cli
    from service.cli import hygiene as hygiene_cli
    from service.cli import incidents as incidents_cli
    from service.cli import ingest as ingest_cli
    from service.cli import keys as keys_cli
    from service.cli import transfer as transfer_cli
    from service.cli import tune as tune_cli
    from service.cli import work as work_cli

    p = argparse.ArgumentParser(prog="plumbline", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the HTTP service")
    data_dir_option(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--ingest", type=Path, action="append", default=[], help="index this folder at start-up")
    serve.set_defaults(func=_serve)

    ingest_cli.add_parser(sub)

    ev = sub.add_parser("eval", help="evaluate retrieval on a labelled set").add_subparsers(required=True)
    work_cli.add_parsers(ev)
    hygiene_cli.add_parsers(ev)
    calibration_cli.add_parsers(ev)
    run = ev.add_parser("run", help="replay a labelled set; gate against a baseline")
    target = run.add_mutually_exclusive_group()
    target.add_argument("--url", help="evaluate a running Plumbline through its /search")
    data_dir_option(target)
    run.add_argument("--set", required=True, help="set name, or a path to a .jsonl file")
    run.add_argument("--k", type=int, nargs="+", default=[1, 5, 10])
    run.add_argument("--unit", choices=["chunk", "doc"], default="chunk")
    run.add_argument("--baseline", help="baseline name, or a path to a run .json file")
    run.add_argument(
        "--tolerance",
        type=float,
        help="allowed absolute drop per metric: at most the baseline policy's (the gate is judged by the policy "
        "stored with the baseline; these options may only make it stricter, anything looser is refused)",
    )
    run.add_argument("--metrics", nargs="+", default=[], help="metrics to gate besides the baseline policy's")
    run.add_argument(
        "--require-significance",
        action=argparse.BooleanOptionalAction,
        help="--no-require-significance: a drop fails even if not significant, where the policy requires it",
    )
    run.add_argument("--ingest", type=Path, action="append", default=[], help="in-process: index this first")
    run.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="search option, e.g. mode='\"keyword\"' or alpha=0.3 (repeatable)",
    )
    run.add_argument(
        "--monitoring",
        action="store_true",
        help="a monitoring run of the served configuration, which feeds the gauges and alerts; with --url the "
        "service runs it (one replica at a time) while this shows its progress: a Kubernetes CronJob's command",
    )
    run.add_argument(
        "--exclude-doc",
        action="append",
        default=[],
        metavar="ID",
        help="what if: run again without this document and compare (repeatable; see `eval distractors`)",
    )
    run.add_argument("--exclude-tag", action="append", default=[], metavar="TAG", help="what if: without this tag")
    run.add_argument("--save-run", type=Path, help="also write the run record to this file")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.set_defaults(func=_eval_run)

    doctor = sub.add_parser("doctor", help="check a data directory offline (the server must be stopped)")
    data_dir_option(doctor)
    doctor.add_argument("--repair", action="store_true", help="fix what can be fixed, and say what was done")
    doctor.set_defaults(func=_doctor)

    incidents_cli.add_parser(sub)
    keys_cli.add_parser(sub)
    transfer_cli.add_parser(sub)
    tune_cli.add_parser(sub)
    return p


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app

    settings = settings_of(args)
    logs.configure(settings.log_format)
    app = create_app(settings, preload=tuple(args.ingest), bound_host=args.host)  # a Host requests may carry
    # refused here, before any port is bound, if another process holds the data directory; a read-only one is
    # served, its readiness saying why nothing works
    app.state.runtime.take_lock()
    # uvicorn logs through our handlers (log_config None), and the app writes the one line per request
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)
    return EXIT_OK


def _doctor(args: argparse.Namespace) -> int:
    from service.errors import IndexMismatch
    from service.index import integrity
    from service.runtime import Runtime, build_store

    runtime = Runtime(settings_of(args))
    try:
        try:
            runtime.warm_up(check=False, search=False)
        except IndexMismatch as exc:  # report it with the rest, from the bare store
            store = build_store(runtime.settings)
            try:
                found = after = integrity.check(store, manifest=str(exc))
            finally:
                store.close()
            done: list[str] = []
        else:
            found, done, after = runtime.index.check(repair=args.repair)
            if done:
                audit(runtime, "index.repair", str(runtime.settings.data_dir), {"done": done})
    finally:
        runtime.close()
    print("\n".join(found.lines()))
    for action in done:
        print(f"repaired: {action}")
    print("clean" if after.clean else "problems left" + ("" if args.repair else ": run with --repair to fix them"))
    return EXIT_OK if after.clean else EXIT_REGRESSION


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise EvalError(f"--override {pair!r}: use KEY=JSON, e.g. alpha=0.3 or mode='\"keyword\"'")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare word such as mode=keyword
    return out


def _eval_run(args: argparse.Namespace) -> int:
    overrides = _overrides(args.override)
    config = GateRequest(
        metrics=tuple(args.metrics), tolerance=args.tolerance, require_significance=args.require_significance
    )
    GatePolicy(metrics=config.metrics).check_names(args.k)
    if args.monitoring and (overrides or _is_file(args.set) or (args.baseline and _is_file(args.baseline))):
        raise EvalError("--monitoring replays a stored set over the served configuration: no --override, no files")
    if args.monitoring and args.url:
        return _monitor_remote(args, config)
    if args.exclude_doc or args.exclude_tag:
        return _what_if(args, overrides, config)
    run, gate = _replay(args, overrides, config)
    if args.save_run:
        write_atomic(args.save_run, dump_run(run))
    report = build_report(run)
    print(json.dumps(report_json(run, report, gate), indent=1) if args.json else format_table(run, report, gate))
    return EXIT_REGRESSION if gate is not None and not gate.passed else EXIT_OK


def _what_if(args: argparse.Namespace, overrides: dict[str, Any], config: GateRequest) -> int:
    """`--exclude-doc` / `--exclude-tag`: the run as asked, then again without those documents (experiments no gate
    judges), compared case by case: what pruning them would do."""
    from eval.distractors import what_if

    if args.baseline or args.monitoring:
        raise EvalError("a what-if run (--exclude-*) is an experiment: no --baseline, no --monitoring")
    filters = dict(overrides.get("filters", {}))
    filters["exclude_doc_ids"] = [*filters.get("exclude_doc_ids", []), *args.exclude_doc]
    filters["exclude_tags"] = [*filters.get("exclude_tags", []), *args.exclude_tag]
    base, _ = _replay(args, overrides, config)
    pruned, _ = _replay(args, {**overrides, "filters": filters}, config)
    compared = what_if(base, pruned)
    if args.json:
        print(json.dumps({**report_json(pruned, build_report(pruned), None), "what_if": compared.to_json()}, indent=1))
    else:
        left_out = ", ".join(args.exclude_doc + [f"tag {t}" for t in args.exclude_tag])
        print(f"what if: without {left_out} (run {pruned.run_id}; as now: run {base.run_id}, the same cases)")
        print("\n".join(f"  {line}" for line in compared.verdicts))
        keys = [m for m in compared.key_metrics if not m.startswith("stale")]
        print("per category, as now → without them: " + ", ".join(keys))
        for category in compared.by_category:
            cells = "  ".join(f"{category.base[m]:.3f} → {category.pruned[m]:.3f}" for m in keys)
            print(f"  {category.name} ({category.cases}): {cells}")
    return EXIT_OK


def _replay(args: argparse.Namespace, overrides: dict[str, Any], config: GateRequest) -> tuple[Run, GateResult | None]:
    """One run of the set: through a remote /search (`--url`), or in this process."""
    if args.url:
        from service.cli.remote import HttpRetriever

        set_name, cases = load_set(args.set)
        baseline = load_baseline(args.baseline) if args.baseline else None
        # judged by the baseline's policy (the defaults for one that carries none), refused before the run if looser
        judged = judging(baseline.run, baseline.policy, GatePolicy(), config) if baseline else None
        retriever: Retriever = HttpRetriever(args.url, overrides)
        run = run_set(cases, retriever, set_name=set_name, ks=args.k, unit=args.unit, params=overrides)
        gate = judged.compare(run, baseline.run) if judged and baseline else None
        return (replace(run, gate=gate) if gate is not None else run), gate
    run, gate, warnings = _eval_in_process(args, overrides, config)
    for warning in warnings:
        print(f"plumbline: warning: {warning}", file=sys.stderr)
    return run, gate


def _eval_in_process(
    args: argparse.Namespace, overrides: dict[str, Any], config: GateRequest
) -> tuple[Run, GateResult | None, tuple[str, ...]]:
    """The service's own orchestration (`EvalService.evaluate_cases`): replay, gate, then store with the verdict."""
    from pydantic import ValidationError

    from service.evaluation.retriever import Evaluation
    from service.evaluation.runs import run_spec
    from service.inputs import SearchOptions
    from service.options import RunOptions, SearchOverrides
    from service.runtime import Runtime

    settings = settings_of(args)
    try:
        options = SearchOptions.model_validate(overrides)
    except ValidationError as exc:
        raise EvalError(f"--override: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
    runtime = Runtime(settings, preload=tuple(args.ingest))
    runtime.warm_up()
    try:
        set_name = Path(args.set).stem if _is_file(args.set) else args.set
        asked = RunOptions(
            set_name,
            SearchOverrides.of(options),
            tuple(args.k),
            args.unit,
            config,
            monitoring=args.monitoring,
            baseline=args.baseline,
        )
        spec = run_spec(asked, settings, runtime.pipeline)
        with progress_bar("eval") as bar, auditing(runtime, "eval.run", {"set": set_name}):  # with the run's row
            if _is_file(args.set) or (args.baseline and _is_file(args.baseline)):
                cases = load_set(args.set)[1] if _is_file(args.set) else runtime.evals.cases(args.set)
                baseline = load_baseline(args.baseline, runtime.evals.runs) if args.baseline else None
                ev: Evaluation | None = runtime.evals.evaluate_cases(spec, cases, baseline, timeout=None, progress=bar)
            else:
                ev = runtime.evals.evaluate(spec, limited=False, progress=bar)
    finally:
        runtime.close()
    if ev is None:  # evaluate returns None only when asked to run just if due, which this never asks
        raise PlumblineError("the run did not start")
    return ev.run, ev.gate, ev.warnings


def _is_file(name: str) -> bool:
    return Path(name).suffix in (".jsonl", ".json")


def _monitor_remote(args: argparse.Namespace, config: GateRequest) -> int:
    """Ask a running service for a monitoring run in the background, follow its progress, print its report."""
    from service.cli.remote import no_delay_client

    url = args.url.rstrip("/")
    body = {
        "set": args.set,
        "k": args.k,
        "unit": args.unit,
        "baseline": args.baseline,
        "tolerance": config.tolerance,
        "metrics": list(config.metrics),
        "require_significance": config.require_significance,
        "monitoring": True,
        "async": True,
    }
    with no_delay_client(timeout=60) as client, progress_bar("eval") as bar:
        response = client.post(f"{url}/eval/run", json=body)
        if response.status_code != 202:
            raise PlumblineError(f"{url} answered {response.status_code}: {response.text[:500]}")
        run_id = response.json()["run_id"]
        logging.getLogger("plumbline").info("monitoring run %s started on %s", run_id, url)
        last = -1
        while True:
            state = poll(client, f"{url}/eval/runs/{run_id}")
            if state.get("status") != "running":
                break
            done, total = state["progress"]["done"], state["progress"]["total"]
            bar(done, total)
            if done != last:
                logging.getLogger("plumbline").info("monitoring run %s: %d/%d cases", run_id, done, total)
                last = done
            time.sleep(POLL_SECONDS)
    if state.get("status") != "done":
        raise PlumblineError(f"monitoring run {run_id} ended {state.get('status')}: {state.get('error')}")
    gate = GateResult.from_json(state["gate"]) if state.get("gate") is not None else None
    if args.json:
        print(json.dumps(state, indent=1))
    else:
        print(f"run {run_id}  set {state['set']}  monitoring  cases {state['cases_total']}")
        print("  ".join(f"{name} {value:.3f}" for name, value in sorted(state["metrics"].items())))
        if gate is not None:
            print(f"gate: {gate.verdict}" + "".join(f"\n  {reason}" for reason in gate.reasons))
    return EXIT_REGRESSION if gate is not None and not gate.passed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
