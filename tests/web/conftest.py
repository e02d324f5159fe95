"""A real service and a real headless Chromium for the page's end-to-end tests.

The service is `plumbline serve` in its own process (auth on, the demo handbook loaded through the real embedding
model, seeded from demo/handbook.embeddings.npz so the start takes seconds, and a FAKE OpenAI-compatible LLM on
loopback for the synthesis and answer-grading views: tests/fake_llm.py); keys are made with `plumbline keys
create`, as an operator would. The browser is Debian's `chromium` driven by its `chromedriver` through Selenium:
nothing is downloaded. Without them the tests skip, unless PLUMBLINE_REQUIRE_BROWSER is set (`.ci/run` sets it).

Screenshots go to $PLUMBLINE_SCREENSHOTS (default build/screenshots); `make screenshots` writes the README's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.fake_llm import brain
from tests.needs import missing
from tests.server import ROOT, ServerProcess, plumbline
from tests.service.infra.openai_fake import FakeOpenAI

REQUIRED = "PLUMBLINE_REQUIRE_BROWSER"
ROLES = {
    "admin": ("admin",),
    "support": ("search", "incidents:report"),
}


class Service:
    """The running service, and the keys made for it by role name."""

    def __init__(self, server: ServerProcess, keys: dict[str, str]) -> None:
        self.server = server
        self.url = server.url
        self.keys = keys


def _make_key(data_dir: Path, name: str, roles: tuple[str, ...]) -> str:
    done = plumbline("keys", "create", "--data-dir", str(data_dir), name, *(f"--role={r}" for r in roles))
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("pl_"))


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("web") / "data"
    llm = FakeOpenAI(default=brain)
    env = {
        "PLUMBLINE_AUTH": "on",
        "PLUMBLINE_EMBEDDING_SEED": str(ROOT / "demo" / "handbook.embeddings.npz"),
        "HF_HUB_OFFLINE": "1",
        "PLUMBLINE_LLM_BASE_URL": llm.base_url,
        "PLUMBLINE_LLM_MODEL": "fake-model",
    }
    with llm, ServerProcess(data, env=env, args=["--ingest", str(ROOT / "demo" / "handbook")]) as server:
        keys = {name: _make_key(data, name, roles) for name, roles in ROLES.items()}
        yield Service(server, keys)


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        missing("Chromium and its driver are not installed (apt-get install chromium chromium-driver)", REQUIRED)
    return browser, driver


@pytest.fixture
def browser(chromium: tuple[str, str]) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service as DriverService

    options = Options()
    options.binary_location = chromium[0]
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    options.add_argument("--lang=en-US")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(chromium[1]), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    folder = Path(os.environ.get("PLUMBLINE_SCREENSHOTS") or ROOT / "build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


WAIT = 60
UNLABELLED = """return [...document.querySelectorAll('input, select, textarea')]
  .filter(el => el.type !== 'hidden' && !el.closest('[hidden]'))
  .filter(el => !el.labels?.length && !el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby'))
  .map(el => el.outerHTML.slice(0, 120));"""
ELSEWHERE = """return performance.getEntriesByType('resource').map(e => e.name)
  .filter(n => !n.startsWith(location.origin));"""
# a value the page printed instead of leaving out: `null` or `undefined` as a whole text, NaN, or an object
STRAY = """const found = [];
const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walk.nextNode()) {
  const text = walk.currentNode.textContent.trim();
  if (/^(null|undefined|NaN)$/.test(text) || /\\[object Object\\]|\\bundefined\\b|\\bNaN\\b/.test(text))
    found.push(`${JSON.stringify(text.slice(0, 60))} in ${walk.currentNode.parentElement.outerHTML.slice(0, 160)}`);
}
return found;"""


class Page:
    """The browser on the service's page, with the waits and checks the tests share."""

    def __init__(self, driver: Any, service: Service, screenshots: Path) -> None:
        self.driver, self.service, self.screenshots = driver, service, screenshots

    def open(self, path: str) -> None:
        url = self.service.url + path
        if self.driver.current_url == url:
            self.driver.refresh()  # the same URL with a #fragment would not load the page again
        else:
            self.driver.get(url)

    def sign_in(self, who: str) -> None:
        self.open("/ui/")
        self.wait("#login-key").send_keys(self.service.keys[who], Keys.ENTER)
        self.wait("#view-title")

    def wait(self, css: str, timeout: float = WAIT) -> WebElement:
        return WebDriverWait(self.driver, timeout).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))

    def wait_text(self, css: str, text: str, timeout: float = WAIT) -> WebElement:
        WebDriverWait(self.driver, timeout).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def shot(self, name: str) -> None:
        """A screenshot of the whole page (up to 2400 px tall) at the current width."""
        width = self.driver.get_window_size()["width"]
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(width, min(max(height, 700), 2400))
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(self.screenshots / f"{name}.png"))
        self.driver.set_window_size(width, 900)

    def shot_of(self, css: str, name: str) -> None:
        """A screenshot of one element (e.g. a panel of a long page), the window made tall enough to hold it."""
        element = self.wait(css)
        width = self.driver.get_window_size()["width"]
        height = self.driver.execute_script("return arguments[0].getBoundingClientRect().height", element)
        self.driver.set_window_size(width, min(max(int(height) + 300, 900), 4000))
        self.driver.execute_script("arguments[0].scrollIntoView()", element)
        element.screenshot(str(self.screenshots / f"{name}.png"))
        self.driver.set_window_size(width, 900)

    def unlabelled(self) -> list[str]:
        return list(self.driver.execute_script(UNLABELLED))

    def elsewhere(self) -> list[str]:
        return list(self.driver.execute_script(ELSEWHERE))

    def stray_text(self) -> list[str]:
        """Texts that are a value printed by mistake (`null`, `undefined`, NaN, [object Object]), with where."""
        return list(self.driver.execute_script(STRAY))

    def console_errors(self) -> list[str]:
        # the first /auth/me of a visit without a key is a 401 by design: the page then shows its login box
        return [
            e["message"]
            for e in self.driver.get_log("browser")
            if e["level"] == "SEVERE" and not ("/auth/me" in e["message"] and "401" in e["message"])
        ]

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"X-API-Key": self.service.keys["admin"], **kwargs.pop("headers", {})}
        response = httpx.request(method, self.service.url + path, headers=headers, timeout=120, **kwargs)
        assert response.status_code < 300, response.text
        return response.json()


@pytest.fixture
def page(browser: Any, service: Service, screenshots: Path) -> Page:
    return Page(browser, service, screenshots)
