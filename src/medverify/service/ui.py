"""The review UI: clinicians label escalated claims in the browser (docs/review.md).

Server-rendered pages under ``/review``, on the same app as the JSON API: a login with the
reviewer's API key (role ``reviewer`` or ``admin``), the queue, one item with everything a
reviewer needs to decide it, and the learning loop's progress (with the verdicts' drift of the
last 7 days, :mod:`medverify.ops.drift`). No external assets: the CSS
and the little JavaScript (keyboard shortcuts) are inline, so the pages work offline.

Security: templates are autoescaped (claims, answers, passages, notes and URLs are
untrusted text; a URL becomes a link only when it is http(s)); the session id lives only in
an ``HttpOnly; SameSite=Strict`` cookie scoped to ``/review`` and is stored hashed
(:class:`~medverify.store.access.SessionStore`); every form carries a per-session CSRF token
(the login form a double-submit one), and a POST without the right one is refused before
anything is written; the login form checks the key under the API's per-address limit on
requests without a valid key (:func:`~medverify.service.auth.verify_within_limit`: 429 with
``Retry-After``), and its refusals are audited like the API's, counted by the minute;
pages carry a nonce-based Content-Security-Policy. Labelling goes
through the same library call as the JSON endpoint, so the UI never writes anything else.

What the item page shows (passages with the deciding quote, the judge's numbers, how sure
the verdict is, the labels a reviewer may see) is :mod:`medverify.service.item_page`.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import jinja2
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError

from medverify.errors import MedverifyError
from medverify.ops.drift import drift_report
from medverify.ops.overturns import WINDOW_DAYS, below_target, recent_window
from medverify.report.view import safe_url
from medverify.review import ReviewLabel, ReviewStatus, loop_report
from medverify.service.auth import verify_within_limit
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError, api_error
from medverify.service.item_page import item_context, item_verdict
from medverify.service.item_view import queue_columns, shorten
from medverify.store.access import Role, Session, SessionStore
from medverify.store.review import ReviewStore

SESSION_COOKIE = "mv_session"
LOGIN_COOKIE = "mv_login"  # the login form's double-submit CSRF token
COOKIE_PATH = "/review"
MAX_FORM_FIELDS = 20


_NEXT = re.compile(r"/review(?:/[A-Za-z0-9._~-]+)*/?")


class Refusal(Exception):
    """A request the UI answers with an error page: status, title, message."""

    def __init__(self, status: int, title: str, message: str, *,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message
        self.headers = headers or {}


class PageRoute(APIRoute):
    """A route whose refusals, domain errors and invalid parameters are HTML pages, not the
    API's JSON error shape (a domain error with the status and message the API gives it)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except (Refusal, MedverifyError) as exc:  # a domain error: by DOMAIN_ERRORS
                refusal = exc if isinstance(exc, Refusal) else domain_refusal(exc)
                page = error_page(request, refusal.status, refusal.title, refusal.message)
                page.headers.update(refusal.headers)
                return page
            except RequestValidationError as exc:
                problems = list(exc.errors())
                first = problems[0] if problems else {"loc": (), "msg": "invalid"}
                where = ".".join(str(x) for x in first.get("loc", ())[1:]) or "request"
                return error_page(request, 422, "Invalid request",
                                  f"{where}: {first.get('msg', 'invalid')}")

        return route


router = APIRouter(prefix="/review", route_class=PageRoute, include_in_schema=False)


# -- rendering ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,  # every template: claims, answers, passages, notes are untrusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["safe_url"] = safe_url
    env.filters["percent"] = lambda x: "–" if x is None else f"{100 * float(x):.0f}%"
    env.filters["number"] = lambda x, digits=2: "–" if x is None else f"{float(x):.{digits}f}"
    env.filters["shorten"] = shorten
    return env


def render(request: Request, template: str, http_status: int = 200,
           **context: Any) -> HTMLResponse:
    """A page, with the headers every page of the UI carries."""
    nonce = secrets.token_urlsafe(16)
    session: Session | None = getattr(request.state, "session", None)
    html = _environment().get_template(template).render(
        nonce=nonce, session=session, csrf=session.csrf_token if session else "", **context)
    response = HTMLResponse(html, status_code=http_status)
    response.headers.update({
        "Content-Security-Policy": (
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
            f"script-src 'nonce-{nonce}'; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'"),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    })
    return response


def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    return render(request, "error.html.j2", status, status_code=status, title=title,
                  message=message)


# -- sessions and forms ------------------------------------------------------------------


def _state(request: Request) -> Any:
    return request.app.state.service


def _sessions(request: Request) -> SessionStore:
    return SessionStore(_state(request).runs)


def _session(request: Request) -> Session | None:
    """The request's live review session (with a reviewer's role), recorded on
    ``request.state`` (``key`` for the audit log)."""
    session = _sessions(request).get(request.cookies.get(SESSION_COOKIE))
    if session is None or not session.key.role.allows(Role.REVIEWER):
        return None
    request.state.session = session
    request.state.key = session.key
    return session


def _page_session(request: Request) -> Session | RedirectResponse:
    """A GET page's session, or the redirect to the login page."""
    session = _session(request)
    if session is not None:
        return session
    path = request.url.path
    target = "/review/login" + (f"?next={quote(path)}" if path != "/review/login" else "")
    return RedirectResponse(target, status_code=303)


async def _form(request: Request) -> dict[str, str]:
    """The posted form's fields (the first value of each)."""
    body = await request.body()
    if not body:
        return {}
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refusal(415, "Unsupported form", "the review pages post forms as "
                      "application/x-www-form-urlencoded")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          errors="strict", max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "Bad form", "the form is not valid UTF-8 form data") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


async def _posted(request: Request) -> tuple[Session, dict[str, str]]:
    """A POST's session and form, after the CSRF check: without a live session or with a
    missing or wrong token, a 403 page and nothing written."""
    session = _session(request)
    if session is None:
        raise Refusal(403, "Not logged in", "your review session has ended or was never "
                      "started: log in again (nothing was saved)")
    fields = await _form(request)
    token = fields.get("csrf", "")
    if not token or not hmac.compare_digest(token.encode(), session.csrf_token.encode()):
        raise Refusal(403, "Form refused", "the form's security token is missing or wrong "
                      "(an old or forged form): reload the page and try again; nothing was "
                      "saved")
    return session, fields


def _cookie(response: Response, request: Request, name: str, value: str,
            max_age: int | None) -> None:
    response.set_cookie(name, value, max_age=max_age, path=COOKIE_PATH, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def _clear(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")


def _next(value: str | None) -> str:
    return value if value and _NEXT.fullmatch(value) else "/review"


# -- the review library ------------------------------------------------------------------


def _review(request: Request) -> ReviewStore:
    """The service's review queue."""
    return _state(request).review  # type: ignore[no-any-return]


PAGE_TITLES: dict[ErrorCode, str] = {
    ErrorCode.NOT_FOUND: "No such item", ErrorCode.ITEM_CLOSED: "Item closed",
    ErrorCode.ALREADY_LABELLED: "Already labelled", ErrorCode.INVALID_INPUT: "Label refused"}
"""The title of a domain error's page, by its code (others: ``Refused``)."""


def domain_refusal(exc: MedverifyError) -> Refusal:
    """The page for a domain error: the status, message and headers the JSON API answers
    it with (:func:`~medverify.service.errors.api_error`), titled for a reviewer."""
    error = api_error(exc)
    return Refusal(error.status, PAGE_TITLES.get(error.code, "Refused"), error.message,
                   headers=error.headers)


# -- routes ------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    if _session(request) is not None:
        return RedirectResponse(_next(next), status_code=303)
    token = secrets.token_urlsafe(32)
    response = render(request, "login.html.j2", login_token=token, next=_next(next))
    _cookie(response, request, LOGIN_COOKIE, token, 3600)
    return response


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    fields = await _form(request)
    token, expected = fields.get("csrf", ""), request.cookies.get(LOGIN_COOKIE, "")
    if not token or not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Refusal(403, "Form refused", "the login form's security token is missing or "
                      "wrong: reload the login page and try again")
    try:  # the API's per-address limit on requests without a valid key
        key = verify_within_limit(request, fields.get("key", "").strip() or None)
    except ApiError as exc:  # 429, with Retry-After: the page says the same seconds
        retry = (exc.headers or {}).get("Retry-After", "1")
        raise Refusal(exc.status, "Too many failed logins", "too many attempts without a "
                      f"valid key from your address: try again in {retry} s (until then "
                      "every login from it is refused, a correct key's too)",
                      headers={"Retry-After": retry}) from None
    if key is None:
        raise Refusal(401, "Login failed", "the API key is unknown, wrong or revoked")
    request.state.key = key
    if not key.role.allows(Role.REVIEWER):
        raise Refusal(403, "Not a reviewer key", f"key {key.id} has the {key.role.value} "
                      "role; the review pages need a reviewer or admin key (an admin "
                      "creates one: medverify keys create NAME --role reviewer)")
    session_id, _ = _sessions(request).create(key.id)
    response = RedirectResponse(_next(fields.get("next")), status_code=303)
    _cookie(response, request, SESSION_COOKIE, session_id,
            int(_sessions(request).ttl.total_seconds()))
    _clear(response, request, LOGIN_COOKIE)
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    await _posted(request)
    _sessions(request).delete(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/review/login", status_code=303)
    _clear(response, request, SESSION_COOKIE)
    return response


def _status_filter(value: str | None) -> ReviewStatus | None:
    if value in (None, ""):
        return ReviewStatus.OPEN
    if value == "all":
        return None
    try:
        return ReviewStatus(value)
    except ValueError:
        raise Refusal(422, "Invalid filter", f"status must be one of "
                      f"{', '.join(s.value for s in ReviewStatus)} or all") from None


def _number(value: str | None, name: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except ValueError:
        raise Refusal(422, "Invalid filter", f"{name} must be a number") from None


@router.get("", response_class=HTMLResponse)
async def queue(request: Request, status: str | None = None, min_priority: str | None = None,
                topic: str | None = None, page: int = 1, done: str | None = None) -> Response:
    session = _page_session(request)
    if isinstance(session, Response):
        return session
    wanted = _status_filter(status)
    floor = _number(min_priority, "min_priority")
    page = max(1, page)
    per_page = 50
    review = _review(request)
    items = review.list(status=wanted, min_priority=floor, topic=topic or None,
                        limit=per_page + 1, offset=(page - 1) * per_page)
    more = len(items) > per_page
    items = sorted(items[:per_page], key=lambda i: -i.priority)
    return render(request, "queue.html.j2", items=items, more=more, page=page,
                  verdicts={i.id: item_verdict(i) for i in items}, columns=queue_columns(items),
                  status=status or "open", min_priority=min_priority or "",
                  topic=topic or "", statuses=[s.value for s in ReviewStatus],
                  counts=_counts(review), done=done)


def _counts(review: Any) -> dict[str, Any]:
    counts = review.counts()
    if hasattr(counts, "model_dump"):
        counts = counts.model_dump(mode="json")
    return dict(counts) if isinstance(counts, dict) else {}


@router.get("/items/{item_id}", response_class=HTMLResponse)
async def item_page(request: Request, item_id: str, done: str | None = None) -> Response:
    session = _page_session(request)
    if isinstance(session, Response):
        return session
    item = _review(request).get(item_id)  # 404 ItemNotFound: an error page
    return render(request, "item.html.j2", done=done, **item_context(item, session.key))


def _source_url(value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    if len(value) > 2000 or any(c.isspace() or ord(c) < 32 for c in value):
        raise Refusal(422, "Invalid source URL", "the source URL must be one http(s) URL "
                      "without spaces, at most 2000 characters")
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise Refusal(422, "Invalid source URL", "the source URL must be an absolute "
                      "http:// or https:// URL")
    return value


def _text(fields: dict[str, str], name: str, limit: int = 4000) -> str | None:
    value = fields.get(name, "").replace("\r\n", "\n").strip()
    if len(value) > limit:
        raise Refusal(422, "Too long", f"the {name.replace('_', ' ')} is over {limit} "
                      "characters")
    return value or None


@router.post("/items/{item_id}/label", response_class=HTMLResponse)
async def label(request: Request, item_id: str) -> Response:
    session, fields = await _posted(request)
    request.state.target = item_id
    try:
        chosen = ReviewLabel(fields.get("label", ""))
    except ValueError:
        raise Refusal(422, "No label", "choose one of " + ", ".join(
            x.value for x in ReviewLabel)) from None
    source_url = _source_url(fields.get("source_url", ""))
    correction = _text(fields, "correction")
    note = _text(fields, "note")
    passage_id = _text(fields, "source_passage_id", 200)
    try:  # the review library's refusals are domain errors: pages by DOMAIN_ERRORS
        await _label_and_teach(request, item_id, session.key.id, chosen, correction=correction,
                               source_url=source_url, source_passage_id=passage_id, note=note)
    except (ValidationError, ValueError) as exc:
        raise Refusal(422, "Label refused", str(exc)) from None
    return RedirectResponse(_after(request, item_id), status_code=303)


async def _label_and_teach(request: Request, item_id: str, reviewer: str, chosen: ReviewLabel,
                           **given: str | None) -> Any:
    """Record the label and, when it settles a correction, teach the knowledge base: the
    very call the JSON endpoint makes (:meth:`ServiceState.label_and_teach`)."""
    return _state(request).label_and_teach(item_id, reviewer, chosen, **given)


def _after(request: Request, item_id: str) -> str:
    """Where to go after a label: the next open item, else the queue."""
    for item in _review(request).list(status=ReviewStatus.OPEN, limit=5):
        if item.id != item_id:
            return f"/review/items/{quote(item.id)}?done={quote(item_id)}"
    return f"/review?done={quote(item_id)}"


@router.get("/progress", response_class=HTMLResponse)
async def progress(request: Request) -> Response:
    session = _page_session(request)
    if isinstance(session, Response):
        return session
    review, state = _review(request), _state(request)
    drift = drift_report(state.runs, state.config.ops, datetime.now(UTC) - timedelta(days=6))
    sure = [(c, below_target(c, state.config.ops))
            for c in recent_window(state.runs, WINDOW_DAYS)]  # per judge, 28 days
    return render(request, "progress.html.j2", report=loop_report(review, by="week"),
                  agreement=review.agreement(), drift=drift, sure=sure,
                  ops=state.config.ops)
