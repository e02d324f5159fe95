"""Access under load: searches, ingests and incident reports at once, with auth on, over real HTTP on loopback.

    python benchmarks/access_load.py [--seconds 30] [--clients 16]

Serves the demo handbook from `plumbline serve` in its own process (a fresh temp data directory), with keys made as
`plumbline keys create` makes them: tenant-bound keys for searching, ingesting and reporting. Half the clients
search, a quarter ingest one new document per request, a quarter post one new incident per request; each client
runs at most 10,000 requests and stops after `--seconds`. It prints, per operation, throughput, p50/p99 latency and
errors (any answer other than the expected 200/201, or a transport error), then checks that nothing acknowledged
was lost: every acknowledged document and incident is read back. The same load then runs against a server with
auth off, and the last column is the auth-on/auth-off ratio of the p50 (what checking keys costs).
Target (issue 10): zero errors and zero lost writes at 16 concurrent clients.

    python benchmarks/access_load.py --flood-only

The flood (run first, and alone with `--flood-only`): `--flood` clients (6) at once each send a key-less 60 MB
`POST /documents` body to the server with auth on; it prints their statuses and the server's peak memory (VmHWM)
before and after. Target (trust, round two): 401s, and a peak within a few MB of idle.

    python benchmarks/access_load.py --hog-only [--seconds 20]

The hog (run after the flood, and alone with `--hog-only`; `--seconds` bounds it): against a server with auth on and
its default evaluation slots, `--hog` loops (2) with one `eval:run` key bound to tenant larkspur keep a background
run of the demo handbook set going (`"async": true`; resubmitted as soon as it ends, or 0.1 s after a 429), while a
key of tenant fjord runs its own (waited-on) runs of the set, one after another (0.5 s after a 429), and searches,
and an unbound `eval:admin` key starts a background monitoring run every `--monitor-every` seconds (4; the next one
once the last has ended). It prints a table (requests, 200/202, 429, other answers, p50/p99 of the 200/202s: for a
background run the time to the 202, for a waited-on run the whole run, its wait for a slot included; and for a
background run the time from the request to its start, its wait in the queue included, seen by polling every 0.1 s),
the distinct 429 reasons per row, and the server's peak memory (VmHWM) before and after. Target (trust, round two):
every monitoring run gets a slot; (round three) fjord's runs get their turn while larkspur keeps asking.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.speed import ROOT, serve
from service.access.keys import create_key
from service.access.principals import LOCAL
from service.cli.remote import no_delay_client
from service.state import open_state

QUERIES = ["vpn error LC-419", "refund window annual plan", "parental leave weeks", "password rotation policy"]
MAX_REQUESTS = 10_000


def client(
    url: str, op: str, n: int, key: str, seconds: float, out: dict[str, list[float]], acked: dict[str, list[str]]
) -> None:
    headers = {"X-API-Key": key} if key else {}
    deadline = time.monotonic() + seconds
    with no_delay_client(timeout=120) as http:
        for i in range(MAX_REQUESTS):
            if time.monotonic() > deadline:
                break
            start = time.perf_counter()
            try:
                if op == "search":
                    r = http.post(f"{url}/search", headers=headers, json={"query": QUERIES[i % 4], "k": 10})
                    ok, written = r.status_code == 200, None
                elif op == "ingest":
                    doc_id = f"load/{n}-{i}"
                    doc = {"id": doc_id, "title": doc_id, "text": f"# Load {n} {i}\n\nwords {i}"}
                    r = http.post(f"{url}/documents", headers=headers, json={"documents": [doc]})
                    ok, written = r.status_code == 200, doc_id
                else:
                    body = {
                        "question": f"client {n} question {i} about refunds",
                        "doc_id": "billing/refunds",
                        "reporter": f"load-{n}",
                        "tenant": "larkspur" if not key else None,
                    }
                    r = http.post(f"{url}/eval/incidents", headers=headers, json={k: v for k, v in body.items() if v})
                    ok, written = r.status_code == 201, (str(r.json()["incident_id"]) if r.status_code == 201 else None)
            except Exception:  # a transport error counts as an error
                ok, written = False, None
            out[op].append((time.perf_counter() - start) * 1000 if ok else float("nan"))
            if written:
                acked[op].append(written)


def lost(url: str, key: str, acked: dict[str, list[str]]) -> int:
    headers = {"X-API-Key": key} if key else {}
    missing = 0
    with no_delay_client(timeout=120) as http:
        for doc_id in acked["ingest"]:
            missing += http.get(f"{url}/documents/{doc_id}", headers=headers).status_code != 200
        for incident in acked["incident"]:
            missing += http.get(f"{url}/eval/incidents/{incident}", headers=headers).status_code != 200
    return missing


def run(auth: bool, seconds: float, clients: int) -> tuple[dict[str, list[float]], int, int]:
    data = Path(tempfile.mkdtemp(prefix="plumbline-load-"))
    keys = {"search": "", "ingest": "", "incident": "", "reader": ""}
    if auth:
        state = open_state(f"sqlite:///{data / 'state.db'}")
        for op, roles in (("search", ["search"]), ("ingest", ["ingest"]), ("incident", ["incidents:report"])):
            keys[op] = create_key(state.keys, f"load-{op}", roles, "larkspur", LOCAL)[1]
        keys["reader"] = create_key(state.keys, "load-reader", ["search", "incidents:review"], "larkspur", LOCAL)[1]
        state.close()
    os.environ["PLUMBLINE_AUTH"] = "on" if auth else "off"
    url, stop = serve(data, "", preload=ROOT / "demo" / "handbook")
    out: dict[str, list[float]] = defaultdict(list)
    acked: dict[str, list[str]] = defaultdict(list)
    try:
        ops = ["search"] * (clients // 2) + ["ingest"] * (clients // 4)
        ops += ["incident"] * (clients - len(ops))
        threads = [
            threading.Thread(target=client, args=(url, op, n, keys[op], seconds, out, acked))
            for n, op in enumerate(ops)
        ]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        missing = lost(url, keys["reader"], acked)
    finally:
        stop()
    return out, missing, int(elapsed)


FLOOD_BYTES = 60 * 1024 * 1024


def flood(clients: int) -> None:
    """`clients` key-less 60 MB uploads at once to a server with auth on; their statuses and its peak memory."""
    data = Path(tempfile.mkdtemp(prefix="plumbline-flood-"))
    os.environ["PLUMBLINE_AUTH"] = "on"
    url, stop = serve(data, "")
    try:
        statuses: list[str] = []
        before, after = _peak_around([threading.Thread(target=_upload, args=(url, statuses)) for _ in range(clients)])
    finally:
        stop()
    print(f"flood: {clients} key-less uploads of {FLOOD_BYTES // 2**20} MB at once: statuses {sorted(statuses)}")
    print(f"server peak memory (VmHWM): {before / 1024:.1f} MB before, {after / 1024:.1f} MB after")


def _peak_around(threads: list[threading.Thread]) -> tuple[int, int]:
    """Run `threads` to their end; the served process's peak memory (VmHWM, kB) before and after."""
    pid = next(p for p in _children() if b"serve" in Path(f"/proc/{p}/cmdline").read_bytes())
    before = _peak_kb(pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return before, _peak_kb(pid)


def _upload(url: str, statuses: list[str]) -> None:
    host, port = url.rsplit("/", 1)[1].split(":")
    head = f"POST /documents HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {FLOOD_BYTES}\r\n\r\n"
    piece = b"x" * 65_536
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        sock.settimeout(0.001)
        answer = b""
        for _ in range(FLOOD_BYTES // len(piece)):  # send until the server answers (it should not wait for all)
            try:
                sock.sendall(piece)
                answer = sock.recv(4096)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:  # the server answered and closed while we were sending
                break
            if answer:
                break
        sock.settimeout(60)
        if not answer:
            answer = sock.recv(4096)
    statuses.append(answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "no answer")


HOG_SET = "handbook"
HOG_ROWS = ("hog tenant eval", "other tenant eval", "other tenant search", "monitoring")


class Tally:
    """Per row: (status, ms) of each answer (status 0: a transport error), the distinct 429 reasons, and for a
    background run the ms from its request to its start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.refusals: dict[str, set[str]] = defaultdict(set)
        self.starts: dict[str, list[float]] = defaultdict(list)

    def add(self, row: str, status: int, ms: float, detail: str = "") -> None:
        with self.lock:
            self.answers[row].append((status, ms))
            if status == 429:
                self.refusals[row].add(detail)

    def started(self, row: str, ms: float | None) -> None:
        if ms is not None:
            with self.lock:
                self.starts[row].append(ms)


def _post(http: httpx.Client, url: str, key: str, body: dict[str, object]) -> tuple[int, float, dict[str, object]]:
    start = time.perf_counter()
    try:
        r = http.post(url, headers={"X-API-Key": key}, json=body)
    except httpx.TransportError:
        return 0, (time.perf_counter() - start) * 1000, {}
    ms = (time.perf_counter() - start) * 1000
    try:
        payload = r.json()
    except json.JSONDecodeError:
        payload = {}
    return r.status_code, ms, payload if isinstance(payload, dict) else {}


def _wait_run(http: httpx.Client, url: str, key: str, run_id: str, deadline: float, asked: float) -> float | None:
    """Until the background run has ended (its report, or a job neither queued nor running) or the deadline; the ms
    from `asked` (perf_counter) to the first poll that saw it no longer queued (None: it never was seen started)."""
    started = None
    while time.monotonic() < deadline:
        try:
            r = http.get(f"{url}/eval/runs/{run_id}", headers={"X-API-Key": key}, params={"include_cases": "false"})
            status = r.json().get("status", "ended") if r.status_code == 200 else "ended"
        except httpx.TransportError:
            return started
        if status != "queued" and started is None:
            started = (time.perf_counter() - asked) * 1000
        if status not in ("queued", "running"):
            return started
        time.sleep(0.1)
    return started


def _hogger(url: str, key: str, deadline: float, tally: Tally) -> None:
    body = {"set": HOG_SET, "async": True, "include_cases": False}
    with no_delay_client(timeout=120) as http:
        while time.monotonic() < deadline:
            asked = time.perf_counter()
            status, ms, payload = _post(http, f"{url}/eval/run", key, body)
            tally.add("hog tenant eval", status, ms, str(payload.get("detail", "")))
            if status == 202:
                tally.started("hog tenant eval", _wait_run(http, url, key, str(payload["run_id"]), deadline, asked))
            else:
                time.sleep(0.1)


def _other_eval(url: str, key: str, deadline: float, tally: Tally) -> None:
    body = {"set": HOG_SET, "include_cases": False}
    with no_delay_client(timeout=120) as http:
        while time.monotonic() < deadline:
            status, ms, payload = _post(http, f"{url}/eval/run", key, body)
            tally.add("other tenant eval", status, ms, str(payload.get("detail", "")))
            if status != 200:
                time.sleep(0.5)


def _other_search(url: str, key: str, deadline: float, tally: Tally) -> None:
    with no_delay_client(timeout=120) as http:
        for i in range(MAX_REQUESTS):
            if time.monotonic() > deadline:
                break
            status, ms, _ = _post(http, f"{url}/search", key, {"query": QUERIES[i % 4], "k": 10})
            tally.add("other tenant search", status, ms)


def _monitor(url: str, key: str, deadline: float, every: float, tally: Tally) -> None:
    body = {"set": HOG_SET, "monitoring": True, "async": True, "include_cases": False}
    with no_delay_client(timeout=120) as http:
        while time.monotonic() < deadline:
            tick = time.monotonic() + every
            asked = time.perf_counter()
            status, ms, payload = _post(http, f"{url}/eval/run", key, body)
            tally.add("monitoring", status, ms, str(payload.get("detail", "")))
            if status == 202:
                tally.started("monitoring", _wait_run(http, url, key, str(payload["run_id"]), deadline, asked))
            time.sleep(max(0.0, min(tick, deadline) - time.monotonic()))


def hog(seconds: float, hogs: int, every: float) -> None:
    """A tenant keeping eval slots busy for `seconds`, beside another tenant's runs and searches and monitoring."""
    data = Path(tempfile.mkdtemp(prefix="plumbline-hog-"))
    state = open_state(f"sqlite:///{data / 'state.db'}")
    hog_key = create_key(state.keys, "load-hog", ["eval:run"], "larkspur", LOCAL)[1]
    other_key = create_key(state.keys, "load-other", ["eval:run", "search"], "fjord", LOCAL)[1]
    admin_key = create_key(state.keys, "load-monitor", ["eval:run", "eval:admin"], None, LOCAL)[1]
    state.close()
    os.environ["PLUMBLINE_AUTH"] = "on"
    url, stop = serve(data, "", preload=ROOT / "demo" / "handbook")
    tally = Tally()
    try:
        deadline = time.monotonic() + seconds
        threads = [threading.Thread(target=_hogger, args=(url, hog_key, deadline, tally)) for _ in range(hogs)]
        threads.append(threading.Thread(target=_other_eval, args=(url, other_key, deadline, tally)))
        threads.append(threading.Thread(target=_other_search, args=(url, other_key, deadline, tally)))
        threads.append(threading.Thread(target=_monitor, args=(url, admin_key, deadline, every, tally)))
        before, after = _peak_around(threads)
    finally:
        stop()
    print(f"hog: {hogs} larkspur loops of background runs for {seconds:g} s; fjord runs and searches; monitoring")
    print("| row | requests | 202/200 | 429 | other | p50 ms | p99 ms | started | to start p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in HOG_ROWS:
        answers = tally.answers[row]
        good = np.array([ms for status, ms in answers if status in (200, 202)])
        refused = sum(status == 429 for status, _ in answers)
        others = len(answers) - len(good) - refused
        starts = np.array(tally.starts[row])
        cells = [f"{len(answers)}", f"{len(good)}", f"{refused}", f"{others}", *_percentiles(good)]
        cells += [f"{len(starts)}", *_percentiles(starts)] if row in ("hog tenant eval", "monitoring") else ["-"] * 3
        print(f"| {row} | {' | '.join(cells)} |")
    for row in HOG_ROWS:
        for detail in sorted(tally.refusals[row]):
            print(f"429 to {row}: {detail}")
    print(f"server peak memory (VmHWM): {before / 1024:.1f} MB before, {after / 1024:.1f} MB after")


def _percentiles(ms: np.ndarray) -> list[str]:
    """p50 and p99 of `ms`, or dashes for none."""
    return [f"{np.percentile(ms, q):.1f}" for q in (50, 99)] if len(ms) else ["-", "-"]


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            out.append(int(stat.parent.name))
    return out


def _peak_kb(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="30 for the load, 20 for the hog")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--flood", type=int, default=6, help="key-less 60 MB uploads sent at once (0: none)")
    parser.add_argument("--flood-only", action="store_true", help="run the flood only")
    parser.add_argument("--hog", type=int, default=2, help="loops of one tenant's background eval runs (0: none)")
    parser.add_argument("--hog-only", action="store_true", help="run the hog only (--seconds: 20 unless given)")
    parser.add_argument("--monitor-every", type=float, default=4, help="seconds between monitoring runs (hog)")
    args = parser.parse_args()
    if args.flood and not args.hog_only:
        flood(args.flood)
    if args.flood_only:
        return
    if args.hog:
        hog(args.seconds if args.seconds is not None else 20, args.hog, args.monitor_every)
    if args.hog_only:
        return
    args.seconds = args.seconds if args.seconds is not None else 30
    on, lost_on, elapsed = run(True, args.seconds, args.clients)
    off, lost_off, _ = run(False, args.seconds, args.clients)
    print(f"{args.clients} clients for {args.seconds:g} s on loopback, 2 cores; auth on, then off")
    print("| operation | requests | per s | p50 ms | p99 ms | errors | p50 on/off |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for op in ("search", "ingest", "incident"):
        lat = np.array(on[op])
        good = lat[~np.isnan(lat)]
        base = np.array(off[op])
        base = base[~np.isnan(base)]
        ratio = float(np.median(good) / np.median(base)) if len(good) and len(base) else float("nan")
        print(
            f"| {op} | {len(lat)} | {len(lat) / elapsed:.1f} | {np.percentile(good, 50):.1f} | "
            f"{np.percentile(good, 99):.1f} | {int(np.isnan(lat).sum())} | {ratio:.2f} |"
        )
    print(f"acknowledged writes lost: {lost_on} with auth on, {lost_off} with auth off")
    sys.exit(1 if lost_on or any(np.isnan(np.array(on[op])).any() for op in on) else 0)


if __name__ == "__main__":
    main()
