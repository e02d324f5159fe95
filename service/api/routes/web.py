"""The web page and the API docs, served by the service itself from `service/web`: nothing is fetched from the
internet at run time (Swagger UI is vendored under `service/web/vendor`).

`/` redirects to `/ui/`, the single page (search playground, quality dashboard, incident desk, document browser);
it calls the same JSON API as any client, with the API key from its sign-in box. `/docs` is Swagger UI over
`/openapi.json`. None of these routes needs a key: they hold no data."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

WEB = Path(__file__).resolve().parents[2] / "web"
# Every response's content policy (`app.SECURITY_HEADERS`): scripts, styles, images and requests from this origin only.
CONTENT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# Swagger UI also sets inline styles and draws data: icons; its scripts still come from here only.
DOCS_POLICY = CONTENT_POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'").replace(
    "img-src 'self'", "img-src 'self' data:"
)
router = APIRouter(include_in_schema=False)


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_without_slash() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/docs")
def api_docs() -> FileResponse:
    return FileResponse(WEB / "docs.html", headers={"Content-Security-Policy": DOCS_POLICY})


def install(app: FastAPI) -> None:
    """The routes above, and the page's files under /ui/ (index.html at /ui/)."""
    app.include_router(router)
    app.mount("/ui", StaticFiles(directory=WEB, html=True), name="ui")
