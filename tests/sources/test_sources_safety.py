"""The fetcher's decision functions: URL checks, address classes, allow list, DNS checks.

Nothing here connects anywhere: ranges other than loopback are tested on the decision
functions only.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from medverify.errors import ConfigError
from medverify.records import FetchFailure
from medverify.sources import AllowList, Resolver, blocked_reason, check_url, literal_ip
from medverify.sources.safety import FetchProblem, resolve_and_check


@pytest.mark.parametrize(("url", "reason"), [
    ("http://127.0.0.1/", "loopback"),
    ("http://2130706433/", "loopback"),  # decimal
    ("http://0177.0.0.1/", "loopback"),  # octal
    ("http://017700000001/", "loopback"),  # octal, one part
    ("http://0x7f.1/", "loopback"),  # hex, short form
    ("http://0x7F000001/", "loopback"),
    ("http://127.1/", "loopback"),  # short form
    ("http://127.0.0.1./", "loopback"),  # trailing dot
    ("http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", "loopback"),  # full width
    ("http://[::1]:8080/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback (IPv4-mapped 127.0.0.1)"),
    ("http://[::ffff:a9fe:a9fe]/", "cloud metadata (IPv4-mapped 169.254.169.254)"),
    ("http://[::127.0.0.1]/", "loopback (IPv4-compatible 127.0.0.1)"),
    ("http://[2002:a00:1::]/", "private (6to4 10.0.0.1)"),
    ("http://[64:ff9b::192.168.1.1]/", "private (NAT64 192.168.1.1)"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://100.100.100.200/", "cloud metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1%25eth0]/", "link-local"),
    ("http://100.64.0.1/", "shared address space"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://192.0.2.1/", "documentation"),
    ("http://[2001:db8::1]/", "documentation"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "broadcast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://[fc00::1]/", "private"),
    ("http://[4000::1]/", "reserved"),
])
def test_blocked_literal_hosts(url: str, reason: str) -> None:
    check = check_url(url)
    assert check.failure is FetchFailure.BLOCKED, check
    assert check.reason is not None and check.reason.endswith(f"({reason})")


@pytest.mark.parametrize(("url", "host", "port"), [
    ("http://8.8.8.8/", "8.8.8.8", 80),
    ("https://134744072/", "8.8.8.8", 443),  # decimal form of a public address
    ("http://[2001:4860:4860::8888]:8443/x", "2001:4860:4860::8888", 8443),
    ("http://[::ffff:8.8.8.8]/", "::ffff:808:808", 80),
    ("http://[2002:808:808::1]/", "2002:808:808::1", 80),
    ("HTTPS://Example.COM./Path", "example.com", 443),
    ("http://bücher.de/", "xn--bcher-kva.de", 80),
    ("http://my_host.example.org/", "my_host.example.org", 80),
])
def test_public_hosts_pass(url: str, host: str, port: int) -> None:
    check = check_url(url)
    assert check.ok, check
    assert (check.host, check.port) == (host, port)


@pytest.mark.parametrize(("url", "failure"), [
    (None, FetchFailure.NO_URL),
    ("   ", FetchFailure.NO_URL),
    ("ftp://example.com/file", FetchFailure.SCHEME),
    ("file:///etc/passwd", FetchFailure.SCHEME),
    ("javascript:alert(1)", FetchFailure.SCHEME),
    ("data:text/html,<b>hi</b>", FetchFailure.SCHEME),
    ("gopher://example.com:70/", FetchFailure.SCHEME),
    ("mailto:someone@example.com", FetchFailure.SCHEME),
    ("www.example.com/page", FetchFailure.BAD_URL),
    ("http://", FetchFailure.BAD_URL),
    ("http:///path", FetchFailure.BAD_URL),
    ("http://[::1", FetchFailure.BAD_URL),
    ("http://example.com:99999/", FetchFailure.BAD_URL),
    ("http://example.com:0/", FetchFailure.BAD_URL),
    ("http://example.com:http/", FetchFailure.BAD_URL),
    ("http://user:pw@example.com/", FetchFailure.BAD_URL),
    ("http://example.com@127.0.0.1/", FetchFailure.BAD_URL),
    ("http://evil.com\\@127.0.0.1/", FetchFailure.BAD_URL),
    ("http://1.2.3.4.5/", FetchFailure.BAD_URL),
    ("http://256.0.0.1/", FetchFailure.BAD_URL),
    ("http://0x1g.0.0.1/", FetchFailure.BAD_URL),
    ("http://09.0.0.1/", FetchFailure.BAD_URL),  # 9 is not an octal digit
    ("http://exa mple.com/", FetchFailure.BAD_URL),
    ("http://%31%32%37.0.0.1/", FetchFailure.BAD_URL),
    ("http://example.com/\x00", FetchFailure.BAD_URL),
    ("http://-bad-.com/", FetchFailure.BAD_URL),
])
def test_bad_urls_and_schemes(url: str | None, failure: FetchFailure) -> None:
    check = check_url(url)
    assert check.failure is failure, check
    assert check.reason


def test_normalised_url_drops_fragment_and_encodes_path() -> None:
    check = check_url("http://Example.com:80/a b/ü?q=1 2#frag")
    assert check.url == "http://example.com/a%20b/%C3%BC?q=1%202"
    assert check_url("http://[::ffff:8.8.8.8]:81/").url == "http://[::ffff:808:808]:81/"


def test_literal_ip_forms() -> None:
    assert str(literal_ip("0x7f.0.0.1")) == "127.0.0.1"
    assert str(literal_ip("3232235777")) == "192.168.1.1"
    assert str(literal_ip("0300.0250.1.1")) == "192.168.1.1"
    assert str(literal_ip("10.1")) == "10.0.0.1"
    assert str(literal_ip("10.0.258")) == "10.0.1.2"
    assert literal_ip("example.com") is None
    assert literal_ip("1a.example") is None


def test_blocked_reason_on_public_and_mapped_addresses() -> None:
    for public in ("8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"):
        assert blocked_reason(public) is None, public
    assert blocked_reason("::8.8.8.8") == "reserved"  # deprecated IPv4-compatible form
    assert blocked_reason("2001::1") == "reserved"  # Teredo
    with pytest.raises(ValueError):
        blocked_reason("not-an-ip")


def test_allow_list_opens_exactly_what_it_names() -> None:
    allow = AllowList(["127.0.0.1", "[::1]:8080", "intranet.example:8443", "169.254.169.254"])
    assert check_url("http://127.0.0.1:9999/", allow).ok
    assert check_url("http://2130706433/", allow).ok  # the same address in another form
    assert check_url("http://[::1]:8080/", allow).ok
    assert check_url("http://[::1]:8081/", allow).failure is FetchFailure.BLOCKED
    assert check_url("http://127.0.0.2/", allow).failure is FetchFailure.BLOCKED
    assert check_url("http://169.254.169.254/", allow).ok  # opened on purpose, by IP
    assert "127.0.0.1" in repr(allow) and bool(allow) and not AllowList()


@pytest.mark.parametrize("entry", ["", "[::1", "host:99999", "bad host", "[nope]:80"])
def test_bad_allow_entries_raise_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match="allow entry"):
        AllowList([entry])


def _resolver(table: dict[str, list[str]], calls: list[str] | None = None) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]
    return resolve


def _resolve(url: str, table: dict[str, list[str]], allow: AllowList | None = None) -> str:
    check = check_url(url, allow)
    assert check.ok, check
    ip = asyncio.run(resolve_and_check(check, _resolver(table), allow or AllowList(), 1.0))
    return str(ip)


def test_every_resolved_address_is_checked() -> None:
    assert _resolve("http://ok.example/", {"ok.example": ["8.8.8.8", "2001:4860::1"]}) == "8.8.8.8"
    for addresses in (["8.8.8.8", "10.1.2.3"], ["::1"], ["8.8.4.4", "::ffff:169.254.169.254"],
                      ["fe80::1%eth0"]):
        with pytest.raises(FetchProblem) as info:
            _resolve("http://mixed.example/", {"mixed.example": addresses})
        assert info.value.failure is FetchFailure.BLOCKED
        assert "mixed.example resolves to" in info.value.reason


def test_host_name_allow_entry_opens_its_addresses_but_not_metadata() -> None:
    allow = AllowList(["intranet.example"])
    assert _resolve("http://intranet.example/", {"intranet.example": ["10.0.0.5"]},
                    allow) == "10.0.0.5"
    with pytest.raises(FetchProblem, match="cloud metadata"):
        _resolve("http://intranet.example/", {"intranet.example": ["169.254.169.254"]}, allow)


def test_dns_failures_are_recorded() -> None:
    for table in ({}, {"x.example": []}, {"x.example": ["not an address"]}):
        with pytest.raises(FetchProblem) as info:
            _resolve("http://x.example/", table)
        assert info.value.failure is FetchFailure.DNS
    assert not _dns_problem(socket.gaierror(socket.EAI_NONAME, "unknown")).transient
    assert _dns_problem(socket.gaierror(socket.EAI_AGAIN, "try again")).transient
    assert "RuntimeError" in _dns_problem(RuntimeError("resolver bug")).reason


def _dns_problem(exc: Exception) -> FetchProblem:
    async def resolve(host: str, port: int) -> list[str]:
        raise exc
    with pytest.raises(FetchProblem) as info:
        asyncio.run(resolve_and_check(check_url("http://x.example/"), resolve, AllowList(), 1.0))
    return info.value


def test_slow_resolver_times_out() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        await asyncio.sleep(5)
        return ["8.8.8.8"]
    with pytest.raises(FetchProblem, match="timed out"):
        asyncio.run(resolve_and_check(check_url("http://x.example/"), resolve, AllowList(), 0.05))
