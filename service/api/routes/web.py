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
router = APIRouter(include_in_schema=False)


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_without_slash() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/docs")
def api_docs() -> FileResponse:
    return FileResponse(WEB / "docs.html")


def install(app: FastAPI) -> None:
    """The routes above, and the page's files under /ui/ (index.html at /ui/)."""
    app.include_router(router)
    app.mount("/ui", StaticFiles(directory=WEB, html=True), name="ui")
