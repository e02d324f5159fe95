"""The LLM behind the tests of syntheses and answer gradings (over HTTP, in the browser): a FAKE OpenAI-compatible
server (tests/service/infra/openai_fake.py) that answers by the structured output each prompt asks for, never a model.

- `questions` (drafting): per passage, one question made from words of its first sentence, which passes the rules,
  and one that leads with a pronoun and copies the sentence, which the rules discard (so both statuses show).
- `check`: every question is answerable.
- `grades` (judging): faithfulness and correctness 4 of 5, completeness 2 of 5, each with a reason.
"""

from __future__ import annotations

import re
from typing import Any

from tests.service.infra.openai_fake import Behaviour, Reply

STOP = {"about", "after", "their", "there", "these", "which", "where", "while", "would", "should", "could", "every"}


def _passage(body: dict[str, Any]) -> str:
    text = body["messages"][-1]["content"]
    found = re.search(r"<<<\n(.*?)\n>>>", text, re.S)
    return found.group(1) if found else ""


def brain(body: dict[str, Any]) -> Behaviour:
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    if name == "questions":
        lines = [line.strip("#-* ").strip() for line in _passage(body).splitlines()]
        first = re.split(r"(?<=[.!?])\s+", next((line for line in lines if len(line.split()) > 4), lines[0]))[0]
        words = [w.lower() for w in re.findall(r"[A-Za-z]{5,}", first) if w.lower() not in STOP][:3]
        topic = " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words or ["this policy"])
        question = f"What does our handbook say about {topic}?"
        copied = f"What does it say: {first}"  # leads with a pronoun and copies the passage: discarded by rule
        return Reply(
            json={"questions": [{"question": question, "evidence": first}, {"question": copied, "evidence": first}]}
        )
    if name == "check":
        return Reply(json={"answerable": True, "reason": "the passage states it in its first sentence"})
    if name == "grades":
        good = {"score": 4, "reason": "supported by the contexts, one detail unstated"}
        return Reply(
            json={
                "faithfulness": good,
                "correctness": good,
                "completeness": {"score": 2, "reason": "leaves out the exceptions the reference gives"},
            }
        )
    return Reply(json={})
