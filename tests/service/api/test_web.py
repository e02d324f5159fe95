"""The page and the API docs are served by the service itself: every file they reference comes from this origin
(a machine without internet gets a working /docs, not a blank page), under a self-only content policy."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.api.access_helpers import secured_client

REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
IMPORT = re.compile(r"""^import\b[^;]*?\bfrom\s+["']([^"']+)["'];""", re.MULTILINE | re.DOTALL)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with secured_client(settings) as c:  # auth on: the page's files need no key, its data does
        yield c


def _references(client: TestClient, page: str) -> list[str]:
    html = client.get(page).text
    base = page if page.endswith("/") else page.rsplit("/", 1)[0] + "/"
    found = [ref for ref in REFERENCE.findall(html) if not ref.startswith(("#", "data:"))]
    assert found, page
    return [ref if ref.startswith("/") else base + ref for ref in found]


@pytest.mark.parametrize("page", ["/ui/", "/docs"])
def test_every_file_a_page_references_is_served_here(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", response.text)  # no other host
    for ref in _references(client, page):
        assert ref.startswith("/"), ref
        assert client.get(ref).status_code == 200, ref


def test_the_page_scripts_import_only_files_served_here(client: TestClient) -> None:
    scripts = [ref for ref in _references(client, "/ui/") if ref.endswith(".js")]
    seen: set[str] = set()
    while scripts:
        script = scripts.pop()
        if script in seen:
            continue
        seen.add(script)
        source = client.get(script)
        assert source.status_code == 200, script
        assert source.headers["content-type"].startswith("text/javascript")
        scripts += [script.rsplit("/", 1)[0] + "/" + name.removeprefix("./") for name in IMPORT.findall(source.text)]
    modules = {p.name for p in (Path(__file__).resolve().parents[3] / "service" / "web" / "assets").glob("*.js")}
    assert {s.rsplit("/", 1)[1] for s in seen} == modules - {"docs.js"}  # docs.js is /docs' script


def test_swagger_ui_is_vendored_and_calls_no_validator(client: TestClient) -> None:
    init = client.get("/ui/assets/docs.js").text
    assert 'url: "/openapi.json"' in init
    assert "validatorUrl: null" in init  # Swagger UI's default badge would call validator.swagger.io
    bundle = client.get("/ui/vendor/swagger-ui/swagger-ui-bundle.js")
    assert bundle.status_code == 200
    assert len(bundle.content) > 1_000_000
    assert client.get("/redoc").status_code == 404  # FastAPI's ReDoc page loads from a CDN: not offered


def test_home_redirects_to_the_page_and_the_page_needs_no_key(client: TestClient) -> None:
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 307
    assert home.headers["location"] == "/ui/"
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    assert client.get("/ui/").status_code == 200
    assert client.get("/docs").status_code == 200
    assert client.get("/auth/me").status_code == 401  # the data behind the page does


def _policy(client: TestClient, path: str) -> dict[str, str]:
    header = client.get(path).headers["content-security-policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


def test_a_self_only_content_policy_and_revalidated_assets(client: TestClient) -> None:
    policy = _policy(client, "/ui/")
    assert policy["default-src"] == policy["script-src"] == policy["style-src"] == policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    docs = _policy(client, "/docs")  # Swagger UI sets inline styles and draws data: icons; its scripts stay 'self'
    assert docs["script-src"] == "'self'"
    assert (docs["style-src"], docs["img-src"]) == ("'self' 'unsafe-inline'", "'self' data:")
    assert client.get("/ui/assets/app.js").headers["cache-control"] == "no-cache"
    assert client.get("/search").headers["cache-control"] == "no-store"


def test_the_package_ships_every_file_of_the_page() -> None:
    """`pip install .` (the Docker image) installs only what pyproject's package-data names."""
    root = Path(__file__).resolve().parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["service"]
    files = [p.relative_to(root / "service") for p in (root / "service" / "web").rglob("*") if p.is_file()]
    assert files
    assert [f for f in files if not any(f.match(g) for g in globs)] == []
