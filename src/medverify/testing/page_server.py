"""A real local web server with fixed pages: the cited pages of offline examples and tests.

>>> with PageServer({"/a": Page("<html><body><p>Hi</p></body></html>")}) as server:
...     server.url("/a")                   # http://127.0.0.1:PORT/a ; unknown paths get 404
...     config.fetch.allow = [server.host_port]   # the safe fetcher blocks loopback otherwise
>>> with PageServer.from_documents(docs) as server:    # one HTML page per document
...     server.url_for(docs[0].doc_id)     # http://127.0.0.1:PORT/pages/<slug>

It listens on 127.0.0.1 on an ephemeral port (or ``port``, e.g. the one a resumed study
recorded, so that the URLs stored in its replies still resolve) and serves every connection
in its own thread. ``hits`` counts the requests per path (404s included).
"""

from __future__ import annotations

import html
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from medverify.records import Document
from medverify.testing.local_server import LocalServer, QuietHandler

PAGES_PREFIX = "/pages/"


@dataclass(frozen=True)
class Page:
    """One response: body (text is sent as UTF-8), content type and HTTP status."""

    body: str | bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200

    @property
    def data(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else self.body


NOT_FOUND = Page("<html><body><h1>404 Not Found</h1></body></html>", status=404)


def slug(text: str) -> str:
    """A URL path segment for an id: lower-case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.casefold()).strip("-") or "page"


def document_html(doc: Document) -> str:
    """A small patient-facing HTML page: the document's title and its paragraphs."""
    title = html.escape(doc.title or doc.doc_id)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", doc.text) if p.strip()]
    body = "\n".join(f"<p>{html.escape(' '.join(p.split()))}</p>" for p in paragraphs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n<body><main><article>\n<h1>{title}</h1>\n"
        f"{body}\n</article></main></body></html>\n"
    )


class PageServer(LocalServer):
    """Serves ``pages`` (path -> :class:`Page`, or a str taken as HTML) on 127.0.0.1."""

    thread_name = "page-server"

    def __init__(self, pages: Mapping[str, Page | str] | None = None, *, port: int = 0) -> None:
        self.port = port
        self.pages: dict[str, Page] = {}
        self.doc_paths: dict[str, str] = {}
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        for path, page in (pages or {}).items():
            self.add(path, page)

    @classmethod
    def from_documents(cls, docs: Sequence[Document], *, port: int = 0) -> PageServer:
        """A server with one HTML page per document at ``/pages/<slug of doc_id>``."""
        server = cls(port=port)
        for doc in docs:
            server.add_document(doc)
        return server

    def add(self, path: str, page: Page | str) -> None:
        self.pages[_path(path)] = page if isinstance(page, Page) else Page(page)

    def add_document(self, doc: Document) -> str:
        """Serve ``doc`` as an HTML page; returns its path (unique per document)."""
        base = PAGES_PREFIX + slug(doc.doc_id)
        path, n = base, 1
        while path in self.pages and self.doc_paths.get(doc.doc_id) != path:
            n += 1
            path = f"{base}-{n}"
        self.doc_paths[doc.doc_id] = path
        self.add(path, document_html(doc))
        return path

    # --- addresses -------------------------------------------------------------------

    @property
    def host_port(self) -> str:
        """``127.0.0.1:PORT``: the entry for ``config.fetch.allow``."""
        host, port = self.address
        return f"{host}:{port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"

    def url(self, path: str) -> str:
        return self.base_url + _path(path)

    def url_for(self, doc_id: str) -> str:
        """The URL of a document's page (KeyError for a document not served)."""
        try:
            return self.url(self.doc_paths[doc_id])
        except KeyError:
            raise KeyError(f"document {doc_id!r} is not served by this PageServer") from None

    # --- life cycle ------------------------------------------------------------------


    def _lookup(self, target: str) -> Page:
        path = urlsplit(target).path or "/"
        with self._lock:
            self.hits[path] += 1
        return self.pages.get(path, NOT_FOUND)


def _path(path: str) -> str:
    return path if path.startswith("/") else "/" + path


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        self._send(self.server.owner._lookup(self.path), body=True)

    def do_HEAD(self) -> None:
        self._send(self.server.owner._lookup(self.path), body=False)

    def _send(self, page: Page, *, body: bool) -> None:
        data = page.data
        self.send_response(page.status)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


# the handler class is defined after the server that serves it
PageServer.handler = _Handler
