"""The API's documentation pages without a CDN: ``/docs`` (Swagger UI) and ``/redoc``.

FastAPI's own pages load Swagger UI and ReDoc from jsDelivr, so offline they are blank. Here
the same pages (FastAPI's ``get_swagger_ui_html`` / ``get_redoc_html``) point at copies of
those files that the ``fastapi-offline`` package ships (MIT; Swagger UI is Apache-2.0,
ReDoc MIT), served by the service itself under :data:`STATIC_PREFIX`. Without that package
the pages fall back to FastAPI's CDN URLs, with a warning in the log. Like ``/openapi.json``
the pages and their assets need no key: they hold the schema only.
"""

from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

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
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=app.swagger_ui_oauth2_redirect_url,
            swagger_ui_parameters=app.swagger_ui_parameters, **urls)

    @router.get("/docs/oauth2-redirect")
    async def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc")
    async def redoc_page(request: Request) -> HTMLResponse:
        root, app = request.scope.get("root_path", ""), request.app
        urls = {key: url for key, url in (
            ("redoc_js_url", local(request, "redoc.standalone.js")),
            ("redoc_favicon_url", local(request, "favicon.png"))) if url is not None}
        return get_redoc_html(openapi_url=f"{root}{app.openapi_url}",
                              title=f"{app.title} - ReDoc",
                              with_google_fonts=folder is None, **urls)

    @router.get(STATIC_PREFIX + "/{name}")
    async def asset(name: str) -> FileResponse:
        if folder is None or name not in ASSETS:
            raise ApiError(404, "not_found", f"no documentation asset {name!r}")
        return FileResponse(folder / name, media_type=ASSETS[name], headers={
            "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})

    return router
