"""A real service and a real headless Chromium for the page's end-to-end tests.

The service is `plumbline serve` in its own process (auth on, the demo handbook loaded through the real embedding
model, seeded from demo/handbook.embeddings.npz so the start takes seconds); keys are made with `plumbline keys
create`, as an operator would. The browser is Debian's `chromium` driven by its `chromedriver` through Selenium:
nothing is downloaded. Without them the tests skip, unless PLUMBLINE_REQUIRE_BROWSER is set (`.ci/run` sets it).

Screenshots go to $PLUMBLINE_SCREENSHOTS (default build/screenshots); `make screenshots` writes the README's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.needs import missing
from tests.server import ROOT, ServerProcess, plumbline

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
    env = {
        "PLUMBLINE_AUTH": "on",
        "PLUMBLINE_EMBEDDING_SEED": str(ROOT / "demo" / "handbook.embeddings.npz"),
        "HF_HUB_OFFLINE": "1",
    }
    with ServerProcess(data, env=env, args=["--ingest", str(ROOT / "demo" / "handbook")]) as server:
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
