"""Overload: do health checks and searches still answer while eval runs pile up?

    python benchmarks/overload.py [--seconds 60] [--eval-clients 45] [--search-clients 8]

Serves the demo handbook from `plumbline serve` in its own process (data cached under data/bench-overload), then
measures, over real HTTP on loopback:
1. idle: `/health/live`, `/health/ready` and `/search` latency with nothing else running;
2. overload: the same probes while `--eval-clients` clients post `/eval/run` (the 78-case handbook set) in a
   loop and `--search-clients` clients search in a loop, for a bounded time.
It prints one table (p50, p99 and max in ms, and the overload/idle ratio of the p50) and how the eval posts were
answered (200 ran, 429 refused with Retry-After). Before the bounded eval slots, 45 concurrent runs made one
liveness check take 56 s. Every loop is bounded in count and time and talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.speed import ROOT, serve
from service.cli.remote import no_delay_client

DATA = ROOT / "data" / "bench-overload"
QUERIES = ["vpn error LC-419", "refund window annual plan", "parental leave weeks", "password rotation policy"]


def probe(url: str, path: str, seconds: float, stop: threading.Event | None = None) -> list[float]:
    """Latencies (ms) of one client calling `path` back to back for `seconds` (or until `stop`), at most 5000."""
    out: list[float] = []
    deadline = time.monotonic() + seconds
    with no_delay_client(timeout=120) as client:
        for i in range(5000):
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                break
            start = time.perf_counter()
            if path == "/search":
                r = client.post(f"{url}/search", json={"query": QUERIES[i % len(QUERIES)], "k": 10})
            else:
                r = client.get(f"{url}{path}")
            r.raise_for_status()
            out.append((time.perf_counter() - start) * 1000)
    return out


def eval_client(url: str, stop: threading.Event, answers: Counter[int]) -> None:
    with no_delay_client(timeout=600) as client:
        for _ in range(1000):
            if stop.is_set():
                return
            r = client.post(f"{url}/eval/run", json={"set": "handbook", "include_cases": False})
            answers[r.status_code] += 1
            if r.status_code == 429:  # what a polite client does
                stop.wait(float(r.headers.get("retry-after", "1")))


def search_client(url: str, stop: threading.Event, latencies: list[float]) -> None:
    latencies.extend(probe(url, "/search", 3600, stop))


def row(name: str, idle: list[float], loaded: list[float]) -> str:
    def p(xs: list[float], q: int) -> float:
        return float(np.percentile(xs, q))

    ratio = statistics.median(loaded) / statistics.median(idle)
    return (
        f"| {name} | {len(idle)} / {len(loaded)} | {p(idle, 50):.1f} / {p(loaded, 50):.1f} | "
        f"{p(idle, 99):.1f} / {p(loaded, 99):.1f} | {max(idle):.1f} / {max(loaded):.1f} | {ratio:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--eval-clients", type=int, default=45)
    parser.add_argument("--search-clients", type=int, default=8)
    args = parser.parse_args()
    url, stop_server = serve(DATA, "")
    try:
        subprocess.run(
            [sys.executable, "-m", "service.cli.main", "ingest", str(ROOT / "demo" / "handbook"), "--url", url],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        probe(url, "/search", 2)  # warm
        idle = {path: probe(url, path, 10) for path in ("/health/live", "/health/ready", "/search")}
        stop, answers, searches = threading.Event(), Counter[int](), list[float]()
        workers = [threading.Thread(target=eval_client, args=(url, stop, answers)) for _ in range(args.eval_clients)]
        workers += [
            threading.Thread(target=search_client, args=(url, stop, searches)) for _ in range(args.search_clients)
        ]
        for w in workers:
            w.start()
        time.sleep(2)  # let the eval runs fill their slots
        loaded: dict[str, list[float]] = {}
        probes = [
            threading.Thread(target=lambda p=p: loaded.__setitem__(p, probe(url, p, args.seconds)))
            for p in ("/health/live", "/health/ready")
        ]
        for t in probes:
            t.start()
        for t in probes:
            t.join()
        stop.set()
        for w in workers:
            w.join()
        loaded["/search"] = searches
    finally:
        stop_server()
    print(f"\n{args.eval_clients} eval clients + {args.search_clients} search clients for {args.seconds:g} s")
    print("| probe | requests idle / loaded | p50 ms | p99 ms | max ms | p50 ratio |")
    print("|---|---|---|---|---|---|")
    for path in ("/health/live", "/health/ready", "/search"):
        if loaded[path]:  # no search clients: no loaded searches
            print(row(path, idle[path], loaded[path]))
    print(f"\n/eval/run answers: {dict(sorted(answers.items()))}")
    live = loaded["/health/live"] + loaded["/health/ready"]
    print(f"health_p99_ms_under_load={np.percentile(live, 99):.1f} health_max_ms_under_load={max(live):.1f}")


if __name__ == "__main__":
    main()
