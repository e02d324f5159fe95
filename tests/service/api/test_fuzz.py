"""Fuzz a real `plumbline serve` over HTTP: no request may make it answer 5xx, and the index survives.

One server for the module (it takes about 9 s to start): a few documents (one superseding another), a small
labelled set, one eval run and one incident are put in first, so GET, DELETE, search, eval, baseline and
incident calls meet real data.
Then schemathesis sends schema-derived requests, valid and invalid, to every operation of `/openapi.json`;
a plain test sends bodies nested far deeper than any parser should follow; and a last test stops the server,
runs `plumbline doctor` on its data directory and starts it again.

The generation is deterministic (derandomized, no example database), so CI replays the same requests.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.config import SchemathesisConfig
from schemathesis.hooks import HookContext
from schemathesis.schemas import BaseSchema

from tests.server import ServerProcess, plumbline

pytestmark = pytest.mark.process

EXAMPLES = 40
# A valid /eval/run replays a whole labelled set through the model: fewer examples, and the set the hooks offer
# (`FUZZ_SET`, 3 cases) is small; the 78-case packaged set is only ever read, never run.
EVAL_EXAMPLES = 10
DEEP = 100_000
FUZZ_SET = "fuzz"
KNOBS = ("k", "candidates", "rerank_depth", "rrf_k", "alpha")  # search options the server bounds
KEEPER = "fuzz/keeper"  # never offered to the fuzzer's DELETE: the last test reads it after a restart
DOCUMENTS: list[dict[str, Any]] = [
    {
        "id": "fuzz/refunds",
        "title": "Refunds",
        "text": "# Refunds\n\n## Annual plans\n\nAnnual plans are refunded within 30 days of purchase.\n",
        "tags": ["billing"],
        "tenant": "acme",
        "updated_at": "2026-01-10T00:00:00Z",
        "metadata": {"owner": "Ana", "tier": 2, "region": {"code": "eu"}},
    },
    {
        "id": "fuzz/refunds-2027",
        "title": "Refunds (2027)",
        "text": "# Refunds\n\n## Annual plans\n\nFrom 2027 annual plans are refunded within 14 days.\n",
        "tags": ["billing"],
        "tenant": "acme",
        "updated_at": "2026-12-01T00:00:00Z",
        "supersedes": "fuzz/refunds",
    },
    {
        "id": "fuzz/vpn",
        "title": "VPN",
        "text": "# VPN\n\nConnect to the VPN before opening the wiki. Error 809 means the port is blocked.\n\n"
        "| code | meaning |\n| --- | --- |\n| 809 | port blocked |\n| 691 | wrong password |\n",
        "format": "markdown",
        "tags": ["it", "network"],
        "valid_until": "2030-01-01",
    },
    {
        "id": KEEPER,
        "title": "Leave",
        "text": "Employees get 25 days of paid leave a year; carry-over ends on 31 March.",
        "format": "text",
        "tags": ["hr"],
    },
]
CASES = [
    {"id": "f-1", "question": "refund window for annual plans", "relevant": [{"doc_id": "fuzz/refunds-2027"}]},
    {"id": "f-2", "question": "what does vpn error 809 mean", "relevant": [{"doc_id": "fuzz/vpn", "evidence": "809"}]},
    {
        "id": "f-3",
        "question": "how many days of leave",
        "relevant": [{"doc_id": KEEPER}],
        "category": "hr",
        "filters": {"tags": ["hr"]},
    },
]


def schemathesis_config() -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "suppress-health-check": ["too_slow"],  # generating a large body on a slow CI core is not a failure
            "generation": {
                "max-examples": EXAMPLES,
                "deterministic": True,
                "database": "none",
                "no-shrink": True,  # a failure is reported as found; shrinking it costs a request a step
            },
            # Coverage (boundary values of every field, deterministic) and schema examples run with fuzzing;
            # stateful link-following is left out: the API declares no links.
            "phases": {"stateful": {"enabled": False}},
            "operations": [
                # one `include-name`: separate `include-path` and `include-method` would match either
                {"include-name": "POST /eval/run", "generation": {"max-examples": EVAL_EXAMPLES}},
            ],
        }
    )


@dataclass(frozen=True)
class Seeded:
    server: ServerProcess
    run_id: str
    incident_id: int

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    server = ServerProcess(tmp_path_factory.mktemp("fuzz") / "data").start()
    try:
        with server.client() as client:
            r = client.post("/documents", json={"documents": DOCUMENTS})
            assert r.status_code == 200, r.text
            assert r.json()["documents"] == len(DOCUMENTS)
            assert client.get("/documents/fuzz/refunds").json()["superseded_by"] == "fuzz/refunds-2027"
            jsonl = "".join(json.dumps(case) + "\n" for case in CASES)
            r = client.put(f"/eval/sets/{FUZZ_SET}", content=jsonl, headers={"content-type": "application/x-ndjson"})
            assert r.status_code == 200, r.text
            r = client.post("/eval/run", json={"set": FUZZ_SET, "k": [1, 5]})
            assert r.status_code == 200, r.text
            run_id = r.json()["run_id"]
            incident = {"question": "refund window", "doc_id": DOCUMENTS[0]["id"], "reporter": "fuzz"}
            r = client.post("/eval/incidents", json=incident)
            assert r.status_code == 201, r.text
        yield Seeded(server, run_id, r.json()["incident_id"])
    finally:
        server.kill()


@pytest.fixture(scope="module")
def api_schema(seeded: Seeded) -> BaseSchema:
    schema = schemathesis.openapi.from_url(f"{seeded.url}/openapi.json", config=schemathesis_config())
    stored = {
        "doc_id": [d["id"] for d in DOCUMENTS if d["id"] != KEEPER],
        "run_id": [seeded.run_id],
        "name": [FUZZ_SET, "handbook"],
        "set": [FUZZ_SET],
        "supersedes": [d["id"] for d in DOCUMENTS],
        "incident_id": [seeded.incident_id],
    }

    def naming_stored(values: Any, *keys: str) -> list[Any]:
        """`values` as generated, and with one of `keys` set to the name of something the fixture stored."""
        if not isinstance(values, dict):
            return [values]
        return [
            values,
            *({**values, k: name} for k in keys if isinstance(values.get(k), str | int) for name in stored[k]),
        ]

    def without_knobs(options: dict[str, Any]) -> dict[str, Any]:
        """Search options without the numeric knobs, so that the server's defaults apply: the schema declares
        none of the limits the server enforces (k <= 100, alpha in 0..1, ...), and random numbers would keep
        most searches from reaching the pipeline, where the filters are translated for the engine."""
        return {key: value for key, value in options.items() if key not in KNOBS}

    # Hooks run on each generated value (not on the coverage phase's fixed cases) and add these variants as
    # more choices: a random id almost never names something that exists, so GET and DELETE would only meet
    # 404s and /eval/run an unknown set.
    @schema.hook
    def flatmap_path_parameters(_: HookContext, params: Any) -> st.SearchStrategy[Any]:
        return st.sampled_from(naming_stored(params, "doc_id", "run_id", "name", "incident_id"))

    @schema.hook
    def flatmap_body(ctx: HookContext, body: Any) -> st.SearchStrategy[Any]:
        path = ctx.operation.path if ctx.operation else ""
        if not isinstance(body, dict):
            return st.just(body)
        variants = [body]
        if path == "/search":
            variants.append(without_knobs(body))
        elif path == "/eval/run":
            variants = naming_stored(body, "set")
            if isinstance(body.get("overrides"), dict):
                variants += [{**v, "overrides": without_knobs(body["overrides"])} for v in variants]
        elif path == "/eval/baselines":
            variants = naming_stored(body, "run_id")
        elif path == "/eval/incidents":
            variants = naming_stored(body, "doc_id")
        elif path == "/documents" and isinstance(body.get("documents"), list) and body["documents"]:
            first, *rest = body["documents"]
            variants = [{**body, "documents": [named, *rest]} for named in naming_stored(first, "supersedes")]
        return st.sampled_from(variants)

    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
def schemathesis_node_id(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32.5's `from_fixture` reads `request.node._nodeid` (to name each operation's subtest), an
    attribute pytest 9.2 no longer has (its id lives in `_id`): give this one test item the attribute back."""
    request.node._nodeid = request.node.nodeid


@schema.parametrize()
@pytest.mark.usefixtures("schemathesis_node_id")
def test_no_request_makes_the_server_fail(case: Case[Any]) -> None:
    """Every operation, valid and invalid requests: any status but 5xx is an answer, every status is one the
    OpenAPI document declares, and every body matches its declared schema (errors: `{"detail": "..."}`)."""
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    case.call_and_validate(checks=checks, timeout=120)


def _nested_objects(depth: int) -> str:
    """`{"k": {"k": ... 1 ...}}`, `depth` objects deep, built as text (no recursion on this side)."""
    return '{"k":' * depth + "1" + "}" * depth


def _nested_lists(depth: int, closed: bool = True) -> str:
    return "[" * depth + ("]" * depth if closed else "")


def _assert_refused(response: httpx.Response, what: str) -> None:
    assert 400 <= response.status_code < 500, f"{what}: {response.status_code} {response.text[:300]}"
    detail = response.json()["detail"]
    assert isinstance(detail, str), f"{what}: {detail!r}"
    assert "deep" in detail, f"{what}: {detail[:300]!r}"


def test_deeply_nested_bodies_are_refused_with_a_reason(seeded: Seeded) -> None:
    json_type = {"content-type": "application/json"}
    writes = [("POST", "/documents"), ("POST", "/search"), ("POST", "/eval/run"), ("POST", "/eval/baselines")]
    with seeded.server.client() as client:
        for method, path in [*writes, ("PUT", f"/eval/sets/{FUZZ_SET}-deep")]:
            for closed in (False, True):
                body = _nested_lists(DEEP, closed)
                r = client.request(method, path, content=body, headers=json_type)
                _assert_refused(r, f"{method} {path} with {DEEP} '[' ({'closed' if closed else 'unclosed'})")
        for depth in (600, 200):
            deep = _nested_objects(depth)
            bodies = {
                "/documents": f'{{"documents": [{{"id": "fuzz/deep", "text": "deep", "metadata": {deep}}}]}}',
                "/search": f'{{"query": "refund", "filters": {{"metadata": {deep}}}}}',
                "/eval/run": f'{{"set": "{FUZZ_SET}", "overrides": {{"filters": {{"metadata": {deep}}}}}}}',
            }
            for path, body in bodies.items():
                r = client.post(path, content=body, headers=json_type)
                _assert_refused(r, f"POST {path} with metadata {depth} objects deep")
        good = json.dumps(CASES[0])
        for line in (_nested_lists(DEEP), _nested_objects(DEEP)):
            r = client.put(
                f"/eval/sets/{FUZZ_SET}-deep",
                content=f"{good}\n{line}\n",
                headers={"content-type": "application/x-ndjson"},
            )
            _assert_refused(r, f"PUT /eval/sets/{FUZZ_SET}-deep with a line {DEEP} levels deep")
        assert client.get("/documents/fuzz/deep").status_code == 404
        assert client.get(f"/eval/sets/{FUZZ_SET}-deep").status_code == 404
        assert client.get("/health/ready").status_code == 200


def test_the_index_is_intact_after_fuzzing(seeded: Seeded) -> None:
    """Runs last: stops the module's server."""
    server = seeded.server
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: the exit status is -SIGTERM
    assert server.stop() in (0, -signal.SIGTERM), server.log
    assert any("Application shutdown complete" in line for line in server.lines), server.log
    errors = [line for line in server.lines if "Traceback" in line or "ERROR" in line]
    assert not errors, server.log
    data_dir: Path = server.data_dir
    doctor = plumbline("doctor", "--data-dir", str(data_dir))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "clean" in doctor.stdout
    with ServerProcess(data_dir) as again, again.client() as client:
        assert client.get("/health/ready").status_code == 200
        r = client.get(f"/documents/{KEEPER}")
        assert r.status_code == 200, r.text
        assert r.json()["text"] == DOCUMENTS[-1]["text"]
