"""A promotion killed by SIGKILL in the middle of the generation switch, in a real `plumbline serve`: before
`serving.json` is replaced the restarted server serves the old generation, after it the new one with its model; either
way a document acknowledged after the tune was built is in what is served, and the switch can be made again (or
undone) after the restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess
from tests.service.api.test_tuning import TUNE_EPOCHS, cases, documents
from tests.waiting import until

pytestmark = pytest.mark.process

CANTEEN = {"id": "kb/canteen", "title": "canteen", "text": "# canteen\n\nthe lunch menu of the canteen"}


def _tuned(c: httpx.Client) -> dict[str, Any]:
    """The tiny corpus and its set, a finished tune of it; then the canteen written to the live index, and the set's
    baseline run on it."""
    assert c.post("/documents", json={"documents": documents()}).status_code == 200
    body = "".join(json.dumps(case) + "\n" for case in cases())
    assert c.put("/eval/sets/kb", content=body).status_code == 200
    started = c.post("/eval/tunes", json={"sets": ["kb"], **TUNE_EPOCHS})
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    until(lambda: c.get(location).json()["status"] not in ("queued", "running"), 180)
    view: dict[str, Any] = c.get(location).json()
    assert view["status"] == "done", view
    assert view["result"]["promotable"] is True, view
    assert c.post("/documents", json={"documents": [CANTEEN]}).status_code == 200  # after the generation was built
    run = c.post("/eval/run", json={"set": "kb"}).json()  # the baseline: the live index as it is now
    assert c.post("/eval/baselines", json={"run_id": run["run_id"], "name": "kb"}).status_code == 201
    return view


@pytest.mark.parametrize(
    ("point", "switched"),
    [("generations:pointer-written", False), ("generation:switched", True)],
    ids=["before-the-pointer", "after-the-pointer"],
)
def test_a_switch_killed_midway_serves_one_whole_generation_with_every_acknowledged_write(
    tmp_path: Path, tiny_embedding_model: Path, point: str, switched: bool
) -> None:
    data = tmp_path / "data"
    env = {
        "PLUMBLINE_EMBEDDING_MODEL": str(tiny_embedding_model),
        "PLUMBLINE_DEFAULT_MODE": "dense",
        "PLUMBLINE_INDEX_COPIES": "1",
    }
    with ServerProcess(data, env={**env, "PLUMBLINE_CRASH_AT": point}) as server, server.client(timeout=120) as c:
        view = _tuned(c)
        gen = view["result"]["generation"]
        with pytest.raises(httpx.TransportError):  # the server dies inside the request
            c.post(f"/eval/tunes/{view['id']}/promote", json={})
        assert server.wait() == -9, server.log

    with ServerProcess(data, env=env) as server, server.client(timeout=120) as c:
        model = c.get("/eval/model").json()
        assert model["serving"]["name"] == (gen["name"] if switched else "base"), model
        assert server.returncode is None
        assert c.get("/documents/kb/canteen").status_code == 200  # acknowledged before the promotion: served
        hits = c.post("/search", json={"query": "lunch menu", "k": 20}).json()["hits"]
        assert "kb/canteen" in {h["doc_id"] for h in hits}  # searchable, not only listed
        assert c.get("/documents").json()["total"] == len(documents()) + 1
        if switched:  # the new generation, whole: undo it
            rolled = c.post("/eval/model/rollback")
            assert rolled.status_code == 200, rolled.text
            assert rolled.json()["generation"] == "base"
        else:  # the old generation, whole: the switch can be made again
            again = c.post(f"/eval/tunes/{view['id']}/promote", json={})
            assert again.status_code == 200, again.text
            assert again.json()["promoted"] is True, again.json()
        assert c.get("/documents/kb/canteen").status_code == 200
        assert c.get("/documents").json()["total"] == len(documents()) + 1
