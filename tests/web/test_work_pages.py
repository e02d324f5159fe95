"""The Labs views end to end (#/labs): a synthetic set drafted, followed and reviewed; a sweep started, its table
sorted and its plot drawn; answers graded beside the set's retrieval. A real service with the FAKE LLM of
tests/fake_llm.py (conftest), a real headless Chromium; each view is checked for unlabelled fields, text that
is a value printed by mistake (`null`), and console errors, and saves a screenshot."""

from __future__ import annotations

import json
import re

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.web.conftest import WAIT, Page

pytestmark = [pytest.mark.process, pytest.mark.browser]


def _fill(element: WebElement, text: str) -> None:
    element.clear()
    element.send_keys(text)


def _count(page: Page, status: str) -> int:
    found = re.search(rf"{status} (\d+)", page.wait("#proposal-counts").text)
    assert found, page.wait("#proposal-counts").text
    return int(found.group(1))


def _counts_become(page: Page, **expected: int) -> None:
    WebDriverWait(page.driver, WAIT).until(lambda _: all(_count(page, s) == n for s, n in expected.items()))


def _checked(page: Page) -> None:
    assert page.unlabelled() == []
    assert page.stray_text() == []
    assert page.console_errors() == []


def test_a_synthesis_is_drafted_followed_and_its_proposed_cases_reviewed(page: Page) -> None:
    page.sign_in("admin")
    page.open("/ui/#/labs/synthesis")
    form = page.wait("#synthesis-form")
    form.find_element(By.NAME, "set").send_keys("day0")
    _fill(form.find_element(By.NAME, "passages"), "4")
    _fill(form.find_element(By.NAME, "seed"), "7")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    outcome = page.wait_text("#synthesis-outcome", "Drafted", timeout=120)
    assert "fake-model" in outcome.text
    assert "synth-v1" in outcome.text
    assert "copies a long run of words" in outcome.text  # discarded by reason
    assert len(outcome.find_elements(By.CSS_SELECTOR, "svg.histogram rect")) == 5  # the overlap distribution
    assert re.search(r"\d+ prompt \+ \d+ completion", outcome.text)  # tokens used

    page.wait_text("#proposal-counts", "day0")  # the review shows the set just drafted
    proposed, discarded = _count(page, "proposed"), _count(page, "discarded")
    assert proposed >= 2
    assert discarded >= 4
    cards = page.all("#proposals .proposal")
    assert len(cards) == proposed
    first = cards[0]
    assert first.find_element(By.CSS_SELECTOR, ".evidence mark").text  # the evidence, marked
    assert "the passage states it" in first.find_element(By.CSS_SELECTOR, ".check-reason").text  # the LLM's check
    assert "#" in first.find_element(By.CSS_SELECTOR, ".meta code").text  # the chunk id
    first.find_element(By.CSS_SELECTOR, ".passage-details summary").click()
    assert page.wait("#proposals .passage mark").text  # the chunk itself, fetched when opened, its evidence marked
    accepted_question = first.find_element(By.CSS_SELECTOR, "h4").text
    _checked(page)

    first.find_element(By.CSS_SELECTOR, "button.accept").send_keys(Keys.ENTER)  # from the keyboard
    _counts_become(page, proposed=proposed - 1, accepted=1)
    second = page.all("#proposals .proposal")[0]
    second.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys("too vague to have one answer")
    second.find_element(By.CSS_SELECTOR, "button.reject").click()
    _counts_become(page, proposed=proposed - 2, accepted=1, rejected=1)
    assert "rejected" in page.wait("#proposals-status").text
    sets = {s["name"]: s["cases"] for s in page.api("GET", "/eval/sets")}
    assert sets["day0"] == 1  # the accepted case joined the set
    page.shot("synthesis-review")

    Select(page.wait("#proposals-filter")).select_by_value("accepted")
    assert accepted_question in page.wait_text("#proposals", accepted_question).text
    Select(page.wait("#proposals-filter")).select_by_value("discarded")
    discarded_card = page.wait_text("#proposals", "Discarded because")
    assert "pronoun_led" in discarded_card.text
    assert "copied" in discarded_card.text
    assert page.all("#proposals button.accept") == []  # a discarded draft is not reviewed
    page.shot("synthesis-discarded")
    _checked(page)

    run = page.api("POST", "/eval/run", json={"set": "day0"})  # the accepted case, replayed: counted apart
    page.open(f"/ui/#/dashboard/run/{run['run_id']}")
    assert "1 of 1 cases are synthetic" in page.wait_text("#origin", "synthetic").text
    _checked(page)


def _number(text: str) -> float:
    return float(text.split()[0])


def test_a_sweep_is_started_and_its_finished_table_sorts_beside_its_plot(page: Page) -> None:
    page.sign_in("admin")
    page.open("/ui/#/labs/sweeps")
    page.wait("#sweep-start summary").click()
    form = page.wait("#sweep-form")
    Select(form.find_element(By.NAME, "set")).select_by_value("handbook")
    space = form.find_element(By.NAME, "space")
    _fill(space, '{"mode": ["keyword", "hybrid"], "alpha": [0.3, 0.7]}')
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    table = page.wait("#sweep-rows", timeout=180)  # the page moves to the finished sweep
    sweep_id = page.driver.current_url.rsplit("/", 1)[1]
    result = page.api("GET", f"/eval/sweeps/{sweep_id}")["result"]
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == len(result["rows"]) == 3  # alpha means nothing to keyword: two merged into one
    plot = page.wait("svg.scatter")
    assert len(plot.find_elements(By.CSS_SELECTOR, ".point circle")) == len(result["rows"])
    assert len(plot.find_elements(By.CSS_SELECTOR, ".point.marked")) == sum(r["pareto"] for r in result["rows"])
    assert "winner" in plot.text
    assert len(plot.find_elements(By.CSS_SELECTOR, ".point title")) == len(result["rows"])  # the tooltips
    assert "p95 search latency (ms)" in plot.text
    assert "ndcg@10" in plot.text
    assert result["winner"] in table.find_element(By.CSS_SELECTOR, "tr.winner").text

    def column(n: int) -> list[float]:
        return [_number(td.text) for td in table.find_elements(By.CSS_SELECTOR, f"tbody td:nth-child({n})")]

    assert column(2) == sorted(column(2), reverse=True)  # best quality first
    p95 = table.find_element(By.XPATH, ".//th[button[contains(., 'p95')]]")
    p95.find_element(By.TAG_NAME, "button").click()
    assert p95.get_attribute("aria-sort") == "ascending"
    assert column(4) == sorted(column(4))
    p95.find_element(By.TAG_NAME, "button").send_keys(Keys.ENTER)  # again, from the keyboard: the other way
    assert p95.get_attribute("aria-sort") == "descending"
    assert column(4) == sorted(column(4), reverse=True)

    held_out = page.wait("#held-out")
    assert "Paired test: p =" in held_out.text
    assert "significant" in held_out.text
    assert result["recommendation"] in page.wait("#recommendation").text
    assert page.wait("#promote").is_enabled()  # not pressed: it would change what this session's service serves
    page.shot("sweep-result")
    _checked(page)


def test_answers_are_graded_beside_the_sets_retrieval_with_a_fix_retrieval_first_note(page: Page) -> None:
    cases = [
        {"id": "lr-1", "question": "How many days of annual leave do staff get?", "relevant": [{"doc_id": "gone/x"}]},
        {"id": "lr-2", "question": "What does VPN error 809 mean?", "relevant": [{"doc_id": "it/vpn"}]},
    ]
    body = "".join(json.dumps(c) + "\n" for c in cases)
    page.api("PUT", "/eval/sets/lowrec", content=body, headers={"Content-Type": "application/x-ndjson"})
    run = page.api("POST", "/eval/run", json={"set": "lowrec", "include_cases": False})
    assert run["metrics"]["recall@10"] < 0.8  # one case names a document the index does not hold

    page.sign_in("admin")
    page.open("/ui/#/labs/answers")
    page.wait("#answers-start summary").click()
    form = page.wait("#answers-form")
    _fill(form.find_element(By.NAME, "set"), "lowrec")
    _fill(form.find_element(By.NAME, "samples"), "2")
    items = [
        {"id": "lr-1", "question": cases[0]["question"], "answer": "25 days.", "contexts": ["25 working days"]},
        {"id": "lr-2", "question": cases[1]["question"], "answer": "Use TCP.", "contexts": ["Switch to TCP"]},
    ]
    form.find_element(By.NAME, "items").send_keys("\n".join(json.dumps(i) for i in items))
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    note = page.wait("#retrieval-note", timeout=120)
    assert "fix retrieval first" in note.text.lower()
    assert "lowrec" in note.text
    assert note.get_attribute("role") == "alert"
    retrieval = page.wait_text("#retrieval", "recall@10")
    assert f"{run['metrics']['recall@10']:.3f}" in retrieval.text
    assert "mrr@10" in retrieval.text
    report = page.wait(".answer-report")
    assert "0.750" in report.text
    assert "0.250" in report.text
    graded = page.wait("#answer-items")
    assert len(graded.find_elements(By.CSS_SELECTOR, "tbody tr")) == 2
    assert "leaves out the exceptions" in graded.text  # the judge's reason
    page.shot("answers-graded")
    _checked(page)

    page.open("/ui/#/labs/answers")
    assert "fix retrieval first" in page.wait_text("#answers-list", "lowrec").text
    _checked(page)
