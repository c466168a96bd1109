"""URL analysis of cited sources (SourceCheckup, "URL analysis" and Table 2).

Per group of answers (by default the ``system`` input field, i.e. the model) and overall:
top domains, TLD groups, the share of valid URLs from a paywalled domain, the country by
TLD, invalid URLs by reason and, when :func:`check_archived` ran, the share of dead URLs
that the Wayback Machine archived. The unit is the cited URL: every source with a URL
counts once per answer that cites it.

Heuristics (see ``docs/audit-metrics.md``):

- *domain*: the host, lower-cased, without a leading ``www.`` (or ``www2.``...), cut to
  its registrable part: the last two labels, or the last three under a known two-label
  public suffix (``co.uk``, ``ac.uk``, ``gov.au``, ``com.au``...). So
  ``ncbi.nlm.nih.gov`` counts as ``nih.gov`` and ``www.nhs.uk`` as ``nhs.uk``. An IP
  address is its own domain. This approximates the Public Suffix List without shipping it.
- *country*: the paper first asks whois and falls back on the TLD; here the TLD alone
  decides (no network lookups): ``.com .org .gov .edu .info .net`` -> US, a two-letter
  country-code TLD -> that country (``.uk`` -> GB), any other TLD -> ``non-US``.
- *paywalled*: the host is a listed domain or one of its subdomains; the list is
  ``medverify/data/paywalled_domains.txt`` unless the config gives one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from medverify.audit.metrics import group_audits, invalid_reason
from medverify.audit.records import AnswerAudit, FetchChange, FetchOutcome
from medverify.records import FetchFailure, Record, Source

WAYBACK_API = "https://archive.org/wayback/available"
TOP_N = 5
US_GENERIC = frozenset({"com", "org", "gov", "edu", "info", "net"})
CC_TO_ISO = {"uk": "GB"}
TWO_LABEL_SUFFIXES = frozenset(
    f"{second}.{cc}"
    for cc, seconds in {
        "uk": ("co", "ac", "gov", "org", "nhs", "ltd", "plc", "me", "net", "sch", "police"),
        "au": ("com", "net", "org", "edu", "gov", "asn", "id"),
        "nz": ("co", "ac", "govt", "org", "net", "school", "health"),
        "jp": ("co", "ac", "go", "or", "ne", "ed", "lg"),
        "in": ("co", "ac", "gov", "nic", "org", "net", "res", "edu"),
        "br": ("com", "gov", "org", "edu", "net"),
        "cn": ("com", "gov", "org", "edu", "net", "ac"),
        "za": ("co", "ac", "gov", "org", "net"),
        "kr": ("co", "ac", "go", "or", "re"),
        "il": ("co", "ac", "gov", "org", "net"),
        "sg": ("com", "gov", "edu", "org", "net"),
        "hk": ("com", "gov", "edu", "org", "net"),
        "tw": ("com", "gov", "edu", "org", "net"),
        "mx": ("com", "gob", "edu", "org", "net"),
        "ar": ("com", "gob", "edu", "org", "net"),
        "tr": ("com", "gov", "edu", "org", "net"),
        "my": ("com", "gov", "edu", "org", "net"),
        "ng": ("com", "gov", "edu", "org"),
        "pk": ("com", "gov", "edu", "org"),
        "eg": ("com", "gov", "edu", "org", "eun"),
        "ca": ("gc", "on", "qc", "bc", "ab"),
    }.items()
    for second in seconds
)
_WWW = re.compile(r"^www\d*\.")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
DEAD_HTTP_STATUSES = frozenset({404, 410})


class DomainCount(Record):
    domain: str
    count: int
    share: float


class ArchiveStats(Record):
    """Dead cited URLs (404/410 or unknown host) checked against the Wayback Machine;
    ``share`` is archived over dead URLs whose check answered."""

    n_checked: int = 0
    n_archived: int = 0
    n_unknown: int = 0
    share: float | None = None


class UrlGroupStats(Record):
    """URL statistics of one group of answers (shares over cited URLs with a host,
    except ``paywalled_share``, over valid URLs as in the paper)."""

    n_urls: int = 0
    n_valid: int = 0
    n_unparsed: int = 0
    top_domains: list[DomainCount] = Field(default_factory=list)
    top_hosts: list[DomainCount] = Field(default_factory=list)
    tld_groups: dict[str, int] = Field(default_factory=dict)
    n_paywalled_valid: int = 0
    paywalled_share: float | None = None
    countries: dict[str, int] = Field(default_factory=dict)
    us_share: float | None = None
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    archived: ArchiveStats | None = None


class UrlAnalysis(Record):
    group_by: str | None = None
    paywalled_list: str = "builtin"
    n_paywalled_domains: int = 0
    overall: UrlGroupStats = Field(default_factory=UrlGroupStats)
    groups: dict[str, UrlGroupStats] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


# --- hosts and domains ---------------------------------------------------------------


def url_host(url: str | None) -> str | None:
    """The lower-cased host of a URL (a scheme-less ``example.org/x`` is read as a web
    address); None when there is none or the URL cannot be parsed."""
    if not url or not url.strip():
        return None
    text = url.strip()
    if not _SCHEME.match(text) and not text.startswith("//"):
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    host = (host or "").strip().rstrip(".")
    return host or None


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def strip_www(host: str) -> str:
    stripped = _WWW.sub("", host)
    return stripped if "." in stripped else host


def registered_domain(host: str) -> str:
    """The registrable domain of a host, approximated (see the module docstring)."""
    if is_ip(host):
        return host
    labels = strip_www(host).split(".")
    keep = 3 if ".".join(labels[-2:]) in TWO_LABEL_SUFFIXES else 2
    return ".".join(labels[-keep:])


def _tld(host: str) -> str | None:
    if is_ip(host) or "." not in host:
        return None
    return host.rsplit(".", 1)[1]


def tld_group(host: str) -> str:
    """``.com .org .gov .edu .net .info``, ``country code``, ``other generic``,
    ``IP address`` or ``no TLD``."""
    tld = _tld(host)
    if tld is None:
        return "IP address" if is_ip(host) else "no TLD"
    if tld in US_GENERIC:
        return f".{tld}"
    return "country code" if _is_cc(tld) else "other generic"


def _is_cc(tld: str) -> bool:
    return len(tld) == 2 and tld.isascii() and tld.isalpha()


def country(host: str) -> str:
    """The paper's TLD fallback: generic US TLDs -> ``US``, ccTLD -> its ISO code,
    other TLDs -> ``non-US``, IP addresses and bare hosts -> ``unknown``."""
    tld = _tld(host)
    if tld is None:
        return "unknown"
    if tld in US_GENERIC:
        return "US"
    return CC_TO_ISO.get(tld, tld.upper()) if _is_cc(tld) else "non-US"


# --- paywalled domains ---------------------------------------------------------------


def _clean_domain(domain: str) -> str:
    return strip_www(domain.strip().lower().strip("."))


def parse_domain_list(text: str) -> list[str]:
    """Domains of a one-per-line list; ``#`` starts a comment."""
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return [_clean_domain(line) for line in lines if line.strip()]


def default_paywalled_domains() -> list[str]:
    text = resources.files("medverify").joinpath("data/paywalled_domains.txt").read_text("utf-8")
    return parse_domain_list(text)


def matches_domain(host: str, domains: Iterable[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one."""
    return any(host == d or host.endswith("." + d) for d in domains)


# --- statistics ----------------------------------------------------------------------


def _top(counter: Counter[str], total: int) -> list[DomainCount]:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_N]
    return [DomainCount(domain=d, count=c, share=c / total) for d, c in ranked]


def _ordered(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _url_sources(audits: Sequence[AnswerAudit]) -> list[Source]:
    return [s for a in audits for s in a.answer.sources if s.url]


def is_dead(source: Source) -> bool:
    """An invalid URL that looks defunct: 404/410 or a host that does not resolve."""
    if source.valid or not source.url:
        return False
    if source.failure == FetchFailure.DNS:
        return True
    return source.failure == FetchFailure.HTTP_STATUS and source.http_status in DEAD_HTTP_STATUSES


def archive_candidates(audits: Sequence[AnswerAudit]) -> list[str]:
    """Distinct dead cited URLs (see :func:`is_dead`), in first-seen order."""
    return list(dict.fromkeys(s.url for s in _url_sources(audits) if s.url and is_dead(s)))


def archive_stats(urls: Iterable[str], archived: Mapping[str, bool | None]) -> ArchiveStats:
    """How many of ``urls`` (distinct) the Wayback check found archived."""
    answers = [archived.get(url) for url in dict.fromkeys(urls)]
    known = [a for a in answers if a is not None]
    return ArchiveStats(
        n_checked=len(answers),
        n_archived=sum(known),
        n_unknown=len(answers) - len(known),
        share=sum(known) / len(known) if known else None,
    )


def group_stats(
    audits: Sequence[AnswerAudit],
    paywalled: Sequence[str],
    archived: Mapping[str, bool | None] | None = None,
) -> UrlGroupStats:
    """URL statistics of one group of answers."""
    sources = _url_sources(audits)
    hosted = [(s, h) for s in sources if (h := url_host(s.url)) is not None]
    hosts = [h for _, h in hosted]
    valid_hosts = [h for s, h in hosted if s.valid]
    countries = Counter(country(h) for h in hosts)
    n_paywalled = sum(1 for h in valid_hosts if matches_domain(h, paywalled))
    dead = [s.url for s in sources if s.url and is_dead(s)]
    return UrlGroupStats(
        n_urls=len(sources),
        n_valid=sum(1 for s in sources if s.valid),
        n_unparsed=len(sources) - len(hosted),
        top_domains=_top(Counter(registered_domain(h) for h in hosts), len(hosts)),
        top_hosts=_top(Counter(strip_www(h) for h in hosts), len(hosts)),
        tld_groups=_ordered(Counter(tld_group(h) for h in hosts)),
        n_paywalled_valid=n_paywalled,
        paywalled_share=n_paywalled / len(valid_hosts) if valid_hosts else None,
        countries=_ordered(countries),
        us_share=countries["US"] / len(hosts) if hosts else None,
        invalid_reasons=_ordered(Counter(invalid_reason(s) for s in sources if not s.valid)),
        archived=archive_stats(dead, archived) if archived is not None else None,
    )


def _notes(archived: Mapping[str, bool | None] | None) -> list[str]:
    notes = ["country from the TLD alone (no whois lookup): .com .org .gov .edu .info .net = US"]
    if archived is None:
        notes.append("Wayback archive check skipped (offline, or not asked for)")
    return notes


def analyze_urls(
    audits: Sequence[AnswerAudit],
    *,
    group_by: str | None = "system",
    paywalled: Sequence[str] | None = None,
    archived: Mapping[str, bool | None] | None = None,
) -> dict[str, Any]:
    """The URL analysis as a JSON-ready dict (a dumped :class:`UrlAnalysis`).

    ``paywalled`` overrides the built-in list of paywalled domains; ``archived`` is the
    result of :func:`check_archived` on :func:`archive_candidates` (None: not checked,
    and the notes say so). ``group_by=None`` gives the overall statistics only.
    """
    domains = (
        default_paywalled_domains()
        if paywalled is None
        else [_clean_domain(d) for d in paywalled if d.strip()]
    )
    groups = group_audits(audits, group_by) if group_by else {}
    analysis = UrlAnalysis(
        group_by=group_by,
        paywalled_list="builtin" if paywalled is None else "config",
        n_paywalled_domains=len(domains),
        overall=group_stats(audits, domains, archived),
        groups={name: group_stats(members, domains, archived) for name, members in groups.items()},
        notes=_notes(archived),
    )
    return analysis.model_dump(mode="json")


# --- Wayback Machine -----------------------------------------------------------------


def _archived_answer(payload: Any) -> bool | None:
    if not isinstance(payload, dict):
        return None
    snapshots = payload.get("archived_snapshots")
    if not isinstance(snapshots, dict):
        return None
    closest = snapshots.get("closest")
    return isinstance(closest, dict) and bool(closest.get("available"))


async def _ask_wayback(
    url: str, client: httpx.AsyncClient, api_base: str, timeout: float
) -> bool | None:
    try:
        response = await client.get(api_base, params={"url": url}, timeout=timeout)
        response.raise_for_status()
        return _archived_answer(response.json())
    except (httpx.HTTPError, ValueError):
        return None


async def check_archived(
    urls: Sequence[str],
    client: httpx.AsyncClient,
    *,
    timeout: float = 10.0,
    api_base: str = WAYBACK_API,
    concurrency: int = 4,
) -> dict[str, bool | None]:
    """Ask the Wayback Machine availability API whether each URL was archived.

    Online only: the caller decides (``config.audit.wayback`` and not offline). Each
    distinct URL is asked once, at most ``concurrency`` at a time; True = a snapshot
    exists, False = none, None = the API did not answer usably (timeout, HTTP error,
    unexpected JSON): unknown, never "not archived".
    """
    limit = asyncio.Semaphore(concurrency)

    async def ask(url: str) -> bool | None:
        async with limit:
            return await _ask_wayback(url, client, api_base, timeout)

    distinct = list(dict.fromkeys(urls))
    answers = await asyncio.gather(*(ask(url) for url in distinct))
    return dict(zip(distinct, answers, strict=True))


# -- fetch outcomes that changed between attempts ------------------------------------------

FETCHED = "fetched"


def fetch_outcome(source: Source) -> tuple[str, str | None] | None:
    """(outcome, content hash) of a source the fetcher handled: ``fetched`` with the page's
    hash, or the failure kind (``http_status 404``...). None for a given text or a source
    never fetched: those are not fetch outcomes."""
    if source.status == "fetched":
        return FETCHED, source.content_hash
    if source.status != "invalid":
        return None
    outcome = invalid_reason(source)
    if source.failure == FetchFailure.HTTP_STATUS and source.http_status is not None:
        outcome = f"{outcome} {source.http_status}"
    return outcome, None


def fetch_changes(audits: Sequence[AnswerAudit], max_ids: int = 3) -> list[FetchChange]:
    """URLs whose fetch outcome differs between the answers that cite them: in one run
    every answer citing a URL gets the same (cached) outcome, so a difference means the
    source changed between attempts, typically across a resume (fetched OK before, failing
    or with other content now). ``kind`` is ``validity`` when the URL was valid in one
    attempt and invalid in another, else ``content``. Ordered by URL."""
    seen: dict[str, dict[tuple[str, str | None], FetchOutcome]] = {}
    for audit in audits:
        for source in audit.answer.sources:
            outcome = fetch_outcome(source) if source.url else None
            if outcome is None or source.url is None:
                continue
            entry = seen.setdefault(source.url, {}).setdefault(
                outcome, FetchOutcome(outcome=outcome[0], content_hash=outcome[1]))
            entry.n_answers += 1
            if len(entry.answer_ids) < max_ids:
                entry.answer_ids.append(audit.answer.id)
            if source.fetched_at and (entry.first_at is None or source.fetched_at < entry.first_at):
                entry.first_at = source.fetched_at
    changed = [_change(url, list(found.values())) for url, found in sorted(seen.items())
               if len(found) > 1]
    return changed + host_changes(seen)


HOST_FAILURES = frozenset({FetchFailure.BLOCKED.value, FetchFailure.DNS.value,
                           FetchFailure.CONNECT.value, FetchFailure.TLS.value})
"""Failures that concern the whole host, not one page: a host that served pages in one
attempt and fails this way in another moved or went away between attempts."""


def _origin(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else None


def host_changes(
    seen: Mapping[str, Mapping[tuple[str, str | None], FetchOutcome]],
) -> list[FetchChange]:
    """Hosts (scheme://host:port) that served some cited page in one attempt while other
    pages of theirs failed at the host level (blocked, DNS, connection, TLS) in another:
    e.g. a local server that came back on another port, the stored URLs pointing at the
    old one. ``kind`` is ``host``; outcomes are summed over the host's URLs."""
    hosts: dict[str, dict[str, FetchOutcome]] = {}
    for url, found in seen.items():
        origin = _origin(url)
        for outcome in found.values() if origin else ():
            total = hosts.setdefault(origin or "", {}).setdefault(
                outcome.outcome, FetchOutcome(outcome=outcome.outcome))
            total.n_answers += outcome.n_answers
            total.answer_ids = (total.answer_ids + outcome.answer_ids)[:3]
            if outcome.first_at and (total.first_at is None or outcome.first_at < total.first_at):
                total.first_at = outcome.first_at
    return [FetchChange(url=origin, kind="host", outcomes=_ordered_outcomes(list(found.values())))
            for origin, found in sorted(hosts.items())
            if FETCHED in found and HOST_FAILURES & set(found)]


def _ordered_outcomes(outcomes: list[FetchOutcome]) -> list[FetchOutcome]:
    return sorted(outcomes, key=lambda o: (o.first_at is None, o.first_at or 0, o.outcome))


def _change(url: str, outcomes: list[FetchOutcome]) -> FetchChange:
    valid = {o.outcome == FETCHED for o in outcomes}
    kind = "validity" if len(valid) > 1 else "content" if valid == {True} else "failure"
    return FetchChange(url=url, kind=kind, outcomes=_ordered_outcomes(outcomes))


def fetch_change_lines(changes: Sequence[FetchChange], limit: int = 5) -> list[str]:
    """A warning headline and one line per changed URL (at most ``limit``)."""
    if not changes:
        return []
    kinds = Counter(c.kind for c in changes)
    lines = [f"{len(changes):,} cited URL(s) or host(s) got a different fetch outcome in "
             f"different attempts ({kinds['validity']:,} URLs valid in one and invalid in "
             f"another, {kinds['content']:,} URLs with changed content, {kinds['failure']:,} "
             f"failing differently, {kinds['host']:,} "
             "hosts that served pages in one and were unreachable in another): the metrics "
             "mix them; restore the sources or rerun with --fresh for consistent numbers"]
    for change in changes[:limit]:
        parts = [f"{o.outcome}{f' ({o.content_hash[:12]})' if o.content_hash else ''} in "
                 f"{o.n_answers:,} answer(s)" for o in change.outcomes]
        lines.append(f"  {change.url}: " + "; ".join(parts))
    if len(changes) > limit:
        lines.append(f"  ... and {len(changes) - limit:,} more (summary.json fetch_changes)")
    return lines
