"""A FAKE OpenAI-compatible chat-completions server, for tests: real HTTP on 127.0.0.1, scripted answers.

It is not an LLM: each request to `POST /v1/chat/completions` is answered by the next scripted behaviour
(`FakeOpenAI.script`), or, when none is left, by `default(body)`, a function of the request's JSON body (so a test
can answer by the prompt). Every request's body and headers are recorded, and the most requests in flight at once
is tracked. Closing the fake wakes any `Delay` or `Hold` still waiting, so a test's teardown does not wait for them.

Example:
    >>> with FakeOpenAI() as fake:  # doctest: +SKIP
    ...     fake.script(Status(429, headers={"Retry-After": "7"}), Reply(json={"question": "Why?"}))
    ...     client = ChatClient(LLMConfig(fake.base_url, "m"), sleep=waits.append)
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """A 200 chat completion: its content is `content` as it is if given, else `json` serialised."""

    json: Mapping[str, Any] | None = field(default_factory=lambda: {"ok": True})
    content: str | None = None
    finish_reason: str = "stop"
    refusal: str | None = None
    usage: Mapping[str, int] | None = field(default_factory=lambda: {"prompt_tokens": 11, "completion_tokens": 7})
    model: str = "fake-model"
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self, number: int) -> dict[str, Any]:
        content = self.content if self.content is not None else None if self.json is None else json.dumps(self.json)
        answer: dict[str, Any] = {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": self.refusal},
                    "finish_reason": self.finish_reason,
                }
            ],
        }
        if self.usage is not None:
            answer["usage"] = {**self.usage, "total_tokens": sum(self.usage.values())}
        return answer


def Refusal(text: str) -> Reply:  # noqa: N802  (reads as the other behaviours do)
    """A 200 whose message declines: `refusal` set, no content (OpenAI's structured-output refusal)."""
    return Reply(json=None, content=None, refusal=text)


@dataclass(frozen=True)
class Status:
    """An error status with an OpenAI-style error body (or `body` as given: a dict as JSON, a str as it is)."""

    status: int
    body: Mapping[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Malformed:
    """A 200 (or `status`) whose body is `text` as it is: not JSON, or JSON that is no chat completion."""

    text: str
    status: int = 200


@dataclass(frozen=True)
class Unsupported:
    """A server refusing a `response_format`: OpenAI's 400 by default; `status=500` with `llama_cpp=True` is what
    llama-cpp-python's server answers to `json_schema` (a validation error naming response_format)."""

    what: str = "response_format"
    status: int = 400
    llama_cpp: bool = False

    def body(self) -> dict[str, Any]:
        if self.llama_cpp:
            message = (
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
            )
            return {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}
        message = f"Invalid parameter: '{self.what}' of type 'json_schema' is not supported with this model."
        return {"error": {"message": message, "type": "invalid_request_error", "param": self.what, "code": None}}


@dataclass(frozen=True)
class Delay:
    """Wait `seconds` (woken early when the fake closes), then answer with `then`."""

    seconds: float
    then: Behaviour = field(default_factory=Reply)


@dataclass(frozen=True)
class Hold:
    """Wait until `release` is set (at most `timeout` seconds, or until the fake closes), then answer with `then`."""

    release: threading.Event
    then: Behaviour = field(default_factory=Reply)
    timeout: float = 10.0


Behaviour = Reply | Status | Malformed | Unsupported | Delay | Hold


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON, or the text if it was not JSON


def answer_ok(_: Any) -> Behaviour:
    return Reply()


class FakeOpenAI:
    """A fake for tests: an OpenAI-compatible chat-completions server on a free loopback port.

    `api_key`: when set, a request without `Authorization: Bearer <api_key>` gets a 401, as OpenAI answers.
    `default`: the behaviour for a request when the script is empty, from the request's JSON body.

    Example:
        >>> with FakeOpenAI() as fake:
        ...     fake.script(Reply(json={"q": "Why?"}))
        ...     import httpx
        ...     httpx.post(f"{fake.base_url}/chat/completions", json={"messages": []}).json()["choices"][0]["message"]
        {'role': 'assistant', 'content': '{"q": "Why?"}', 'refusal': None}
    """

    def __init__(self, *, api_key: str | None = None, default: Callable[[Any], Behaviour] = answer_ok) -> None:
        self.api_key = api_key
        self.default = default
        self.requests: list[Recorded] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._queue: deque[Behaviour] = deque()
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-openai", daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with these, one each, in order."""
        with self._changed:
            self._queue.extend(behaviours)

    @property
    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    def wait_in_flight(self, at_least: int, timeout: float) -> bool:
        """Whether `at_least` requests were in flight at once within `timeout` seconds (woken by each arrival)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._in_flight >= at_least, timeout)

    def bodies(self) -> list[Any]:
        with self._changed:
            return [r.body for r in self.requests]

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- serving ----------------------------------------------------------------------------------------------

    def _arrive(self, record: Recorded) -> Behaviour | None:
        with self._changed:
            self.requests.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            self._changed.notify_all()
            return self._queue.popleft() if self._queue else None

    def _leave(self) -> None:
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()

    def _resolve(self, behaviour: Behaviour) -> Reply | Status | Malformed | Unsupported:
        while isinstance(behaviour, Delay | Hold):
            if isinstance(behaviour, Delay):
                self._closing.wait(behaviour.seconds)
            else:
                release, closing = behaviour.release, self._closing
                deadline = behaviour.timeout
                while deadline > 0 and not release.is_set() and not closing.is_set():
                    release.wait(0.05)
                    deadline -= 0.05
            behaviour = behaviour.then
        return behaviour

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

            def log_message(self, *_: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:  # http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                record = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                scripted = fake._arrive(record)
                try:
                    if self.path != CHAT_PATH:
                        self._send(404, {"error": {"message": f"Unknown path {self.path}", "type": "not_found"}})
                        return
                    if fake.api_key is not None and record.headers.get("authorization") != f"Bearer {fake.api_key}":
                        error = {"message": "Incorrect API key provided.", "type": "invalid_request_error"}
                        self._send(401, {"error": error})
                        return
                    self._answer(fake._resolve(scripted if scripted is not None else fake.default(body)))
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass
                finally:
                    fake._leave()

            def _answer(self, behaviour: Reply | Status | Malformed | Unsupported) -> None:
                if isinstance(behaviour, Reply):
                    self._send(200, behaviour.body(len(fake.requests)), behaviour.headers)
                elif isinstance(behaviour, Status):
                    body = behaviour.body
                    if body is None:
                        body = {"error": {"message": f"fake error {behaviour.status}", "type": "server_error"}}
                    self._send(behaviour.status, body, behaviour.headers)
                elif isinstance(behaviour, Malformed):
                    self._send(behaviour.status, behaviour.text)
                else:
                    self._send(behaviour.status, behaviour.body())

            def _send(
                self, status: int, body: Mapping[str, Any] | str, headers: Mapping[str, str] | None = None
            ) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
