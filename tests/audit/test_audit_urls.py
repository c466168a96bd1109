from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from medverify.audit.urls import (
    analyze_urls,
    archive_candidates,
    check_archived,
    country,
    default_paywalled_domains,
    matches_domain,
    parse_domain_list,
    registered_domain,
    tld_group,
    url_host,
)
from medverify.records import FetchFailure, Source
from test_audit_metrics import audit, invalid_source, valid_source

# --- hosts, domains, TLDs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://WWW.MayoClinic.org/diseases", "www.mayoclinic.org"),
        ("http://example.com.:8080/x", "example.com"),
        ("www.cdc.gov/flu", "www.cdc.gov"),
        ("//nih.gov/x", "nih.gov"),
        ("http://[::1]:80/", "::1"),
        ("http://[::1", None),
        ("mailto:someone@example.org", None),
        ("", None),
        ("   ", None),
        ("https://", None),
        (None, None),
    ],
)
def test_url_host(url: str | None, host: str | None) -> None:
    assert url_host(url) == host


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("www.mayoclinic.org", "mayoclinic.org"),
        ("www2.example.com", "example.com"),
        ("ncbi.nlm.nih.gov", "nih.gov"),
        ("pubmed.ncbi.nlm.nih.gov", "nih.gov"),
        ("www.nhs.uk", "nhs.uk"),
        ("www.bbc.co.uk", "bbc.co.uk"),
        ("news.bbc.co.uk", "bbc.co.uk"),
        ("www.ox.ac.uk", "ox.ac.uk"),
        ("www.health.gov.au", "health.gov.au"),
        ("abc.net.au", "abc.net.au"),
        ("www.smh.com.au", "smh.com.au"),
        ("canada.ca", "canada.ca"),
        ("www.www.com", "www.com"),
        ("192.168.1.10", "192.168.1.10"),
        ("::1", "::1"),
        ("localhost", "localhost"),
    ],
)
def test_registered_domain(host: str, domain: str) -> None:
    assert registered_domain(host) == domain


@pytest.mark.parametrize(
    ("host", "group", "code"),
    [
        ("cdc.gov", ".gov", "US"),
        ("mayoclinic.org", ".org", "US"),
        ("webmd.com", ".com", "US"),
        ("harvard.edu", ".edu", "US"),
        ("medlineplus.info", ".info", "US"),
        ("example.net", ".net", "US"),
        ("www.nhs.uk", "country code", "GB"),
        ("www.health.gov.au", "country code", "AU"),
        ("www.rki.de", "country code", "DE"),
        ("who.int", "other generic", "non-US"),
        ("example.health", "other generic", "non-US"),
        ("10.0.0.1", "IP address", "unknown"),
        ("localhost", "no TLD", "unknown"),
    ],
)
def test_tld_group_and_country(host: str, group: str, code: str) -> None:
    assert tld_group(host) == group
    assert country(host) == code


def test_paywalled_list_and_matching() -> None:
    builtin = default_paywalled_domains()
    assert {"nejm.org", "jamanetwork.com", "uptodate.com", "nytimes.com"} <= set(builtin)
    assert all(d == d.lower() and " " not in d and not d.startswith("#") for d in builtin)
    assert matches_domain("www.nejm.org", builtin)
    assert matches_domain("nejm.org", builtin)
    assert not matches_domain("notnejm.org", builtin)
    assert not matches_domain("mayoclinic.org", builtin)
    assert parse_domain_list("# header\n\nWWW.Example.com  # inline\n.foo.org\n") == [
        "example.com",
        "foo.org",
    ]


# --- analyze_urls --------------------------------------------------------------------


def _audits() -> list:
    gpt = audit(
        "a1",
        [
            valid_source("s1", "https://www.mayoclinic.org/a"),
            valid_source("s2", "https://mayoclinic.org/b"),
            valid_source("s3", "https://pubmed.ncbi.nlm.nih.gov/1/"),
            valid_source("s4", "https://www.nejm.org/doi/x"),
            invalid_source("s5", "https://www.nhs.uk/gone"),
            invalid_source("s6", "http://[::1", FetchFailure.BAD_URL, None),
        ],
        [],
        system="gpt",
    )
    claude = audit(
        "a2",
        [
            valid_source("s1", "https://www.bbc.co.uk/news/health"),
            invalid_source("s2", "https://made-up.example.de/x", FetchFailure.DNS, None),
            invalid_source("s3", "http://10.0.0.1/admin", FetchFailure.BLOCKED, None),
            Source(id="s4", text="given text, no url", status="given"),
        ],
        [],
        system="claude",
    )
    return [gpt, claude]


def test_analyze_urls_overall_and_groups() -> None:
    result = analyze_urls(_audits())
    json.dumps(result)  # JSON-ready
    assert result["group_by"] == "system" and set(result["groups"]) == {"claude", "gpt"}
    overall = result["overall"]
    assert (overall["n_urls"], overall["n_valid"], overall["n_unparsed"]) == (9, 5, 1)
    assert overall["top_domains"][0] == {"domain": "mayoclinic.org", "count": 2, "share": 0.25}
    assert [d["domain"] for d in overall["top_domains"]] == [
        "mayoclinic.org",
        "10.0.0.1",
        "bbc.co.uk",
        "example.de",
        "nejm.org",
    ]
    assert overall["tld_groups"] == {
        ".org": 3,
        "country code": 3,
        ".gov": 1,
        "IP address": 1,
    }
    assert overall["countries"] == {"US": 4, "GB": 2, "DE": 1, "unknown": 1}
    assert overall["us_share"] == 0.5
    assert (overall["n_paywalled_valid"], overall["paywalled_share"]) == (1, 0.2)
    assert overall["invalid_reasons"] == {"bad_url": 1, "blocked": 1, "dns": 1, "http_status": 1}
    assert overall["archived"] is None
    assert any("whois" in note for note in result["notes"])
    assert any("Wayback" in note and "skipped" in note for note in result["notes"])
    gpt = result["groups"]["gpt"]
    assert gpt["paywalled_share"] == 0.25 and gpt["n_urls"] == 6
    assert result["groups"]["claude"]["top_hosts"][0]["domain"] == "10.0.0.1"


def test_analyze_urls_custom_paywall_and_no_grouping() -> None:
    result = analyze_urls(_audits(), group_by=None, paywalled=["www.MayoClinic.org", " "])
    assert result["groups"] == {} and result["paywalled_list"] == "config"
    assert result["n_paywalled_domains"] == 1
    assert result["overall"]["n_paywalled_valid"] == 2


def test_analyze_urls_empty_and_malformed() -> None:
    empty = analyze_urls([])
    assert empty["overall"]["n_urls"] == 0 and empty["overall"]["us_share"] is None
    odd = audit(
        "x",
        [
            invalid_source(f"s{i}", url, FetchFailure.BAD_URL, None)
            for i, url in enumerate(
                ["http://", "ht!tp://x", "javascript:alert(1)", "http://[zz]/", "\x00\x01", "::::"]
            )
        ],
        [],
    )
    stats = analyze_urls([odd])["overall"]
    assert stats["n_urls"] == 6 and stats["invalid_reasons"] == {"bad_url": 6}


def test_archive_candidates_and_stats() -> None:
    audits = _audits()
    dead = archive_candidates([*audits, audits[0]])
    assert dead == ["https://www.nhs.uk/gone", "https://made-up.example.de/x"]
    archived = {"https://www.nhs.uk/gone": True, "https://made-up.example.de/x": None}
    result = analyze_urls(audits, archived=archived)
    assert result["overall"]["archived"] == {
        "n_checked": 2,
        "n_archived": 1,
        "n_unknown": 1,
        "share": 1.0,
    }
    assert result["groups"]["claude"]["archived"]["share"] is None
    assert not any("Wayback" in note for note in result["notes"])


# --- check_archived against a local server ---------------------------------------------


class _Wayback(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        url = query.get("url", [""])[0]
        type(self).seen.append(url)
        if "broken" in url:
            self.send_response(503)
            self.end_headers()
            return
        if "garbled" in url:
            body = b"not json"
        elif "kept" in url:
            closest = {"available": True, "status": "200", "url": "http://web.archive.org/x"}
            body = json.dumps({"url": url, "archived_snapshots": {"closest": closest}}).encode()
        else:
            body = json.dumps({"url": url, "archived_snapshots": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def wayback() -> Iterator[str]:
    _Wayback.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Wayback)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/wayback/available"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_check_archived_local_server(wayback: str) -> None:
    urls = [
        "https://a.org/kept?x=1&y=2",
        "https://b.org/never",
        "https://c.org/broken",
        "https://d.org/garbled",
        "https://a.org/kept?x=1&y=2",
    ]

    async def run() -> dict[str, bool | None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await check_archived(urls, client, api_base=wayback, timeout=5)

    result = asyncio.run(run())
    assert result == {
        "https://a.org/kept?x=1&y=2": True,
        "https://b.org/never": False,
        "https://c.org/broken": None,
        "https://d.org/garbled": None,
    }
    assert sorted(_Wayback.seen) == sorted(set(urls))  # each distinct URL asked once, intact


def test_check_archived_unreachable_api_is_unknown() -> None:
    async def run() -> dict[str, bool | None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            # port 9 on loopback: nothing listens, the connection is refused
            return await check_archived(["https://x.org/"], client, api_base="http://127.0.0.1:9/")

    assert asyncio.run(run()) == {"https://x.org/": None}
