"""The chat-completions client (`service.infra.llm`) against a fake OpenAI-compatible server over real loopback HTTP.

No test sleeps to wait: the client's `sleep` is a recorder, and the one test that needs a real client timeout
(0.3 s against a server that would answer in 2 s) has the fake's delayed handler woken when it closes.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from typing import Any

import pytest

from service.api.errors import status_of
from service.infra.llm import (
    NOT_CONFIGURED_MESSAGE,
    ChatClient,
    LLMConfig,
    LLMMisconfigured,
    LLMNotConfigured,
    LLMRejected,
    LLMUnavailable,
    Mode,
    Usage,
    parse_json_object,
)
from tests.service.infra.openai_fake import (
    Delay,
    FakeOpenAI,
    Hold,
    Malformed,
    Refusal,
    Reply,
    Status,
    Unsupported,
)

SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string"}, "answerable": {"type": "boolean"}},
    "required": ["question", "answerable"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Write one question about the passage."}]
KEY = "sk-test-0123456789abcdef"


class Ceiling(random.Random):
    """Jitter that always draws its upper bound, so the backoff's ceiling shows in the waits."""

    def uniform(self, a: float, b: float) -> float:
        return max(a, b)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def client_for(fake: FakeOpenAI, waits: list[float], **config: Any) -> ChatClient:
    config = {"base_url": fake.base_url, "model": "test-model", **config}
    return ChatClient(LLMConfig(**config), sleep=waits.append, rng=Ceiling())


def ask(client: ChatClient) -> Any:
    return client.complete_json(ASK, SCHEMA, name="question")


def test_structured_reply_is_read_and_its_usage_counted(fake: FakeOpenAI) -> None:
    fake.script(
        Reply(json={"question": "Why?", "answerable": True}, usage={"prompt_tokens": 40, "completion_tokens": 9})
    )
    waits: list[float] = []
    with client_for(fake, waits, api_key=KEY) as client:
        result = client.complete_json(ASK, SCHEMA, name="question", max_tokens=99, seed=3)
        assert result.data == {"question": "Why?", "answerable": True}
        assert (result.problem, result.refusal, result.model) == (None, None, "fake-model")
        assert result.mode == Mode.JSON_SCHEMA
        assert result.usage == Usage(prompt_tokens=40, completion_tokens=9, requests=1, retries=0)

        fake.script(Reply(json={"question": "How?", "answerable": False}, usage=None))  # no usage: 0 tokens
        assert ask(client).usage == Usage(0, 0, 1, 0)
        assert client.usage() == Usage(40, 9, 2, 0)
        assert client.usage().to_json() == {"prompt_tokens": 40, "completion_tokens": 9, "requests": 2, "retries": 0}
    sent = fake.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["model"] == "test-model"
    assert sent.body["messages"] == ASK
    assert (sent.body["max_tokens"], sent.body["temperature"], sent.body["seed"]) == (99, 0.0, 3)
    assert sent.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "question", "schema": SCHEMA, "strict": True},
    }
    assert waits == []


def test_no_authorization_header_without_a_key(fake: FakeOpenAI) -> None:
    with client_for(fake, []) as client:
        ask(client)
    assert "authorization" not in fake.requests[0].headers


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('```json\n{"question": "Why?", "answerable": true}\n```', {"question": "Why?", "answerable": True}),
        ('Here you go:\n```\n{"question": "Why?"}\n```\nAnything else?', {"question": "Why?"}),
        ('Sure! The object is {"question": "a {brace} \\"quoted\\"", "n": [1, 2]} as asked.', None),
        ('{"question": "Why, then?", "tags": ["a", "b",],}', {"question": "Why, then?", "tags": ["a", "b"]}),
        ('  {"question": "Why?"}\n', {"question": "Why?"}),
    ],
)
def test_tolerant_parser_reads_json_in_fences_prose_and_with_trailing_commas(
    fake: FakeOpenAI, content: str, expected: dict[str, Any] | None
) -> None:
    fake.script(Reply(content=content))
    with client_for(fake, []) as client:
        result = ask(client)
    if expected is None:
        expected = {"question": 'a {brace} "quoted"', "n": [1, 2]}
    assert result.data == expected
    assert result.problem is None
    assert result.text == content


@pytest.mark.parametrize("content", ["I think the question is: why?", '{"question": "Why?" "answerable": }', "[1]", ""])
def test_malformed_json_is_a_problem_not_an_error(fake: FakeOpenAI, content: str) -> None:
    fake.script(Reply(content=content))
    with client_for(fake, []) as client:
        result = ask(client)
    assert result.data is None
    assert result.problem is not None
    assert result.problem.startswith("malformed JSON: ")
    assert result.refusal is None
    assert result.usage.requests == 1  # not retried: the server answered


def test_truncated_answer_says_so(fake: FakeOpenAI) -> None:
    fake.script(Reply(content='{"question": "Why is the sky', finish_reason="length"))
    with client_for(fake, []) as client:
        result = ask(client)
    assert (result.data, result.problem) == (None, "truncated (max_tokens)")


def test_refusals(fake: FakeOpenAI) -> None:
    fake.script(Refusal("I can't help with that."), Reply(content="Blocked.", finish_reason="content_filter"))
    with client_for(fake, []) as client:
        first, second = ask(client), ask(client)
    assert (first.data, first.refusal, first.problem) == (None, "I can't help with that.", None)
    assert (second.data, second.refusal, second.problem) == (None, "Blocked.", None)


def test_429_with_retry_after_seconds_waits_exactly_that(fake: FakeOpenAI) -> None:
    fake.script(Status(429, headers={"Retry-After": "7"}), Reply(json={"question": "Why?", "answerable": True}))
    waits: list[float] = []
    with client_for(fake, waits, backoff=1.0) as client:
        result = ask(client)
        assert result.data == {"question": "Why?", "answerable": True}
        assert waits == [7.0]
        assert result.usage == Usage(11, 7, requests=2, retries=1)
        assert client.usage() == Usage(11, 7, requests=2, retries=1)


def test_retry_after_is_capped_at_the_max_backoff(fake: FakeOpenAI) -> None:
    fake.script(Status(503, headers={"Retry-After": "3600"}), Reply())
    waits: list[float] = []
    with client_for(fake, waits, max_backoff=30) as client:
        ask(client)
    assert waits == [30.0]


def test_429_with_an_http_date_retry_after(fake: FakeOpenAI) -> None:
    now = 1_700_000_000.0
    fake.script(
        Status(429, headers={"Retry-After": formatdate(now + 12, usegmt=True)}),
        Status(429, headers={"Retry-After": formatdate(now - 60, usegmt=True)}),  # already past: no wait
        Reply(),
    )
    waits: list[float] = []
    config = LLMConfig(fake.base_url, "test-model")
    with ChatClient(config, sleep=waits.append, rng=Ceiling(), clock=lambda: now) as client:
        assert ask(client).usage.retries == 2
    assert waits == [12.0, 0.0]


def test_5xx_backoff_grows_and_is_capped(fake: FakeOpenAI) -> None:
    fake.script(Status(500), Status(502), Status(504), Status(500), Reply())
    waits: list[float] = []
    with client_for(fake, waits, backoff=1.0, max_backoff=5.0, max_retries=4) as client:
        result = ask(client)
    assert result.ok
    assert waits == [1.0, 2.0, 4.0, 5.0]  # backoff * 2**attempt, the ceiling of the full jitter, capped
    assert result.usage.requests == 5


def test_jitter_is_drawn_below_the_backoff(fake: FakeOpenAI) -> None:
    fake.script(Status(500), Status(500), Reply())
    waits: list[float] = []
    config = LLMConfig(fake.base_url, "test-model", backoff=1.0)
    with ChatClient(config, sleep=waits.append, rng=random.Random(7)) as client:
        ask(client)
    assert len(waits) == 2
    assert 0 <= waits[0] <= 1.0
    assert 0 <= waits[1] <= 2.0
    assert waits != [1.0, 2.0]


def test_persistent_503_raises_llm_unavailable_after_the_retries(fake: FakeOpenAI) -> None:
    fake.script(*[Status(503)] * 10)
    waits: list[float] = []
    with client_for(fake, waits, max_retries=3, api_key=KEY) as client:
        with pytest.raises(LLMUnavailable) as raised:
            ask(client)
        assert client.usage() == Usage(0, 0, requests=4, retries=3)
    assert len(fake.requests) == 4
    assert len(waits) == 3
    message = str(raised.value)
    assert "HTTP 503" in message
    assert "127.0.0.1" in message
    assert "PLUMBLINE_LLM_BASE_URL" in message
    assert KEY not in message
    assert status_of(raised.value) == 503


def test_malformed_envelope_is_the_servers_fault_and_retried(fake: FakeOpenAI) -> None:
    fake.script(Malformed("{not json"), Malformed('{"object": "chat.completion", "choices": []}'), Reply())
    waits: list[float] = []
    with client_for(fake, waits) as client:
        assert ask(client).ok
    assert len(fake.requests) == 3
    assert waits == [1.0, 2.0]

    fake.script(*[Malformed("<html>Bad gateway</html>")] * 3)
    with client_for(fake, [], max_retries=2) as client, pytest.raises(LLMUnavailable, match="not JSON"):
        ask(client)


def test_timeouts_are_retried_then_unavailable() -> None:
    with FakeOpenAI() as fake:
        fake.script(*[Delay(2.0)] * 3)
        waits: list[float] = []
        with client_for(fake, waits, timeout=0.3, max_retries=2) as client:
            with pytest.raises(LLMUnavailable, match=r"no answer within 0\.3 s"):
                ask(client)
            assert client.usage() == Usage(0, 0, requests=3, retries=2)
        assert len(waits) == 2


def test_slow_answer_within_the_timeout_succeeds(fake: FakeOpenAI) -> None:
    fake.script(Delay(0.2, then=Reply(json={"question": "Why?", "answerable": True})))
    waits: list[float] = []
    with client_for(fake, waits, timeout=5) as client:
        assert ask(client).ok
    assert waits == []


def test_connection_refused_is_retried_then_unavailable() -> None:
    with FakeOpenAI() as fake:
        base_url = fake.base_url
    waits: list[float] = []
    client = ChatClient(LLMConfig(base_url, "m", max_retries=2), sleep=waits.append, rng=Ceiling())
    with client, pytest.raises(LLMUnavailable, match="ConnectError"):
        ask(client)
    assert waits == [1.0, 2.0]


@pytest.mark.parametrize(
    "refusal",
    [Unsupported("response_format", status=400), Unsupported(status=500, llama_cpp=True), Unsupported(status=422)],
)
def test_json_schema_unsupported_falls_back_to_json_object_and_remembers(
    fake: FakeOpenAI, refusal: Unsupported
) -> None:
    fake.script(refusal)
    waits: list[float] = []
    with client_for(fake, waits) as client:
        first = ask(client)
        assert (first.ok, first.mode, client.mode()) == (True, Mode.JSON_OBJECT, Mode.JSON_OBJECT)
        assert first.usage.requests == 2
        second = ask(client)
        assert second.mode == Mode.JSON_OBJECT
    formats = [body["response_format"]["type"] for body in fake.bodies()]
    assert formats == ["json_schema", "json_object", "json_object"]  # the second call went straight to json_object
    assert fake.requests[1].body["response_format"]["schema"] == SCHEMA
    system = fake.requests[1].body["messages"][0]
    assert system["role"] == "system"
    assert '"answerable"' in system["content"]
    assert waits == []  # a refused form is not retried


def test_falls_back_to_the_prompt_when_no_response_format_is_taken(fake: FakeOpenAI) -> None:
    fake.script(Unsupported(), Unsupported())
    messages = [{"role": "system", "content": "You write exam questions."}, *ASK]
    with client_for(fake, []) as client:
        result = client.complete_json(messages, SCHEMA, name="question")
        assert (result.ok, result.mode, client.mode()) == (True, Mode.PROMPT, Mode.PROMPT)
    last = fake.requests[-1].body
    assert "response_format" not in last
    assert last["messages"][0]["content"].startswith("You write exam questions.\n\n")  # one system message
    assert '"required": ["question", "answerable"]' in last["messages"][0]["content"]
    assert last["messages"][1:] == ASK


def test_a_400_that_is_no_format_refusal_is_rejected_with_the_servers_message(fake: FakeOpenAI) -> None:
    long = "This model's maximum context length is 2048 tokens. " * 20
    fake.script(Status(400, body={"error": {"message": long, "type": "invalid_request_error"}}))
    waits: list[float] = []
    with client_for(fake, waits) as client, pytest.raises(LLMRejected, match="maximum context length") as raised:
        ask(client)
    assert len(fake.requests) == 1
    assert waits == []
    assert len(str(raised.value)) < 300 + 100


def test_401_names_the_key_setting_is_not_retried_and_never_shows_the_key() -> None:
    with FakeOpenAI(api_key="the-right-key") as fake:
        waits: list[float] = []
        with client_for(fake, waits, api_key=KEY) as client, pytest.raises(LLMMisconfigured) as raised:
            ask(client)
        assert len(fake.requests) == 1
        assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    message = str(raised.value)
    assert "PLUMBLINE_LLM_API_KEY" in message
    assert "401" in message
    assert KEY not in message
    assert KEY not in repr(client.config)
    assert waits == []
    assert status_of(raised.value) == 409


def test_404_names_the_url_and_model_settings(fake: FakeOpenAI) -> None:
    root = fake.base_url.removesuffix("/v1")  # a base URL without /v1: the usual mistake
    with client_for(fake, [], base_url=root) as client, pytest.raises(LLMMisconfigured) as raised:
        ask(client)
    assert "PLUMBLINE_LLM_BASE_URL" in str(raised.value)
    assert "PLUMBLINE_LLM_MODEL" in str(raised.value)
    assert len(fake.requests) == 1


def test_concurrency_is_bounded_across_threads(fake: FakeOpenAI) -> None:
    release = threading.Event()
    fake.script(*[Hold(release, then=Reply(json={"question": "Why?", "answerable": True}))] * 8)
    with client_for(fake, [], max_concurrency=2) as client, ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(ask, client) for _ in range(8)]
        try:
            assert fake.wait_in_flight(2, timeout=10)  # two got through and are held...
            # ...and no third joins them (a broken bound lets all eight in at once; this wait ends as soon as one does)
            assert not fake.wait_in_flight(3, timeout=0.3)
        finally:
            release.set()
        results = [f.result(timeout=10) for f in futures]
        assert client.usage().requests == 8
    assert all(r.ok for r in results)
    assert len(fake.requests) == 8
    assert fake.max_in_flight == 2


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="PLUMBLINE_LLM_BASE_URL"):
        LLMConfig("localhost:8080/v1", "m")
    with pytest.raises(ValueError, match="PLUMBLINE_LLM_MODEL"):
        LLMConfig("http://localhost:8080/v1", " ")
    with pytest.raises(ValueError, match="max concurrency"):
        LLMConfig("http://localhost:8080/v1", "m", max_concurrency=0)
    assert LLMConfig("http://localhost:11434/v1/", "m").url == "http://localhost:11434/v1/chat/completions"


def test_not_configured_error() -> None:
    error = LLMNotConfigured()
    assert str(error) == NOT_CONFIGURED_MESSAGE
    assert "PLUMBLINE_LLM_BASE_URL" in str(error)
    assert "PLUMBLINE_LLM_MODEL" in str(error)
    assert "PLUMBLINE_LLM_API_KEY_FILE" in str(error)
    assert status_of(error) == 409


def test_parser_edge_cases() -> None:
    assert parse_json_object('{"a": "x,}"}')[0] == {"a": "x,}"}  # a comma before } inside a string stays
    assert parse_json_object('noise {"a": [1, {"b": 2},],} tail')[0] == {"a": [1, {"b": 2}]}
    assert parse_json_object('{"a": 1} and {"b": 2}')[0] == {"a": 1}
    assert parse_json_object("{ unclosed")[0] is None
