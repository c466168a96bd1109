"""The decision functions of the safe fetcher: which URLs and addresses may be fetched.

Cited URLs are untrusted input (an LLM wrote them). Before any connection:

* :func:`check_url` parses the URL the way a browser would (WHATWG host rules:
  decimal, octal, hex and short IPv4 forms, IPv6 literals, trailing dots, IDNA) and
  refuses other schemes, credentials in the URL and malformed hosts;
* :func:`blocked_reason` classifies one IP address (loopback, private, link-local,
  cloud metadata, ...), looking inside IPv4-mapped, IPv4-compatible, 6to4 and NAT64
  IPv6 addresses;
* :func:`resolve_and_check` resolves a host name once and checks EVERY returned address;
  the fetcher then connects to the checked address (DNS pinning).

Nothing here touches the network except the injected :data:`Resolver`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import idna

from medverify.errors import ConfigError
from medverify.records import FetchFailure

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> [ip, ...]``: every address the host name resolves to."""

SCHEMES = {"http": 80, "https": 443}
METADATA = "cloud metadata"


class FetchProblem(Exception):
    """One fetch failed for a recorded reason (never escapes the fetcher)."""

    def __init__(
        self, failure: FetchFailure, reason: str, *, http_status: int | None = None,
        transient: bool = False,
    ) -> None:
        super().__init__(reason)
        self.failure = failure
        self.reason = reason
        self.http_status = http_status
        self.transient = transient


# --- addresses -----------------------------------------------------------------------

def _nets(*pairs: tuple[str, str]) -> list[tuple[ipaddress._BaseNetwork, str]]:
    return [(ipaddress.ip_network(net), reason) for net, reason in pairs]


_METADATA_IPS = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
    "169.254.170.2",  # AWS ECS task metadata
    "169.254.169.123",  # AWS time sync
    "169.254.169.253",  # AWS VPC DNS
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud (legacy)
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "fd00:ec2::123",  # AWS time sync over IPv6
    "fd00:ec2::253",  # AWS VPC DNS over IPv6
))

_V4_BLOCKS = _nets(
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)

_V6_BLOCKS = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "private"),
    ("100::/64", "reserved"),
    ("2001:2::/48", "benchmarking"),
    ("2001::/23", "reserved"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "private"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "private"),
    ("ff00::/8", "multicast"),
)

_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


def parse_ip(text: str) -> IPAddress:
    """An address from a resolver or a URL (an IPv6 zone such as ``%eth0`` is dropped)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def blocked_reason(ip: str | IPAddress) -> str | None:
    """Why this address must not be fetched, or None for a public unicast address.

    Reasons: "cloud metadata", "loopback", "private", "link-local", "multicast",
    "reserved", "unspecified", "broadcast", "shared address space", "benchmarking",
    "documentation". IPv6 addresses that embed an IPv4 address (IPv4-mapped,
    IPv4-compatible, 6to4, NAT64) are judged by the embedded address, e.g.
    "loopback (IPv4-mapped ::ffff:127.0.0.1)". Raises ValueError for a non-address.
    """
    addr = parse_ip(ip) if isinstance(ip, str) else ip
    if addr in _METADATA_IPS:
        return METADATA
    if addr.version == 4:
        return _table_reason(addr, _V4_BLOCKS)
    return _v6_reason(addr)  # type: ignore[arg-type]


def _table_reason(addr: IPAddress, table: list[tuple[ipaddress._BaseNetwork, str]]) -> str | None:
    return next((reason for net, reason in table if addr in net), None)


def _v6_reason(addr: ipaddress.IPv6Address) -> str | None:
    embedded = _embedded_v4(addr)
    if embedded is not None:
        kind, v4 = embedded
        inner = blocked_reason(v4)
        if inner:
            return f"{inner} ({kind} {v4})"
        if kind != "IPv4-compatible":
            return None
    reason = _table_reason(addr, _V6_BLOCKS)
    if reason:
        return reason
    return None if addr in _GLOBAL_UNICAST_V6 else "reserved"


def _embedded_v4(addr: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if addr.ipv4_mapped is not None:
        return "IPv4-mapped", addr.ipv4_mapped
    if addr.sixtofour is not None:
        return "6to4", addr.sixtofour
    if addr in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr in _V4_COMPATIBLE and int(addr) > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(int(addr))
    return None


# --- allow list ----------------------------------------------------------------------

@dataclass(frozen=True)
class _AllowEntry:
    host: str  # lower-case ASCII host name or canonical IP
    port: int | None
    is_ip: bool


class AllowList:
    """Addresses opened on purpose: ``HOST[:PORT]`` entries (``--allow``, ``fetch.allow``).

    HOST is a host name or an IP address (IPv6 in brackets, ``[::1]:8080``). An IP entry
    allows that address whatever name led to it; a host-name entry allows whatever that
    name resolves to, except cloud metadata addresses, which only an IP entry opens.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.entries = tuple(_parse_allow(e) for e in entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __repr__(self) -> str:
        return f"AllowList({[_entry_text(e) for e in self.entries]!r})"

    def allows(self, host: str, ip: IPAddress | None, port: int, *, by_name: bool = True) -> bool:
        """Whether an entry opens address ``ip`` reached as ``host:port``."""
        ip_text = str(ip) if ip is not None else None
        for entry in self.entries:
            if entry.port is not None and entry.port != port:
                continue
            if entry.is_ip and entry.host == ip_text:
                return True
            if not entry.is_ip and by_name and entry.host == host:
                return True
        return False


def _entry_text(entry: _AllowEntry) -> str:
    host = f"[{entry.host}]" if ":" in entry.host else entry.host
    return host if entry.port is None else f"{host}:{entry.port}"


def _parse_allow(raw: str) -> _AllowEntry:
    text = raw.strip()
    try:
        return _allow_entry(text)
    except ValueError as exc:
        raise ConfigError(
            f"invalid allow entry {raw!r} ({exc}): use HOST, HOST:PORT, IP or [IPv6]:PORT"
        ) from None


def _allow_entry(text: str) -> _AllowEntry:
    if not text:
        raise ValueError("empty")
    with_port = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", text)
    if with_port is None:  # a bare IPv6 address without brackets
        return _AllowEntry(str(parse_ip(text)), None, True)
    host = with_port.group(1) or with_port.group(3)
    port_text = with_port.group(2) or with_port.group(4)
    port = int(port_text) if port_text else None
    if port is not None and not 0 < port < 65536:
        raise ValueError("port out of range")
    ip = ipaddress.IPv6Address(host) if with_port.group(1) else literal_ip(host)
    if ip is not None:
        return _AllowEntry(str(ip), port, True)
    return _AllowEntry(_ascii_host(host), port, False)


# --- URLs ----------------------------------------------------------------------------

@dataclass(frozen=True)
class UrlCheck:
    """The outcome of :func:`check_url`.

    ``ok`` is True when the URL may go on to DNS resolution; otherwise ``failure``
    (NO_URL, BAD_URL, SCHEME or BLOCKED) and ``reason`` say why. On success ``host`` is
    the lower-case ASCII (IDNA) host name or the canonical IP, ``ip`` is set when the
    host is an IP literal in any form, ``target`` is the percent-encoded path and query,
    and ``url`` is the normalised URL (no fragment) used as the cache key.
    """

    raw: str
    failure: FetchFailure | None = None
    reason: str | None = None
    scheme: str = ""
    host: str = ""
    port: int = 0
    ip: IPAddress | None = None
    target: str = "/"

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = SCHEMES.get(self.scheme) == self.port
        return host if default else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        if not self.ok:
            return self.raw
        path, _, query = self.target.partition("?")
        return urlunsplit((self.scheme, self.netloc, path, query, ""))


def _refuse(raw: str, failure: FetchFailure, reason: str) -> UrlCheck:
    return UrlCheck(raw=raw, failure=failure, reason=reason)


def check_url(url: str | None, allow: AllowList | None = None) -> UrlCheck:
    """Parse and vet one URL without touching the network.

    Refuses: no URL (NO_URL); schemes other than http/https (SCHEME); control
    characters, credentials, bad ports and malformed hosts (BAD_URL); hosts that are IP
    literals in a blocked range, unless allowed (BLOCKED). Host names still need
    :func:`resolve_and_check`. Never raises.
    """
    raw = (url or "").strip()
    if not raw:
        return _refuse(raw, FetchFailure.NO_URL, "no URL")
    try:
        return _check(raw, allow or AllowList())
    except ValueError as exc:
        return _refuse(raw, FetchFailure.BAD_URL, f"malformed URL: {exc}")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check(raw: str, allow: AllowList) -> UrlCheck:
    if _CONTROL.search(raw):
        raise ValueError("control characters in the URL")
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if not scheme:
        raise ValueError("no scheme (expected http:// or https://)")
    if scheme not in SCHEMES:
        return _refuse(raw, FetchFailure.SCHEME, f"scheme {scheme!r} is not fetched "
                       "(only http and https)")
    if "@" in parts.netloc:
        raise ValueError("credentials in the URL are not allowed")
    if "\\" in parts.netloc:
        raise ValueError("backslash in the host")
    host, ip = _host_of(parts.netloc, parts.hostname)
    port = parts.port or SCHEMES[scheme]  # .port raises ValueError for a bad port
    if parts.port == 0:
        raise ValueError("port 0")
    check = UrlCheck(raw=raw, scheme=scheme, host=host, port=port, ip=ip,
                     target=_target(parts.path, parts.query))
    reason = address_refusal(host, ip, port, allow) if ip is not None else None
    if reason:
        return _refuse(raw, FetchFailure.BLOCKED, f"address {ip} is blocked ({reason})")
    return check


def _host_of(netloc: str, hostname: str | None) -> tuple[str, IPAddress | None]:
    if not hostname:
        raise ValueError("no host")
    if netloc.startswith("["):
        ip = ipaddress.IPv6Address(unquote(hostname).split("%", 1)[0])
        return str(ip), ip
    if "%" in hostname:
        raise ValueError("percent-encoded host")
    ip = literal_ip(hostname)
    if ip is not None:
        return str(ip), ip
    return _ascii_host(hostname), None


_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def _ascii_host(host: str) -> str:
    """Lower-case ASCII host name (IDNA/UTS 46 for non-ASCII), one trailing dot removed."""
    name = host.lower().removesuffix(".")
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise ValueError(f"invalid international host name ({exc})") from None
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"invalid host name {host!r}")
    return name


def literal_ip(host: str) -> IPAddress | None:
    """The address a host string denotes as a literal, in any browser-accepted form.

    Handles IPv6 (with or without brackets), dotted IPv4, and the WHATWG IPv4 forms:
    decimal (``2130706433``), octal (``0177.0.0.1``), hex (``0x7f.1``), short
    (``127.1``), trailing dot, and full-width digits (after IDNA mapping). Returns None
    for a host name; raises ValueError for a host that ends in a number but is not a
    valid IPv4 address (browsers refuse those too).
    """
    text = host.strip("[]")
    if ":" in text:
        return ipaddress.IPv6Address(text.split("%", 1)[0])
    name = text.lower()
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            return None
    return _whatwg_ipv4(name)


def _whatwg_ipv4(name: str) -> ipaddress.IPv4Address | None:
    parts = name.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not _numeric_part(parts[-1]):
        return None
    if len(parts) > 4:
        raise ValueError(f"invalid IPv4 address {name!r}")
    numbers = [_ipv4_number(p, name) for p in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise ValueError(f"IPv4 address out of range {name!r}")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _numeric_part(part: str) -> bool:
    if part.isdigit() and part.isascii():
        return True
    return part.startswith("0x") and all(c in "0123456789abcdef" for c in part[2:])


def _ipv4_number(part: str, name: str) -> int:
    if not part:
        raise ValueError(f"empty part in IPv4 address {name!r}")
    base, digits = (16, part[2:]) if part.startswith("0x") else (
        (8, part[1:]) if len(part) > 1 and part.startswith("0") else (10, part))
    try:
        return int(digits, base) if digits else 0
    except ValueError:
        raise ValueError(f"invalid IPv4 address {name!r}") from None


_PATH_SAFE = "/%:@!$&'()*+,;=~-._"
_QUERY_SAFE = _PATH_SAFE + "?"


def _target(path: str, query: str) -> str:
    target = quote(path or "/", safe=_PATH_SAFE)
    return f"{target}?{quote(query, safe=_QUERY_SAFE)}" if query else target


# --- DNS -----------------------------------------------------------------------------

def address_refusal(host: str, ip: IPAddress, port: int, allow: AllowList) -> str | None:
    """The reason ``ip`` (reached as ``host:port``) is refused, None when it may be used."""
    reason = blocked_reason(ip)
    if reason and not allow.allows(host, ip, port, by_name=reason != METADATA):
        return reason
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    """The default :data:`Resolver`: the event loop's ``getaddrinfo``."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve_and_check(
    check: UrlCheck, resolver: Resolver, allow: AllowList, timeout_s: float,
) -> IPAddress:
    """The address to connect to: resolved once, every returned address checked.

    Raises :class:`FetchProblem` (DNS or BLOCKED). An IP-literal host is returned as is
    (:func:`check_url` has vetted it).
    """
    if check.ip is not None:
        return check.ip
    addresses = [_parse_resolved(check.host, a) for a in await _lookup(check, resolver, timeout_s)]
    if not addresses:
        raise FetchProblem(FetchFailure.DNS, f"DNS: {check.host} has no addresses")
    for addr in addresses:
        reason = address_refusal(check.host, addr, check.port, allow)
        if reason:
            raise FetchProblem(FetchFailure.BLOCKED,
                               f"{check.host} resolves to {addr}, which is blocked ({reason})")
    return addresses[0]


async def _lookup(check: UrlCheck, resolver: Resolver, timeout_s: float) -> list[str]:
    try:
        async with asyncio.timeout(timeout_s):
            return list(await resolver(check.host, check.port))
    except TimeoutError:
        raise FetchProblem(FetchFailure.DNS, f"DNS lookup of {check.host} timed out",
                           transient=True) from None
    except socket.gaierror as exc:
        transient = exc.errno == socket.EAI_AGAIN
        raise FetchProblem(FetchFailure.DNS, f"DNS lookup of {check.host} failed: "
                           f"{exc.strerror or exc}", transient=transient) from None
    except Exception as exc:
        raise FetchProblem(FetchFailure.DNS, f"DNS lookup of {check.host} failed "
                           f"({type(exc).__name__}: {exc})", transient=True) from None


def _parse_resolved(host: str, address: str) -> IPAddress:
    try:
        return parse_ip(address)
    except ValueError:
        raise FetchProblem(FetchFailure.DNS, f"DNS: {host} gave an invalid address "
                           f"{address!r}") from None
