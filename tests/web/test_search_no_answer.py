"""The search playground's "nothing matches" notice end to end: before any threshold is learned the playground says
why it cannot tell; after `POST /eval/no-answer/calibrate` on the handbook set, an off-topic question gets the notice
above its hits and an on-topic one only a quiet line (the best match against the threshold)."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from tests.web.conftest import Page

pytestmark = [pytest.mark.process, pytest.mark.browser]

ON_TOPIC = "refund for an annual plan"  # the handbook's billing/refunds answers it (best dense score about 0.64)
OFF_TOPIC = "recipe for sourdough bread with rye flour"  # nothing in the handbook is about baking (about 0.12)
# the notice is drawn above the hits: `.hits` follows it in the document
ABOVE_HITS = """const notice = document.getElementById('no-answer');
const hits = document.querySelector('#search-results .hits');
return Boolean(notice && hits && notice.compareDocumentPosition(hits) & Node.DOCUMENT_POSITION_FOLLOWING);"""


def _search(page: Page, question: str, expected: str) -> WebElement:
    """Ask `question` in the playground's form, as a user would, and wait for the verdict line that says `expected`."""
    box = page.wait("#q")
    box.clear()
    box.send_keys(question, Keys.ENTER)
    page.wait_text("#no-answer", expected)
    page.wait("#search-results .hit")
    assert page.driver.execute_script(ABOVE_HITS)
    return page.driver.find_element(By.ID, "no-answer")


def _verdict(page: Page, question: str) -> dict[str, object]:
    return dict(page.api("POST", "/search", json={"query": question})["no_answer"])


def test_the_playground_says_when_nothing_here_probably_answers(page: Page) -> None:
    page.sign_in("admin")
    stored = httpx.get(
        page.service.url + "/eval/no-answer", headers={"X-API-Key": page.service.keys["admin"]}, timeout=60
    )
    assert stored.status_code == 404, "this test expects the session's service to have no threshold yet"

    # before calibration: no verdict, the service's reason in a muted line, no notice
    page.open(f"/ui/#/search?q={quote(ON_TOPIC)}")
    line = page.wait_text("#no-answer", "no threshold learned yet")
    assert line.get_attribute("data-verdict") == "unknown"
    assert line.get_attribute("role") is None
    assert "Nothing here probably answers" not in page.wait("#search-results").text
    assert page.driver.execute_script(ABOVE_HITS)
    assert page.stray_text() == []

    record = page.api("POST", "/eval/no-answer/calibrate", json={"sets": ["handbook"], "k": 5})
    threshold = float(record["threshold"])
    assert record["k"] == 5
    assert 0 < threshold < 1

    on_topic, off_topic = _verdict(page, ON_TOPIC), _verdict(page, OFF_TOPIC)
    assert (on_topic["nothing_matches"], off_topic["nothing_matches"]) == (False, True), (on_topic, off_topic)

    # an on-topic question: a quiet line, the best match above the threshold, and no notice
    line = _search(page, ON_TOPIC, "above the learned threshold")
    assert line.get_attribute("data-verdict") == "answer"
    assert line.get_attribute("role") is None
    assert f"Best match {on_topic['score']:.2f}" in line.text
    assert f"threshold {threshold:.2f} (top 5)" in line.text
    assert page.all("#search-results [role=alert]") == []
    assert "Nothing here probably answers" not in page.wait("#search-results").text

    # an off-topic one: the notice, announced (role=alert), above the hits, with the numbers
    notice = _search(page, OFF_TOPIC, "Nothing here probably answers this")
    assert notice.get_attribute("data-verdict") == "nothing"
    assert notice.get_attribute("role") == "alert"
    assert notice.text == (
        f"Nothing here probably answers this: best match {off_topic['score']:.2f}, "
        f"below the learned threshold {threshold:.2f} (top 5)."
    )
    assert page.unlabelled() == []
    assert page.stray_text() == []
    page.shot("search-nothing-matches")

    # a keyword-only search has no dense score to judge, even with a threshold: the service's reason, muted
    page.open(f"/ui/#/search?q={quote(ON_TOPIC)}&mode=keyword")
    line = page.wait_text("#no-answer", "no hit has a dense score")
    assert line.get_attribute("data-verdict") == "unknown"
    assert page.all("#search-results [role=alert]") == []
    assert page.elsewhere() == []
    assert page.console_errors() == []
