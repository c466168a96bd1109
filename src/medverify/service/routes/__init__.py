"""The service's JSON routes, one ``APIRouter`` per group: health, check, jobs, runs, admin,
review and metrics (the review's browser pages are :mod:`medverify.service.ui`).

Each module exposes ``router``; :func:`medverify.service.app.create_app` declares their
routes on the app in the order of :data:`ROUTERS`, the order of the OpenAPI schema's paths.
"""

from __future__ import annotations

from fastapi import APIRouter

from medverify.service.routes import admin, check, health, jobs, metrics, review, runs

ROUTERS: tuple[APIRouter, ...] = (health.router, check.router, jobs.router, runs.router,
                                  admin.router, review.router, metrics.router)
"""Every JSON route group, in the order the app includes them."""
