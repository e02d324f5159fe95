"""The server's HTTP stack: uvicorn on uvloop with the httptools parser (what it picks by itself once they are
installed, as they are by default) against its pure-Python fallback, the asyncio loop with h11.

    python benchmarks/http_stack.py                       # the handbook demo, 6 runs (about 5 minutes on 2 cores)
    python benchmarks/http_stack.py --data-dir DIR        # an existing data directory, e.g. a speed.py index

The two stacks alternate, each run a fresh `plumbline serve` (benchmarks/speed.py's `serve`); the fallback run gets a
`PYTHONPATH` folder whose `uvloop` and `httptools` modules raise ImportError, so uvicorn falls back exactly as it
would without them. Each run times 200 `GET /health/live` and the SciFact test queries as hybrid searches (k=10),
and the part of a search's round trip outside the pipeline (the round trip minus the pipeline's `total`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.datasets import SCIFACT, require
from benchmarks.speed import MODES, ROOT, latency, serve
from eval.trec import read_queries
from service.cli.remote import no_delay_client

STACKS = ("asyncio + h11 (fallback)", "uvloop + httptools (default)")


def one_run(data_dir: Path, queries: list[str], env: dict[str, str], preload: Path | None) -> dict[str, float]:
    """Medians (ms) of one server's run: liveness, the search round trip, the pipeline's total, and their gap."""
    url, stop = serve(data_dir, "", preload=preload, env=env)
    live = []
    try:
        with no_delay_client() as client:
            for i in range(220):
                start = time.perf_counter()
                client.get(f"{url}/health/live").raise_for_status()
                if i >= 20:
                    live.append((time.perf_counter() - start) * 1000)
        search, _, stages = latency(url, queries, MODES["hybrid"])
    finally:
        stop()
    return {"live": statistics.median(live), "search": search, "total": stages["total"], "gap": stages["http"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, help="an existing data directory (default: the handbook, ingested once)")
    p.add_argument("--runs", type=int, default=6, help="runs per stack, alternating (default 6)")
    p.add_argument("--queries", type=int, default=100)
    args = p.parse_args()
    require(SCIFACT)
    tmp = Path(tempfile.mkdtemp(prefix="plumbline-http-"))
    blocked = tmp / "without"
    blocked.mkdir()
    for module in ("uvloop", "httptools"):
        (blocked / f"{module}.py").write_text('raise ImportError("left out by benchmarks/http_stack.py")\n')
    data_dir = args.data_dir or tmp / "data"
    preload = None if args.data_dir else ROOT / "demo" / "handbook"
    queries = list(read_queries(SCIFACT / "queries.jsonl").values())[: args.queries]
    models = {"PLUMBLINE_MODEL_CACHE": str(Path(tempfile.gettempdir()) / "plumbline-test-models")}
    envs = {STACKS[0]: {**models, "PYTHONPATH": str(blocked)}, STACKS[1]: models}
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in STACKS}
    for i in range(args.runs * 2):
        stack = STACKS[(i + i // 2) % 2]  # A B B A A B ...: neither always goes first
        runs[stack].append(one_run(data_dir, queries, envs[stack], preload))
        print(f"run {i + 1}: {stack}: " + ", ".join(f"{k} {v:.2f}" for k, v in runs[stack][-1].items()), flush=True)
    fields = ("live", "search", "total", "gap")
    med = {s: {f: statistics.median(r[f] for r in runs[s]) for f in fields} for s in STACKS}
    won = {f: sum(b[f] < a[f] for a, b in zip(runs[STACKS[0]], runs[STACKS[1]], strict=True)) for f in fields}
    print(f"\n### The HTTP stack, {data_dir}, {args.runs} runs each (medians of the runs' medians, ms)\n")
    print("| stack | /health/live p50 | search p50 | pipeline total p50 | search minus pipeline p50 |")
    print("|---|---|---|---|---|")
    for s in STACKS:
        print(f"| {s} | " + " | ".join(f"{med[s][f]:.2f}" for f in fields) + " |")
    ratios = " | ".join(f"{med[STACKS[1]][f] / med[STACKS[0]][f]:.2f} ({won[f]}/{args.runs})" for f in fields)
    print(f"| default / fallback (runs where the default was faster) | {ratios} |")


if __name__ == "__main__":
    main()
