"""A real `plumbline serve` in its own process, for tests that kill it, fill its disk or fuzz it over HTTP.

The server binds port 0 and the test learns the port, and when the service is ready, from the lines the
server logs: nothing sleeps or polls (but `kill`, which watches /proc until the killed processes are gone). A
reader thread keeps draining the log (a full pipe would stall the server) and keeps every line for assertions.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 180.0


class ServerProcess:
    """`plumbline serve --data-dir DATA --port 0` with extra environment (e.g. `PLUMBLINE_CRASH_AT`).

    Example:
        >>> with ServerProcess(tmp_path / "data") as server:  # doctest: +SKIP
        ...     httpx.get(f"{server.url}/health/ready").status_code
        200
    """

    def __init__(self, data_dir: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.env = {**os.environ, "PLUMBLINE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.args = list(args)
        self.lines: list[str] = []
        self.url = ""
        self._events: queue.Queue[str | None] = queue.Queue()
        self._process: subprocess.Popen[str] | None = None

    def start(self, wait_ready: bool = True) -> ServerProcess:
        command = [sys.executable, "-m", "service.cli.main", "serve", "--data-dir", str(self.data_dir), "--port", "0"]
        self._process = subprocess.Popen(
            [*command, *self.args],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, with the index's engine processes: `kill` ends them all
        )
        threading.Thread(target=self._drain, daemon=True).start()
        if wait_ready:
            self.wait_for(r"Uvicorn running on http://[\d.]+:(\d+)")
            self.wait_for(r"ready: \d+ documents")
        return self

    def wait_for(self, pattern: str) -> re.Match[str]:
        """Block until the server logs a line matching `pattern` (also one logged earlier); fail if it exits."""
        regex = re.compile(pattern)
        for seen in list(self.lines):
            if match := regex.search(seen):
                return self._note(match)
        while True:
            try:
                line = self._events.get(timeout=STARTUP_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no log line matching {pattern!r}:\n{self.log}") from None
            if line is None:
                raise AssertionError(f"the server exited ({self.returncode}) before {pattern!r}:\n{self.log}")
            if match := regex.search(line):
                return self._note(match)

    def _note(self, match: re.Match[str]) -> re.Match[str]:
        if match.re.pattern.startswith("Uvicorn running"):
            self.url = f"http://127.0.0.1:{match.group(1)}"
        return match

    def _drain(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._events.put(line)
        self._events.put(None)

    @property
    def log(self) -> str:
        return "\n".join(self.lines[-200:])

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process else None

    def wait(self, timeout: float = 60) -> int:
        assert self._process is not None
        return self._process.wait(timeout)

    def kill(self) -> int:
        """SIGKILL to the server and its engine processes at once, as when a container ends; returns once none
        is left holding a file (a disk can then be remounted, the data directory opened)."""
        assert self._process is not None
        group = self._process.pid
        with suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        code = self.wait()
        # up to 30 s, then on regardless: the caller's next step says what is still held
        until(lambda: not any(_in_group(stat, group) for stat in Path("/proc").glob("[0-9]*/stat")), 30, every=0.05)
        return code

    def stop(self) -> int:
        """A clean shutdown (SIGTERM), as an operator or Kubernetes would do it."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        return self.wait()

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 120), **kwargs)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.kill()


def _in_group(stat: Path, group: int) -> bool:
    """Whether the process of `/proc/PID/stat` is a live (not zombie) member of process group `group`."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False  # gone meanwhile
    return fields[0] != "Z" and int(fields[2]) == group


def plumbline(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `plumbline` CLI in a child process; its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli.main", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
