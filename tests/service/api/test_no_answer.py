"""The "nothing matches" signal over HTTP: learned from a labelled set (each case as asked, and without its labelled
documents), stored for every replica, applied to every search; only an eval:admin key (never tenant-bound) may
learn it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.settings import Settings
from tests.service.api.access_helpers import auth, make_key, secured_client

TOPICS = {
    "parking": ("parking permit cost", "Staff parking permits cost 40 euros per month"),
    "laptop": ("laptop replacement cycle", "Laptops are replaced every four years"),
    "expenses": ("expense claim payment", "Expense claims are paid within ten working days"),
    "visitors": ("visitor badge reception", "Visitor badges are issued at the north reception"),
    "printing": ("colour printing code", "Colour printing needs a cost centre code"),
    "lockers": ("gym locker emptied", "Gym lockers are emptied every Friday evening"),
    "bikes": ("bike storage basement", "Bike storage is in the basement behind gate B"),
    "canteen": ("canteen menu changes", "The canteen menu changes every Monday"),
}


def documents() -> list[dict[str, Any]]:
    return [
        {"id": f"policy/{t}", "title": f"{t.title()} policy", "text": f"# {words.title()}\n\n{answer}.\n"}
        for t, (words, answer) in TOPICS.items()
    ]


def cases() -> str:
    out = [
        {
            "id": f"c-{t}",
            "question": words,
            "relevant": [{"doc_id": f"policy/{t}"}],
            "category": t,
            "split": ("tune", "test")[n % 2],
        }
        for n, (t, (words, _)) in enumerate(TOPICS.items())
    ]
    return "".join(json.dumps(c) + "\n" for c in out)


def test_a_threshold_is_learned_stored_and_applied_to_every_search(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", index_copies=1)
    with secured_client(settings) as c:
        admin = auth(make_key(c, "admin"))
        reader = auth(make_key(c, "search", "eval:run", name="reader"))
        assert c.post("/documents", headers=admin, json={"documents": documents()}).status_code == 200
        assert c.put("/eval/sets/topics", headers=admin, content=cases()).status_code in (200, 201)

        before = c.post("/search", headers=reader, json={"query": "parking permit cost"}).json()["no_answer"]
        assert before["nothing_matches"] is None
        assert "no threshold learned yet" in before["why"]
        assert before["score"] > 0.5  # the signal is there before any threshold
        assert c.get("/eval/no-answer", headers=reader).status_code == 404

        learned = c.post("/eval/no-answer/calibrate", headers=admin, json={"sets": ["topics"], "k": 3})
        assert learned.status_code == 200, learned.text
        record = learned.json()
        assert (record["model"], record["k"], record["split"], record["cases"]) == (
            "fake-bow",
            3,
            "case",
            {"tune": 4, "test": 4},
        )
        # each case as asked finds its policy; without it, the rest share no words with the question
        for split in ("tune", "test"):
            assert (record[split]["searches"], record[split]["unanswered"]) == (8, 4)
            assert (record[split]["precision"], record[split]["recall"]) == (1.0, 1.0)
        assert c.get("/eval/no-answer", headers=reader).json() == record

        on_topic = c.post("/search", headers=reader, json={"query": "bike storage basement"}).json()["no_answer"]
        off_topic = c.post("/search", headers=reader, json={"query": "quarterly revenue forecast"}).json()["no_answer"]
        assert (on_topic["nothing_matches"], on_topic["threshold"], on_topic["k"]) == (False, record["threshold"], 3)
        assert off_topic["nothing_matches"] is True
        assert off_topic["score"] < record["threshold"] < on_topic["score"]

    with secured_client(settings) as again:  # a restart (or another replica on the same state store) applies it
        key = auth(make_key(again, "search", name="later"))
        found = again.post("/search", headers=key, json={"query": "quarterly revenue forecast"}).json()
        assert found["no_answer"]["nothing_matches"] is True


def test_only_an_eval_admin_key_learns_it_and_bad_requests_say_what_to_fix(tmp_path: Path) -> None:
    with secured_client(Settings(data_dir=tmp_path / "data", index_copies=1)) as c:
        admin = auth(make_key(c, "admin"))
        runner = auth(make_key(c, "eval:run", name="runner"))
        bound = auth(make_key(c, "eval:run", "search", tenant="acme", name="bound"))
        assert c.post("/documents", headers=admin, json={"documents": documents()}).status_code == 200
        c.put("/eval/sets/topics", headers=admin, content=cases())
        body = {"sets": ["topics"]}
        assert c.post("/eval/no-answer/calibrate", headers=runner, json=body).status_code == 403
        refused = c.post("/eval/no-answer/calibrate", headers=bound, json=body)
        assert refused.status_code == 403
        assert "eval:admin" in refused.json()["detail"]
        unknown = c.post("/eval/no-answer/calibrate", headers=admin, json={"sets": ["nope"]})
        assert unknown.status_code == 404
        assert "nope" in unknown.json()["detail"]
        assert c.post("/eval/no-answer/calibrate", headers=admin, json={"sets": []}).status_code == 422
        assert c.post("/eval/no-answer/calibrate", headers=admin, json={**body, "k": 0}).status_code == 422
        assert c.get("/eval/no-answer", headers=admin).status_code == 404  # nothing was stored by the refusals
