"""The API's documentation pages without a CDN: ``/docs`` (Swagger UI) and ``/redoc``.

FastAPI's own pages load Swagger UI and ReDoc from jsDelivr, so offline they are blank. Here
the same pages (FastAPI's ``get_swagger_ui_html`` / ``get_redoc_html``) point at copies of
those files that the ``fastapi-offline`` package ships (MIT; Swagger UI is Apache-2.0,
ReDoc MIT), served by the service itself under :data:`STATIC_PREFIX`. Without that package
the pages fall back to FastAPI's CDN URLs, with a warning in the log. Like ``/openapi.json``
the pages and their assets need no key: they hold the schema only.

Each page carries the service's page headers (:func:`page_headers`): a Content-Security-Policy
that runs only the page's own inline script (by its SHA-256) and the bundled files, no
framing (``X-Frame-Options: DENY``), ``nosniff`` and no referrer.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import logging
import re
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError

log = logging.getLogger(__name__)

STATIC_PREFIX = "/static/docs"
"""Where the pages' JavaScript, CSS and icon are served."""

ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
          "swagger-ui.css": "text/css; charset=utf-8",
          "redoc.standalone.js": "text/javascript; charset=utf-8",
          "favicon.png": "image/png"}
"""The files served under :data:`STATIC_PREFIX` (no other name is), with their types."""

PACKAGE = "fastapi_offline"


def asset_dir() -> Path | None:
    """The folder of the bundled Swagger UI and ReDoc files; None when ``fastapi-offline``
    is not installed or lacks one of them."""
    try:
        folder = Path(str(importlib.resources.files(PACKAGE) / "static"))
    except ModuleNotFoundError:
        return None
    return folder if all((folder / name).is_file() for name in ASSETS) else None


_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)

CDN_SOURCES = {"script-src": "https://cdn.jsdelivr.net", "style-src":
               "https://cdn.jsdelivr.net https://fonts.googleapis.com",
               "img-src": "https://fastapi.tiangolo.com https://cdn.redoc.ly",
               "font-src": "https://fonts.gstatic.com"}
"""What the pages load from outside when ``fastapi-offline`` is missing (FastAPI's URLs)."""


def page_headers(html: str, *, cdn: bool = False) -> dict[str, str]:
    """The headers of a documentation page whose HTML is ``html``: a CSP that lets the
    bundled Swagger UI / ReDoc files (served by the service itself), the page's own inline
    scripts (their SHA-256) and ReDoc's web worker (``blob:``) run and fetch the schema
    (``connect-src 'self'``), nothing else; inline styles (both libraries set them); no
    framing, no forms, no base URL; ``nosniff``, no referrer. ``cdn``: FastAPI's CDN URLs
    are allowed too (the pages without ``fastapi-offline``)."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(x.encode()).digest()).decode()}'"
                      for x in _SCRIPT.findall(html))
    extra = CDN_SOURCES if cdn else {}
    sources = {"default-src": "'none'", "script-src": f"'self' {hashes}".strip(),
               "style-src": "'self' 'unsafe-inline'", "img-src": "'self' data:",
               "font-src": "'self' data:", "connect-src": "'self'", "worker-src": "blob:",
               "frame-ancestors": "'none'", "form-action": "'none'", "base-uri": "'none'"}
    policy = "; ".join(f"{name} {value} {extra.get(name, '')}".strip()
                       for name, value in sources.items())
    return {"Content-Security-Policy": policy, "X-Frame-Options": "DENY",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def _guarded(page: HTMLResponse, cdn: bool) -> HTMLResponse:
    """``page`` with :func:`page_headers` for its own HTML."""
    page.headers.update(page_headers(bytes(page.body).decode("utf-8"), cdn=cdn))
    return page


def docs_router() -> APIRouter:
    """``/docs``, ``/docs/oauth2-redirect``, ``/redoc`` and the assets they load, none in
    the OpenAPI schema. Logs a warning when the pages must fall back to the CDN."""
    folder = asset_dir()
    if folder is None:
        log.warning("the %s package is not installed: /docs and /redoc load Swagger UI and "
                    "ReDoc from a CDN and are blank offline (pip install 'medverify[serve]')",
                    PACKAGE.replace("_", "-"))
    router = APIRouter(include_in_schema=False)

    def local(request: Request, name: str) -> str | None:
        root = request.scope.get("root_path", "")
        return f"{root}{STATIC_PREFIX}/{name}" if folder is not None else None

    @router.get("/docs")
    async def swagger_page(request: Request) -> HTMLResponse:
        root, app = request.scope.get("root_path", ""), request.app
        urls = {key: url for key, url in (
            ("swagger_js_url", local(request, "swagger-ui-bundle.js")),
            ("swagger_css_url", local(request, "swagger-ui.css")),
            ("swagger_favicon_url", local(request, "favicon.png"))) if url is not None}
        return _guarded(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=app.swagger_ui_oauth2_redirect_url,
            swagger_ui_parameters=app.swagger_ui_parameters, **urls), folder is None)

    @router.get("/docs/oauth2-redirect")
    async def swagger_redirect() -> HTMLResponse:
        return _guarded(get_swagger_ui_oauth2_redirect_html(), folder is None)

    @router.get("/redoc")
    async def redoc_page(request: Request) -> HTMLResponse:
        root, app = request.scope.get("root_path", ""), request.app
        urls = {key: url for key, url in (
            ("redoc_js_url", local(request, "redoc.standalone.js")),
            ("redoc_favicon_url", local(request, "favicon.png"))) if url is not None}
        return _guarded(get_redoc_html(openapi_url=f"{root}{app.openapi_url}",
                                       title=f"{app.title} - ReDoc",
                                       with_google_fonts=folder is None, **urls),
                        folder is None)

    @router.get(STATIC_PREFIX + "/{name}")
    async def asset(name: str) -> FileResponse:
        if folder is None or name not in ASSETS:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"no documentation asset {name!r}")
        return FileResponse(folder / name, media_type=ASSETS[name], headers={
            "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})

    return router
