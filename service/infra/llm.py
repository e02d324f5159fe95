"""A client for OpenAI-compatible chat completions (vLLM, Ollama, llama.cpp's server, LM Studio, OpenAI) that asks
for one JSON object: the synthetic questions of an eval set and the verdicts of an LLM judge.

The client posts to `{base_url}/chat/completions`, so `base_url` is the API's root *with* its version:
`http://127.0.0.1:8080/v1` (llama.cpp), `http://localhost:11434/v1` (Ollama), `https://api.openai.com/v1`.

Structured output is asked for in the strongest form the server accepts, learned once per client:

1. `json_schema`: `{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}` (OpenAI, vLLM,
   LM Studio, Ollama, llama.cpp's own `llama-server`);
2. `json_object` with the schema beside it, `{"type": "json_object", "schema": ...}`: the form llama-cpp-python's
   server constrains by (it answers `json_schema` with a 500 naming `response_format`);
3. `prompt`: no `response_format`, the schema in the system message only.

A server that refuses a form answers 400, 422 or 500 naming `response_format` or `json_schema`; the client then
tries the next form, and keeps to the one that worked. Modes 2 and 3 also describe the schema in the system message.

The reply's text is read tolerantly (`parse_json_object`): plain JSON, JSON in a Markdown fence, the first balanced
`{...}` in prose, trailing commas. What cannot be read is not an error but `ChatResult.problem`: the caller counts it
as a rejected answer. Failures of the server (429, 5xx, timeouts, refused connections, an answer that is not a chat
completion) are retried with exponential backoff and full jitter, honouring `Retry-After`; past the retries the
client raises `LLMUnavailable`. The API key travels in `Authorization: Bearer ...` and in no log line or message.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from enum import StrEnum
from types import TracebackType
from typing import Any

import httpx

from service.errors import Conflict, InvalidRequest, PlumblineError, StoreUnavailable

log = logging.getLogger("plumbline")

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# statuses by which a server says it does not know a `response_format` (llama-cpp-python's server: 500)
UNSUPPORTED_STATUSES = frozenset({400, 422, 500})
_UNSUPPORTED_WORDS = ("response_format", "json_schema")
SERVER_MESSAGE_CHARS = 300

NOT_CONFIGURED_MESSAGE = (
    "no LLM is configured: set PLUMBLINE_LLM_BASE_URL (an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 "
    "for llama.cpp's server or http://localhost:11434/v1 for Ollama) and PLUMBLINE_LLM_MODEL, and "
    "PLUMBLINE_LLM_API_KEY_FILE if the server needs a key"
)


class LLMError(PlumblineError):
    """Something went wrong talking to the LLM server (HTTP 500 unless a subclass maps otherwise)."""


class LLMNotConfigured(LLMError, Conflict):
    """A feature needs an LLM and none is configured (HTTP 409: retrying will not help until the operator sets one)."""

    def __init__(self, message: str = NOT_CONFIGURED_MESSAGE) -> None:
        super().__init__(message)


class LLMMisconfigured(LLMError, Conflict):
    """The LLM server refused the key (401/403) or knows no such URL or model (404): the operator's settings are
    wrong (HTTP 409, like `IndexMismatch`); never retried."""


class LLMRejected(LLMError):
    """The LLM server refused the request with another 4xx (a prompt over its context, a parameter it does not
    take); its message, truncated, says why (HTTP 500)."""


class LLMUnavailable(LLMError, StoreUnavailable):
    """The LLM server did not answer usefully past the retries: down, overloaded, timing out or answering with
    something that is not a chat completion (HTTP 503 with Retry-After, as a store that cannot serve: worth
    waiting for)."""


class Mode(StrEnum):
    """How structured output is asked for, strongest first."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    PROMPT = "prompt"


MODES = (Mode.JSON_SCHEMA, Mode.JSON_OBJECT, Mode.PROMPT)


@dataclass(frozen=True)
class LLMConfig:
    """Where the LLM server is and how to treat it. `base_url` is the API root with its version: the client posts
    to `{base_url}/chat/completions`.

    Example:
        >>> config = LLMConfig("http://127.0.0.1:8080/v1/", "smollm2", timeout=30)
        >>> config.url, config.host
        ('http://127.0.0.1:8080/v1/chat/completions', '127.0.0.1:8080')
        >>> "secret" in repr(LLMConfig("http://h/v1", "m", api_key="secret"))
        False
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_concurrency: int = 4
    max_retries: int = 4
    backoff: float = 1.0
    max_backoff: float = 30.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/\s]+", self.base_url or ""):
            raise InvalidRequest(
                f"PLUMBLINE_LLM_BASE_URL must be an http(s) URL such as http://127.0.0.1:8080/v1, not {self.base_url!r}"
            )
        if not (self.model or "").strip():
            raise InvalidRequest("PLUMBLINE_LLM_MODEL must name the model the LLM server serves")
        if self.timeout <= 0:
            raise InvalidRequest(f"the LLM timeout must be more than 0 seconds, not {self.timeout}")
        if self.max_concurrency < 1:
            raise InvalidRequest(f"the LLM's max concurrency must be at least 1, not {self.max_concurrency}")
        if self.max_retries < 0:
            raise InvalidRequest(f"the LLM's max retries must be 0 or more, not {self.max_retries}")
        if self.backoff < 0 or self.max_backoff < 0:
            raise InvalidRequest("the LLM's backoff and max backoff must be 0 seconds or more")

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"

    @property
    def host(self) -> str:
        """The server's host and port (no user, no path): what messages name."""
        url = httpx.URL(self.base_url)
        return f"{url.host}:{url.port}" if url.port else url.host


@dataclass(frozen=True)
class Usage:
    """Tokens and HTTP requests spent; `retries` counts the requests sent again after a failure.

    Example:
        >>> (Usage(10, 5, 1) + Usage(3, 2, 2, retries=1)).to_json()
        {'prompt_tokens': 13, 'completion_tokens': 7, 'requests': 3, 'retries': 1}
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    retries: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.requests + other.requests,
            self.retries + other.retries,
        )

    def to_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "requests": self.requests,
            "retries": self.retries,
        }


@dataclass(frozen=True)
class ChatResult:
    """One answer: `data` is the JSON object read from `text`, or None, and then either `refusal` (the model
    declined) or `problem` ("malformed JSON: ...", "truncated (max_tokens)") says why.

    Example:
        >>> ChatResult(data=None, text="Sure! {", problem="malformed JSON: ...").ok
        False
    """

    data: dict[str, Any] | None
    text: str
    refusal: str | None = None
    problem: str | None = None
    usage: Usage = Usage()
    mode: Mode = Mode.JSON_SCHEMA
    model: str = ""

    @property
    def ok(self) -> bool:
        return self.data is not None


class _Unsupported(Exception):
    """The server does not take this `response_format`."""


@dataclass
class _Tally:
    requests: int = 0
    retries: int = 0


class ChatClient:
    """Chat completions that answer one JSON object, safe to share between threads: at most
    `config.max_concurrency` requests are in flight at once, whatever the number of calling threads.

    `transport` replaces httpx's (tests); `sleep` waits between retries; `rng` draws the jitter; `clock` gives the
    time an HTTP-date `Retry-After` is measured from.

    Example:
        >>> config = LLMConfig("http://127.0.0.1:8080/v1", "qwen2.5:7b-instruct")
        >>> with ChatClient(config) as llm:  # doctest: +SKIP
        ...     result = llm.complete_json(
        ...         [{"role": "user", "content": "Ask one question about this passage: ..."}],
        ...         {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
        ...         name="question",
        ...     )
        >>> result.data, result.problem, llm.usage()  # doctest: +SKIP
        ({'question': '...'}, None, Usage(prompt_tokens=41, completion_tokens=19, requests=1, retries=0))
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        headers = {"Accept": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._http = httpx.Client(
            transport=transport,
            headers=headers,
            timeout=httpx.Timeout(config.timeout, connect=min(10.0, config.timeout)),
            # the semaphore is the one bound: a request waiting in httpx's pool would time out as if the server had
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=config.max_concurrency),
            follow_redirects=False,
        )
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        self._lock = threading.Lock()
        self._mode: Mode | None = None
        self._usage = Usage()

    # ---- public -----------------------------------------------------------------------------------------------

    def complete_json(
        self,
        messages: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any],
        *,
        name: str,
        max_tokens: int = 512,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> ChatResult:
        """Ask for one JSON object matching `schema` (`name` names it to the server: letters, digits, _ and -).

        Raises `LLMUnavailable` past the retries, `LLMMisconfigured` on 401/403/404, `LLMRejected` on another 4xx;
        an answer that is no JSON object, a refusal or a truncation is a `ChatResult` with `data` None.
        """
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise InvalidRequest(f"the schema's name must be 1-64 letters, digits, _ or -, not {name!r}")
        if not messages:
            raise InvalidRequest("complete_json needs at least one message")
        tally = _Tally()
        try:
            payload, mode = self._ask(messages, schema, name, max_tokens, temperature, seed, tally)
        except BaseException:  # what a failure spent counts too
            with self._lock:
                self._usage += Usage(0, 0, tally.requests, tally.retries)
            raise
        prompt_tokens, completion_tokens = _tokens(payload)
        used = Usage(prompt_tokens, completion_tokens, tally.requests, tally.retries)
        with self._lock:
            self._mode = mode
            self._usage += used
        return _result(payload, mode, used)

    def usage(self) -> Usage:
        """Everything this client has spent so far, failed requests included."""
        with self._lock:
            return self._usage

    def mode(self) -> Mode | None:
        """The structured-output mode the server took last, or None before the first answer."""
        with self._lock:
            return self._mode

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- the request ------------------------------------------------------------------------------------------

    def _ask(
        self,
        messages: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any],
        name: str,
        max_tokens: int,
        temperature: float | None,
        seed: int | None,
        tally: _Tally,
    ) -> tuple[dict[str, Any], Mode]:
        """The chat completion and the mode it was asked in: the learned mode first, then the weaker ones."""
        start = self.mode()
        for mode in MODES[MODES.index(start) if start else 0 :]:
            body = self._body(mode, messages, schema, name, max_tokens, temperature, seed)
            try:
                return self._post(body, tally, mode), mode
            except _Unsupported as exc:
                log.warning(
                    "the LLM server at %s does not take response_format %s (%s): trying %s",
                    self.config.host,
                    mode.value,
                    exc,
                    MODES[MODES.index(mode) + 1].value,
                )
        raise AssertionError("the prompt mode sends no response_format, so it is never refused as unsupported")

    def _body(
        self,
        mode: Mode,
        messages: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any],
        name: str,
        max_tokens: int,
        temperature: float | None,
        seed: int | None,
    ) -> dict[str, Any]:
        sent = [dict(m) for m in messages]
        if mode is not Mode.JSON_SCHEMA:
            sent = _with_instruction(sent, schema)
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": sent,
            "max_tokens": max_tokens,
            "temperature": self.config.temperature if temperature is None else temperature,
        }
        if seed is not None:
            body["seed"] = seed
        if mode is Mode.JSON_SCHEMA:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": dict(schema), "strict": True},
            }
        elif mode is Mode.JSON_OBJECT:
            body["response_format"] = {"type": "json_object", "schema": dict(schema)}
        return body

    def _post(self, body: dict[str, Any], tally: _Tally, mode: Mode) -> dict[str, Any]:
        """The chat completion's JSON envelope, retrying what is worth retrying."""
        config = self.config
        last = "nothing"
        for attempt in range(config.max_retries + 1):
            if attempt:
                tally.retries += 1
            tally.requests += 1
            wait: float | None = None
            try:
                with self._slots:
                    response = self._http.post(config.url, json=body)
            except httpx.TimeoutException as exc:
                last = f"no answer within {config.timeout:g} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {self._scrub(str(exc)) or 'the connection failed'}"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    payload, why = _envelope(response)
                    if payload is not None:
                        return payload
                    last = f"HTTP {status} but {why}"
                elif mode is not Mode.PROMPT and status in UNSUPPORTED_STATUSES and self._unsupported(response):
                    raise _Unsupported(f"HTTP {status}: {self._message(response)}")
                elif status in RETRIED_STATUSES:
                    last = f"HTTP {status}"
                    wait = self._retry_after(response.headers.get("Retry-After"))
                else:
                    raise self._refusal_error(response)
            if attempt == config.max_retries:
                break
            self._sleep(wait if wait is not None else self._backoff(attempt))
        raise LLMUnavailable(
            f"the LLM server at {config.host} did not answer usefully after {tally.requests} requests "
            f"(last: {last}): check that it is running and reachable at PLUMBLINE_LLM_BASE_URL and how loaded it is "
            f"(PLUMBLINE_LLM_MAX_CONCURRENCY lowers our share; PLUMBLINE_LLM_TIMEOUT_SECONDS allows slower answers)"
        )

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform between 0 and `backoff * 2**attempt`, capped at `max_backoff`."""
        ceiling = min(self.config.max_backoff, self.config.backoff * 2**attempt)
        with self._lock:
            return self._rng.uniform(0, ceiling)

    def _retry_after(self, value: str | None) -> float | None:
        """`Retry-After` in seconds (a number or an HTTP date), capped at `max_backoff`; None if absent or unread."""
        if not value or not value.strip():
            return None
        value = value.strip()
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(value).timestamp() - self._clock()
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
        if seconds != seconds:  # NaN
            return None
        return min(max(seconds, 0.0), self.config.max_backoff)

    def _unsupported(self, response: httpx.Response) -> bool:
        text = response.text.lower()
        return any(word in text for word in _UNSUPPORTED_WORDS)

    def _message(self, response: httpx.Response) -> str:
        """The server's error message (OpenAI's `error.message`, else `detail` or the text), cut to 300 characters."""
        text = response.text
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
            elif isinstance(body.get("detail"), str):
                text = body["detail"]
            elif body.get("detail") is not None:
                text = json.dumps(body["detail"])
        text = " ".join(self._scrub(text).split())
        return text if len(text) <= SERVER_MESSAGE_CHARS else text[: SERVER_MESSAGE_CHARS - 1] + "…"

    def _scrub(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "<key>") if key else text

    def _refusal_error(self, response: httpx.Response) -> LLMError:
        status, host = response.status_code, self.config.host
        if status in (401, 403):
            sent = "refused the API key" if self.config.api_key else "asks for an API key and none was sent"
            return LLMMisconfigured(
                f"the LLM server at {host} {sent} (HTTP {status}): check PLUMBLINE_LLM_API_KEY "
                "(or PLUMBLINE_LLM_API_KEY_FILE)"
            )
        if status == 404:
            return LLMMisconfigured(
                f"the LLM server at {host} answered 404 for {httpx.URL(self.config.url).path} with model "
                f"{self.config.model!r} ({self._message(response)}): check PLUMBLINE_LLM_BASE_URL (the API root, "
                "usually ending in /v1) and PLUMBLINE_LLM_MODEL (a model the server serves)"
            )
        return LLMRejected(f"the LLM server at {host} refused the request (HTTP {status}): {self._message(response)}")


# ---- reading answers ------------------------------------------------------------------------------------------


def _with_instruction(messages: list[dict[str, Any]], schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages with the schema described in the system message: appended to the first one if it is a system
    message with text (some chat templates take only one, first), else in a new one before the others."""
    instruction = (
        "Answer with exactly one JSON object, without code fences or any other text, that matches this JSON "
        f"Schema:\n{json.dumps(schema, ensure_ascii=False)}"
    )
    first = messages[0]
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        return [{**first, "content": f"{first['content']}\n\n{instruction}"}, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def _envelope(response: httpx.Response) -> tuple[dict[str, Any] | None, str]:
    """The chat completion, or None and why it is none (the server's fault, retried)."""
    try:
        payload = response.json()
    except ValueError:
        return None, f"the answer is not JSON ({response.text[:80]!r})"
    if not isinstance(payload, dict):
        return None, "the answer is not a JSON object"
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, "the answer has no choices"
    if not isinstance(choices[0].get("message"), dict):
        return None, "the answer's choice has no message"
    return payload, ""


def _tokens(payload: Mapping[str, Any]) -> tuple[int, int]:
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return 0, 0

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return count("prompt_tokens"), count("completion_tokens")


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _result(payload: Mapping[str, Any], mode: Mode, usage: Usage) -> ChatResult:
    choice = payload["choices"][0]
    message = choice["message"]
    text = _content(message)
    model = payload.get("model")
    base = ChatResult(data=None, text=text, usage=usage, mode=mode, model=model if isinstance(model, str) else "")
    refusal = message.get("refusal")
    if refusal:
        return replace(base, refusal=str(refusal))
    finish = choice.get("finish_reason")
    if finish == "content_filter":
        return replace(base, refusal=text or "the server's content filter stopped the answer")
    data, why = parse_json_object(text)
    if data is not None:
        return replace(base, data=data)
    return replace(base, problem="truncated (max_tokens)" if finish == "length" else f"malformed JSON: {why}")


_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_MAX_STARTS = 20  # `{` positions tried in prose
_CLOSER_NEXT = re.compile(r"\s*[}\]]")


def parse_json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object in a model's reply, read tolerantly, and why not if there is none: the whole text, else a
    Markdown fence's content, else the first balanced `{...}` that parses; each also with trailing commas dropped.

    Example:
        >>> parse_json_object('Sure! ```json\\n{"q": "Why?", "tags": ["a", "b",],}\\n``` Hope it helps.')
        ({'q': 'Why?', 'tags': ['a', 'b']}, '')
        >>> parse_json_object('The answer is {"q": "a {brace}"} as asked.')
        ({'q': 'a {brace}'}, '')
        >>> parse_json_object('{"q": "cut off')[0] is None
        True
    """
    stripped = text.strip()
    if not stripped:
        return None, "the reply is empty"
    first_error = ""
    candidates = [stripped, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        data, error = _loads(candidate)
        if data is not None:
            return data, ""
        first_error = first_error or error
    starts = [i for i, c in enumerate(text) if c == "{"][:_MAX_STARTS]
    for start in starts:
        end = _balanced_end(text, start)
        if end is None:
            continue
        data, _ = _loads(text[start:end])
        if data is not None:
            return data, ""
    snippet = stripped[:120] + ("…" if len(stripped) > 120 else "")
    if not starts:
        return None, f"no JSON object in the reply: {snippet!r}"
    return None, f"{first_error}; the reply: {snippet!r}"


def _loads(candidate: str) -> tuple[dict[str, Any] | None, str]:
    try:
        value = json.loads(candidate)
    except ValueError as exc:
        try:
            value = json.loads(_without_trailing_commas(candidate))
        except ValueError:
            return None, str(exc)
    if not isinstance(value, dict):
        return None, f"the reply is JSON but a {type(value).__name__}, not an object"
    return value, ""


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, bool]]:
    """(index, character, whether it is code: outside a JSON string and not its quotes) from `start` on."""
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            yield i, c, False
        elif c == '"':
            in_string = True
            yield i, c, False
        else:
            yield i, c, True


def _without_trailing_commas(text: str) -> str:
    """`text` without the commas that come right before a `}` or `]` outside strings."""
    return "".join(c for i, c, code in _scan(text) if not (code and c == "," and _CLOSER_NEXT.match(text, i + 1)))


def _balanced_end(text: str, start: int) -> int | None:
    """The index after the `}` that closes the `{` at `start` (strings skipped), or None."""
    depth = 0
    for i, c, code in _scan(text, start):
        if not code:
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1 if c == "}" else None
    return None
