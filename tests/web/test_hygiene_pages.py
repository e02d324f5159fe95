"""Corpus hygiene on the quality dashboard, end to end: a set whose questions its documents answer, a monitoring run,
then a batch of near-topic documents that answer nothing and a second monitoring run (precision@1 falls, with the
real embedding model). In the browser: the second run's distractor panel names the added documents; selected, a
what-if run shows precision recovered (the paired test says so); one is archived (after a confirmation) and
restored with Undo, and a restore the service refuses (409) is shown; the set's page plots precision against the
corpus size, one point per run, beside the run history. The server is shared: the ids here are this test's own, and
its documents are restored and deleted at the end."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.web.conftest import Page

pytestmark = [pytest.mark.process, pytest.mark.browser]

SET = "hygiene-web"
PREFIX = "hygiene-web/"
# topics far from the demo handbook's, each with a question pair its policy answers
TOPICS = {
    "kayak": ("kayak rental", "Kayaks from the boathouse cost 5 euros per afternoon"),
    "beehive": ("beehive inspection", "The rooftop beehives are inspected every second Tuesday"),
    "choir": ("choir rehearsal", "The staff choir rehearses in room 4.12 on Thursdays"),
    "chess": ("chess club", "The chess club tournament starts at noon on the last Friday"),
    "pottery": ("pottery kiln", "The pottery kiln is fired only after 18:00 by the caretaker"),
    "aquarium": ("aquarium cleaning", "The lobby aquarium is cleaned by the contractor on Mondays"),
}


def answer_docs() -> list[dict[str, Any]]:
    return [
        {"id": f"{PREFIX}policy/{t}", "title": f"{words.title()} policy", "text": f"# {words.title()}\n\n{answer}.\n"}
        for t, (words, answer) in TOPICS.items()
    ]


def near_topic_docs() -> list[dict[str, Any]]:
    """Plausible documents about each topic that answer none of its questions (they repeat its words)."""
    return [
        {
            "id": f"{PREFIX}news/{t}",
            "title": f"{words.title()} news",
            "text": f"# {words.title()} update\n\nThe {words} team met about the {words} process; {words} questions "
            f"and {words} feedback go to the {words} mailbox.\n",
            "tags": ["hygiene-web-news"],
            "updated_at": "2026-01-15T00:00:00Z",
            "metadata": {"owner": "Facilities desk"},
        }
        for t, (words, _) in TOPICS.items()
    ]


def cases() -> str:
    out = []
    for t, (words, answer) in TOPICS.items():
        evidence = " ".join(answer.split()[-3:])
        for n, question in enumerate((f"{words} rules", f"who handles {words} questions")):
            category = "outdoor" if t in ("kayak", "beehive", "chess") else "indoor"
            out.append(
                {
                    "id": f"{t}-{n}",
                    "question": question,
                    "relevant": [{"doc_id": f"{PREFIX}policy/{t}", "evidence": evidence}],
                    "category": category,
                }
            )
    return "".join(json.dumps(x) + "\n" for x in out)


def _status(page: Page, doc_id: str) -> str:
    return str(page.api("GET", f"/documents/{doc_id}")["status"])


def _checked(page: Page, expected: str = "") -> None:
    """No unlabelled field, no value printed by mistake, no console error but the `expected` one (a refusal the
    page shows: the browser logs the failed request too)."""
    assert page.unlabelled() == []
    assert page.stray_text() == []
    assert [e for e in page.console_errors() if not (expected and expected in e)] == []


def _cleanup(page: Page) -> None:
    headers = {"X-API-Key": page.service.keys["admin"]}
    for doc in near_topic_docs() + answer_docs():
        url = f"{page.service.url}/documents/{doc['id']}"
        httpx.post(f"{url}/restore", headers=headers, timeout=60)  # 409 unless left archived
        httpx.delete(url, headers=headers, timeout=60)


def test_distractors_are_named_pruned_in_a_what_if_archived_with_undo_and_plotted_against_corpus_size(
    page: Page,
) -> None:
    page.api("POST", "/documents", json={"documents": answer_docs()})
    page.api("PUT", f"/eval/sets/{SET}", content=cases(), headers={"Content-Type": "application/x-ndjson"})
    monitoring = {"set": SET, "k": [1, 3], "monitoring": True, "include_cases": False}
    before = page.api("POST", "/eval/run", json=monitoring)
    assert before["metrics"]["precision@1"] == 1.0
    try:
        page.api("POST", "/documents", json={"documents": near_topic_docs()})
        after = page.api("POST", "/eval/run", json=monitoring)
        assert after["metrics"]["precision@1"] < before["metrics"]["precision@1"] - 0.3  # they crowd the top 1
        _browse(page, after["run_id"], before["metrics"]["precision@1"])
    finally:
        _cleanup(page)


def _browse(page: Page, run_id: str, recovered: float) -> None:
    near = {d["id"] for d in near_topic_docs()}
    page.sign_in("admin")
    page.open(f"/ui/#/dashboard/run/{run_id}")
    page.wait_text("#distractor-summary", "top-3 slots")
    Select(page.wait("#distractor-k")).select_by_value("1")  # the cut-off the near-topic documents crowd
    page.wait_text("#distractor-summary", "top-1 slots")
    boxes = page.all("#distractors input[name=distractor]")
    named = {b.get_attribute("value") for b in boxes}
    assert named
    assert named <= near
    table = page.wait("#distractors table")
    assert "Facilities desk" in table.text  # freshness: the owner
    assert "current" in table.text
    assert page.wait("#what-if-run").get_attribute("disabled") is not None  # nothing selected yet
    for box in boxes:
        box.send_keys(Keys.SPACE)  # from the keyboard
    assert page.wait("#distractor-selected").text == f"{len(named)} selected"
    page.wait("#what-if-run").click()

    result = page.wait("#what-if-result", timeout=120)
    row = result.find_element(By.XPATH, ".//tr[td[1][normalize-space()='precision@1']]")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    # precision recovered without them, within one case of the twelve: weighted fusion's z-scores move with the
    # candidate lists, so one case may fall to a demo handbook chunk once the crowding ones are gone (seen since the
    # keyword query drops a question's filler words); the paired test below still says the recovery is significant
    assert float(cells[2]) >= recovered - 1 / (2 * len(TOPICS)) - 1e-3
    assert cells[5] == "significant"
    assert "excluding them helps" in result.text
    assert "outdoor" in result.text
    assert "indoor" in result.text

    first, second = sorted(named)[:2] if len(named) > 1 else (sorted(named)[0], None)
    archive = page.wait(f".archive-row[data-doc='{first}']")
    archive.find_element(By.CSS_SELECTOR, "button.archive").click()
    confirm = page.wait(f".archive-row[data-doc='{first}'] button.confirm-archive")
    assert page.driver.switch_to.active_element == confirm  # the focus moves to the confirmation
    confirm.send_keys(Keys.ENTER)
    undo = page.wait(f".archive-row[data-doc='{first}'] button.undo")
    assert _status(page, first) == "archived"
    _checked(page)
    page.shot_of("#distractors", "distractor-panel")
    undo.click()
    page.wait_text(f".archive-row[data-doc='{first}']", "restored")
    assert _status(page, first) == "current"

    if second:  # an undo the service refuses (restored behind the page's back): its message shown
        page.wait(f".archive-row[data-doc='{second}'] button.archive").click()
        page.wait(f".archive-row[data-doc='{second}'] button.confirm-archive").click()
        undo = page.wait(f".archive-row[data-doc='{second}'] button.undo")
        page.api("POST", f"/documents/{second}/restore")
        undo.click()
        error = page.wait(f".archive-row[data-doc='{second}'] .error")
        assert error.get_attribute("role") == "alert"
        assert error.text
        _checked(page, expected="/restore - Failed to load resource: the server responded with a status of 409")
    else:
        _checked(page)

    runs = page.api("GET", "/eval/runs", params={"set": SET, "kind": "monitoring"})
    sizes = [r["corpus"]["documents"] for r in runs]
    assert sizes[0] == sizes[1] + len(TOPICS)
    page.driver.find_element(By.CSS_SELECTOR, "a.set-link").click()  # the run's set: its own page
    page.wait("#corpus-plot svg.scatter")
    assert "precision@3" in page.wait("#corpus-plot figcaption").text  # the runs' largest k by default
    Select(page.wait("#corpus-metric")).select_by_value("precision@1")
    page.wait_text("#corpus-plot figcaption", "precision@1")
    plot = page.wait("#corpus-plot svg.scatter")
    tips = [t.get_attribute("textContent") for t in plot.find_elements(By.CSS_SELECTOR, ".point title")]
    assert len(tips) == 2  # one point per monitoring run
    assert sorted(f"{n} documents" in " ".join(tips) for n in sizes) == [True, True]
    assert all("UTC" in t for t in tips)  # labelled by date
    history = page.wait("#corpus-history table")
    rows = history.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[3].text for r in rows] == [str(n) for n in sizes]
    assert "on request" in history.text  # runs started through the API, not by the scheduler
    page.wait_text("#distractors", "over the last 5 monitoring runs")
    _checked(page)
    page.shot_of("#corpus-growth", "precision-vs-corpus")
