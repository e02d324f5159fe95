"""Evaluating a remote Plumbline: replay questions against its `/search` over HTTP."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from eval.errors import EvalError
from eval.matching import Retrieved
from eval.runner import Query


def api_key_headers() -> dict[str, str]:
    """The API key a command-line client sends, from `PLUMBLINE_API_KEY` (none if unset: a service with auth off)."""
    key = os.environ.get("PLUMBLINE_API_KEY", "").strip()
    return {"X-API-Key": key} if key else {}


def no_delay_client(timeout: float = 60.0) -> httpx.Client:
    """An httpx client with TCP_NODELAY, sending the API key of `PLUMBLINE_API_KEY`. Without TCP_NODELAY a POST's
    headers and body wait on delayed ACKs, adding about 40 ms to every request on Linux (benchmarks/speed.py)."""
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return httpx.Client(
        timeout=timeout, transport=httpx.HTTPTransport(socket_options=nodelay), headers=api_key_headers()
    )


def call(url: str, method: str, path: str, *, timeout: float = 120, **kwargs: Any) -> Any:
    """One request to a running Plumbline at `url` with the key of `PLUMBLINE_API_KEY`: the JSON of a 200 answer,
    else an `EvalError` quoting the status and the answer's start."""
    with httpx.Client(base_url=url.rstrip("/"), timeout=timeout, headers=api_key_headers()) as client:
        response = client.request(method, path, **kwargs)
    if response.status_code != 200:
        raise EvalError(f"{url} answered {response.status_code}: {response.text[:500]}")
    return response.json()


class HttpRetriever:
    """A `Retriever` backed by `POST {url}/search`; `overrides` are extra search fields (mode, alpha...).

    Example:
        >>> r = HttpRetriever("http://localhost:8000", overrides={"mode": "keyword"})  # doctest: +SKIP
        >>> r.retrieve([Query("vpn error LC-419", k=10)])  # doctest: +SKIP
    """

    def __init__(
        self,
        url: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        client: httpx.Client | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.overrides = dict(overrides or {})
        self._client = client or no_delay_client(timeout)

    def retrieve(self, queries: Sequence[Query]) -> list[list[Retrieved]]:
        return [self._one(q) for q in queries]

    def _one(self, q: Query) -> list[Retrieved]:
        base = self.overrides.get("filters", {})
        filters = {**base, **q.filters}
        if "metadata" in base and "metadata" in q.filters:  # both apply, as in FilterSpec.merged
            filters["metadata"] = {**base["metadata"], **q.filters["metadata"]}
        body = {**self.overrides, "query": q.text, "k": q.k, "filters": filters}
        if q.unit == "doc":
            body["distinct_docs"] = True
        try:
            response = self._client.post(f"{self.url}/search", json=body)
        except httpx.HTTPError as exc:
            raise EvalError(f"cannot reach {self.url}/search: {exc}") from None
        if response.status_code != 200:
            raise EvalError(f"{self.url}/search answered {response.status_code}: {response.text[:500]}")
        # `current` is absent from servers older than stale@k: their hits count as current
        return [
            Retrieved(
                h["chunk_id"],
                h["doc_id"],
                h.get("text", ""),
                float(h.get("score", 0.0)),
                stale=not h.get("current", True),
            )
            for h in response.json()["hits"]
        ]
