"""A FAKE Qdrant server for tests: Qdrant's REST API on a real socket, answered by `QdrantClient(":memory:")`.

No Qdrant server can be installed here, yet the server adapter's network behaviour (timeouts, retries, the API
key header, an outage and the recovery after it) only shows over real HTTP. This app serves the REST routes
`QdrantStore` uses, parsing each body with qdrant-client's own request models and answering with its own
response models, so the adapter's real client talks to it unchanged. It can be stopped and started again on the
same port, keeping its points, as a server restart would. It is not a Qdrant: quantisation, shards and HNSW are
accepted and ignored (the local mode searches exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from qdrant_client import QdrantClient
from qdrant_client import models as m

from tests.threaded import ThreadedServer


def _ok(result: Any) -> JSONResponse:
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    elif isinstance(result, list):
        result = [r.model_dump(mode="json") if hasattr(r, "model_dump") else r for r in result]
    return JSONResponse({"result": result, "status": "ok", "time": 0.0})


_DONE = {"operation_id": 0, "status": "completed"}


def fake_qdrant_app(local: QdrantClient, api_key: str | None = None) -> FastAPI:
    app = FastAPI()
    app.state.failures = []  # statuses to answer the next requests with, one each, instead of serving them
    app.state.fail_when = None  # or a function of each request: a status to answer it with instead, or None
    app.state.requests = 0
    app.state.indexed = {}
    app.state.version = None  # the version the root answers with (None: qdrant-client's)

    @app.middleware("http")
    async def check_key(request: Request, call_next: Callable[[Request], Any]) -> Any:
        app.state.requests += 1
        if api_key is not None and request.headers.get("api-key") != api_key:
            return JSONResponse({"status": {"error": "Invalid api-key"}}, status_code=401)
        status = app.state.failures.pop(0) if app.state.failures else None
        if status is None and app.state.fail_when is not None:
            status = app.state.fail_when(request)
        if status is not None:
            headers = {"Retry-After": "1"} if status == 429 else None
            return JSONResponse({"status": {"error": "injected failure"}}, status_code=status, headers=headers)
        return await call_next(request)

    @app.get("/")
    def root() -> JSONResponse:  # the one answer not wrapped in "result"
        info = local.info().model_dump(mode="json")
        return JSONResponse({**info, "version": app.state.version or info["version"]})

    @app.get("/collections/{name}/exists")
    def exists(name: str) -> JSONResponse:
        return _ok({"exists": local.collection_exists(name)})

    @app.put("/collections/{name}")
    async def create(name: str, request: Request) -> JSONResponse:
        body = m.CreateCollection.model_validate(await request.json())
        app.state.created = body  # what the adapter asked for, for the tests to read
        local.create_collection(name, vectors_config=body.vectors, sparse_vectors_config=body.sparse_vectors)
        return _ok(True)

    @app.get("/collections/{name}")
    def info(name: str) -> JSONResponse:
        return _ok(local.get_collection(name))

    @app.put("/collections/{name}/index")
    async def index(name: str, request: Request) -> JSONResponse:
        body = m.CreateFieldIndex.model_validate(await request.json())
        app.state.indexed[body.field_name] = body.field_schema  # the local mode keeps no payload index
        local.create_payload_index(name, body.field_name, body.field_schema)
        return _ok(_DONE)

    @app.put("/collections/{name}/points")
    async def upsert(name: str, request: Request) -> JSONResponse:
        body = m.PointsList.model_validate(await request.json())
        local.upsert(name, body.points)
        return _ok(_DONE)

    @app.post("/collections/{name}/points/delete")
    async def delete(name: str, request: Request) -> JSONResponse:
        raw = await request.json()
        selector: Any = m.FilterSelector.model_validate(raw) if "filter" in raw else m.PointIdsList.model_validate(raw)
        local.delete(name, selector)
        return _ok(_DONE)

    @app.post("/collections/{name}/points/payload")
    async def set_payload(name: str, request: Request) -> JSONResponse:
        body = m.SetPayload.model_validate(await request.json())
        points: Any = body.points if body.points is not None else m.FilterSelector(filter=body.filter)
        local.set_payload(name, body.payload, points=points)
        return _ok(_DONE)

    @app.post("/collections/{name}/points/query/batch")
    async def query(name: str, request: Request) -> JSONResponse:
        body = m.QueryRequestBatch.model_validate(await request.json())
        app.state.searches = body.searches
        return _ok(local.query_batch_points(name, body.searches))

    @app.post("/collections/{name}/points")
    async def retrieve(name: str, request: Request) -> JSONResponse:
        body = m.PointRequest.model_validate(await request.json())
        return _ok(local.retrieve(name, body.ids, with_payload=body.with_payload, with_vectors=body.with_vector))

    @app.post("/collections/{name}/points/scroll")
    async def scroll(name: str, request: Request) -> JSONResponse:
        b = m.ScrollRequest.model_validate(await request.json())
        records, after = local.scroll(
            name,
            scroll_filter=b.filter,
            limit=b.limit or 10,
            offset=b.offset,
            with_payload=b.with_payload if b.with_payload is not None else True,
            with_vectors=b.with_vector or False,
        )
        return _ok({"points": [r.model_dump(mode="json") for r in records], "next_page_offset": after})

    @app.post("/collections/{name}/points/count")
    async def count(name: str, request: Request) -> JSONResponse:
        body = m.CountRequest.model_validate(await request.json())
        return _ok(local.count(name, count_filter=body.filter, exact=True))

    return app


class FakeQdrantServer(ThreadedServer):
    """The fake on 127.0.0.1:`port` (a free one if 0); `stop()` and `start()` again keep the points.

    Example:
        >>> server = FakeQdrantServer(); server.start()  # doctest: +SKIP
        >>> QdrantStore(connect(server.url, None, QdrantOptions()), "c").ensure_schema(8)  # doctest: +SKIP
    """

    def __init__(self, port: int = 0, api_key: str | None = None) -> None:
        self.local = QdrantClient(":memory:")
        super().__init__(fake_qdrant_app(self.local, api_key), port)
