"""The page end to end: a real service over HTTP, a real headless Chromium, and what a user does with it.

Each test signs in through the login box with a key made by `plumbline keys create`, and saves screenshots (the
README shows them). Every page is also checked for fields without a label, for console errors (a content-policy
violation is one) and for anything loaded from another host."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.web.conftest import WAIT, Page

pytestmark = [pytest.mark.process, pytest.mark.browser]


def test_each_page_loads_labelled_and_from_this_service_only(page: Page) -> None:
    page.sign_in("admin")
    for name, marker in (
        ("search", "#q"),
        ("dashboard", ".cards > *"),  # the set cards, drawn after the run form
        ("incidents", "#queue .queue-status:not(:empty)"),
        ("documents", "#document-list table"),
        ("labs/synthesis", "#proposals-status:not(:empty)"),
        ("labs/sweeps", "#sweep-list table, #sweep-list .empty"),
        ("labs/answers", "#answers-list table, #answers-list .empty"),
    ):
        page.open(f"/ui/#/{name}")
        page.wait(marker)
        assert page.wait("#view-title").text
        assert page.unlabelled() == [], name
        assert page.stray_text() == [], name  # e.g. a `null` child printed as text
        page.shot(f"page-{name.replace('/', '-')}")
    assert page.elsewhere() == []
    assert page.console_errors() == []


def test_api_docs_render_offline(page: Page) -> None:
    page.open("/docs")
    page.wait(".opblock-tag", timeout=WAIT)  # Swagger UI rendered the operations from /openapi.json
    assert page.all(".opblock")
    assert page.elsewhere() == []
    assert page.console_errors() == []  # a script or style the content policy blocked would be an error
    page.shot("api-docs")


def test_a_search_marks_the_query_and_opens_its_explain_view_by_keyboard(page: Page) -> None:
    page.sign_in("admin")
    page.open("/ui/#/search")
    page.wait("#q").send_keys("refund for an annual plan", Keys.ENTER)
    first = page.wait(".hit article")
    assert page.unlabelled() == []
    assert first.find_elements(By.CSS_SELECTOR, ".text mark")  # the query's words are marked in the text
    assert "total" in page.wait(".timing-bars").text
    summary = first.find_element(By.CSS_SELECTOR, "details.explain summary")
    summary.send_keys(Keys.ENTER)  # a <summary> opens with the keyboard
    explain = first.find_element(By.CSS_SELECTOR, "details.explain")
    assert explain.get_attribute("open") is not None
    stages = explain.text
    assert "Dense" in stages
    assert "Keyword (BM25)" in stages
    assert "Fused" in stages
    assert "#1" in stages
    page.shot("search-explain")
    assert page.console_errors() == []


def _choose_document(page: Page, words: str, doc_id: str) -> None:
    """Type into the picker, then move to the option for `doc_id` with the arrow keys and take it with Enter."""
    picker = page.wait("#doc-picker")
    picker.send_keys(words)
    page.wait_text("#doc-options", doc_id)
    texts = [o.text for o in page.all("#doc-options [role=option]")]
    target = next(n for n, text in enumerate(texts) if doc_id in text.splitlines())
    picker.send_keys(*([Keys.ARROW_DOWN] * (target + 1)), Keys.ENTER)
    page.wait_text("#doc-chosen", doc_id)


def test_a_failed_search_becomes_an_incident_with_its_triage_and_is_accepted(page: Page) -> None:
    question = "can I get my money back on a yearly subscription"
    page.sign_in("admin")
    page.open("/ui/#/search")
    page.wait("#q").send_keys(question, Keys.ENTER)
    page.wait(".hit")
    page.wait("#report-failure").click()
    assert page.wait("#incident-question").get_attribute("value") == question  # the form is pre-filled
    _choose_document(page, "refunds annual plans", "billing/refunds")
    page.wait("#incident-evidence").send_keys("Annual plans")
    page.driver.find_element(By.NAME, "category").send_keys("billing")
    page.driver.find_element(By.CSS_SELECTOR, "#incident-form button[type=submit]").click()
    triage = page.wait("#report-result .triage")
    assert any(v in triage.text for v in ("retrieved", "ranked low", "not retrieved", "filtered out", "stale source"))
    assert "Where each stage put the source" in triage.text
    filed = page.wait("#report-result [role=status]").text
    incident_id = int(filed.split("#")[1].split(".")[0].split(" ")[0])
    page.shot("incident-triage")

    page.driver.find_element(By.CSS_SELECTOR, "#queue-filters button[type=submit]").click()
    row = page.wait_text("#queue table", question).find_element(
        By.XPATH, f".//tr[td/a[normalize-space()='#{incident_id}']]"
    )
    assert page.unlabelled() == []  # the review controls of each row
    row.find_element(By.CSS_SELECTOR, "button.accept").click()
    assert "Say why it is accepted" in page.wait_text("#queue [role=alert]", "Say why").text  # the service keeps why
    row.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys("the refund page answers it")
    row.find_element(By.CSS_SELECTOR, "button.accept").click()
    WebDriverWait(page.driver, WAIT).until(lambda d: question not in d.find_element(By.ID, "queue").text)
    assert [e.text for e in page.all("#queue .error") if e.text] == []
    assert page.api("GET", f"/eval/incidents/{incident_id}")["status"] == "accepted"
    page.open(f"/ui/#/incidents/{incident_id}")
    assert "accepted" in page.wait("#incident-title").text
    assert "accepted" in page.wait(".history").text
    page.shot("incident-accepted")
    assert page.console_errors() == []


def test_a_support_key_sees_only_what_its_roles_allow(page: Page) -> None:
    page.sign_in("support")
    visible = [a.text for a in page.all("#nav a[data-page]") if a.is_displayed()]
    assert visible == ["Search", "Incidents", "Documents"]  # no quality dashboard without eval:run
    page.open("/ui/#/incidents")
    page.wait("#incident-form")
    page.wait("#queue")
    assert page.all("#queue button.accept") == []  # reporting, not reviewing
    page.wait("#doc-picker").send_keys("it/vpn", Keys.ENTER)  # Enter before any suggestion: the typed id
    assert "(it/vpn)" in page.wait_text("#doc-chosen", "it/vpn").text
    assert page.wait("#incident-form").is_displayed()  # Enter in the picker did not submit the form
    page.open("/ui/#/dashboard")
    assert "may not use this page" in page.wait("#page .error").text
    page.driver.find_element(By.CSS_SELECTOR, "#who button").click()  # sign out
    page.wait("#login-key").send_keys("pl_0123456789abcdef_" + "x" * 43, Keys.ENTER)
    assert "not accepted" in page.wait_text("#login-error", "not accepted").text


def test_the_dashboard_after_an_eval_run_drills_into_a_case_and_compares_runs(page: Page) -> None:
    page.sign_in("admin")
    page.open("/ui/#/dashboard")
    page.wait("details.run-panel summary").click()
    Select(page.wait("#run-form select[name=kind]")).select_by_value("monitoring")
    page.driver.find_element(By.CSS_SELECTOR, "#run-form button[type=submit]").click()
    card = page.wait(".set-card", timeout=180)
    assert "monitoring" in card.text
    assert "Gate:" in card.text
    bars = card.find_element(By.CSS_SELECTOR, "figure svg.chart")
    assert "per category" in card.text
    assert bars.get_attribute("aria-label")
    page.api("POST", "/eval/run", json={"set": "handbook", "monitoring": True, "include_cases": False})
    page.open("/ui/#/dashboard")  # two monitoring runs: history, overall and per category
    history = page.wait_text(".category-history", "per category, the last 2 runs")
    assert len(history.find_elements(By.CSS_SELECTOR, "polyline")) == 6  # the handbook's six categories
    card = page.wait(".set-card")
    page.shot("dashboard")

    card.find_element(By.CSS_SELECTOR, "p a[href*='/run/']").click()
    cases = WebDriverWait(page.driver, WAIT).until(
        ec.visibility_of_element_located((By.XPATH, "//table[caption[contains(., 'Every case')]]"))
    )
    cases.find_element(By.CSS_SELECTOR, "tbody a").click()
    case = page.wait(".case")
    assert "Expected" in case.text
    assert "What came instead" in case.text
    assert case.find_elements(By.CSS_SELECTOR, "tbody tr")
    page.shot("dashboard-case")

    for mode in ("keyword", "dense"):
        page.api("POST", "/eval/run", json={"set": "handbook", "overrides": {"mode": mode}, "include_cases": False})
    page.open("/ui/#/dashboard")
    boxes = [page.wait("#compare-form input[name=compare]"), *page.all("#compare-form input[name=compare]")[1:2]]
    assert page.unlabelled() == []  # the compare checkboxes
    for box in boxes:
        box.click()
    page.driver.find_element(By.CSS_SELECTOR, "#compare-form button[type=submit]").click()
    compare = page.wait(".compare")
    assert "B − A" in compare.text
    assert '"mode":"keyword"' in compare.text
    assert '"mode":"dense"' in compare.text
    page.shot("dashboard-compare")
    assert page.console_errors() == []


def test_the_document_browser_pages_filters_and_follows_supersession(page: Page) -> None:
    page.sign_in("admin")
    page.open("/ui/#/documents")
    total = page.api("GET", "/documents", params={"limit": 1})["total"]
    assert f"{total} documents match; page 1" in page.wait("#document-list [role=status]").text
    page.wait_text(".pager", "Next page").find_element(By.XPATH, ".//button[.='Next page']").click()
    page.wait_text("#document-list [role=status]", "page 2")
    Select(page.wait("#document-filters select[name=status]")).select_by_value("superseded")
    page.driver.find_element(By.CSS_SELECTOR, "#document-filters button[type=submit]").click()
    listed = page.wait_text("#document-list table", "billing/pricing-2025")
    listed.find_element(By.LINK_TEXT, "billing/pricing-2025").click()
    chain = page.wait(".chain")
    assert [li.text.split()[0] for li in chain.find_elements(By.TAG_NAME, "li")] == [
        "billing/pricing-2025",
        "billing/pricing",
    ]
    assert page.all(".chunks li")
    page.shot("documents-supersession")
    assert page.console_errors() == []


def test_a_narrow_screen_gets_one_column_without_sideways_scrolling(page: Page) -> None:
    page.driver.set_window_size(390, 844)
    page.sign_in("admin")
    page.open("/ui/#/search?q=" + "vpn%20session%20expired")
    page.wait(".hit")
    for view in ("search?q=vpn%20session%20expired", "incidents", "documents"):
        page.open(f"/ui/#/{view}")
        page.wait("#view-title")
        page.wait(".hit, #incident-form, #document-list table")
        overflow = page.driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, (view, overflow)
    page.open("/ui/#/search?q=vpn%20session%20expired")
    page.wait(".hit")
    page.shot("narrow-search")
    assert page.console_errors() == []
