"""The small PromQL evaluator the alert-rule tests use (medverify.testing.promql): each
construct against hand-computed values, and refusal of what it does not support."""

from __future__ import annotations

import math

import pytest

from medverify.testing.promql import PromQLError, Scrape, evaluate, fires

BEFORE = """# TYPE req counter
req_total{route="/a",status="200"} 10
req_total{route="/a",status="500"} 0
req_total{route="/b",status="200"} 4
# TYPE temp gauge
temp{room="x"} 20
temp{room="y"} 30
# TYPE lat histogram
lat_bucket{route="/a",le="0.1"} 0
lat_bucket{route="/a",le="1.0"} 0
lat_bucket{route="/a",le="+Inf"} 0
lat_count{route="/a"} 0
lat_sum{route="/a"} 0
"""
AFTER = """# TYPE req counter
req_total{route="/a",status="200"} 70
req_total{route="/a",status="500"} 20
req_total{route="/b",status="200"} 1
# TYPE temp gauge
temp{room="x"} 21
temp{room="y"} 35
# TYPE lat histogram
lat_bucket{route="/a",le="0.1"} 50
lat_bucket{route="/a",le="1.0"} 90
lat_bucket{route="/a",le="+Inf"} 100
lat_count{route="/a"} 100
lat_sum{route="/a"} 30
"""
SCRAPES = [Scrape.parse(1000.0, BEFORE), Scrape.parse(1060.0, AFTER)]


def labels(value: object) -> list[dict[str, str]]:
    assert isinstance(value, dict)
    return sorted((dict(k) for k in value), key=str)


def test_selectors_and_matchers() -> None:
    assert list(evaluate('temp{room="y"}', SCRAPES).values()) == [35.0]
    assert labels(evaluate('req_total{status!="200"}', SCRAPES)) == [
        {"__name__": "req_total", "route": "/a", "status": "500"}]
    assert len(evaluate('req_total{route=~"/[ab]",status!~"5.."}', SCRAPES)) == 2
    assert evaluate("nothing_here", SCRAPES) == {}


def test_increase_and_rate_over_the_scrapes_with_a_counter_reset() -> None:
    grown = evaluate("increase(req_total[5m])", SCRAPES)
    assert {dict(k)["route"] + dict(k)["status"]: v for k, v in grown.items()} == {
        "/a200": 60.0, "/a500": 20.0, "/b200": 1.0}  # /b: reset from 4 to 1 counts 1
    rate = evaluate('rate(req_total{route="/a",status="200"}[5m])', SCRAPES)
    assert list(rate.values()) == [1.0]
    assert evaluate("rate(req_total[30s])", SCRAPES) == {}  # one scrape in range


def test_aggregations_arithmetic_and_comparisons() -> None:
    assert evaluate("sum(temp)", SCRAPES) == {frozenset(): 56.0}
    by_route = evaluate("sum by (route) (increase(req_total[5m]))", SCRAPES)
    assert {dict(k)["route"]: v for k, v in by_route.items()} == {"/a": 80.0, "/b": 1.0}
    assert evaluate("max without (room) (temp)", SCRAPES) == {frozenset(): 35.0}
    assert evaluate("count(temp)", SCRAPES) == {frozenset(): 2.0}
    assert evaluate("avg(temp) * 2", SCRAPES) == {frozenset(): 56.0}
    share = ('sum(increase(req_total{status="500"}[5m])) / sum(increase(req_total[5m]))')
    assert evaluate(share, SCRAPES) == {frozenset(): pytest.approx(20 / 81)}
    assert fires(share + " > 0.2", SCRAPES) and not fires(share + " > 0.25", SCRAPES)
    assert labels(evaluate("temp > 25", SCRAPES)) == [{"room": "y"}]
    assert fires("0.5 < temp", SCRAPES)
    ratio = evaluate("temp / temp", SCRAPES)
    assert set(ratio.values()) == {1.0}


def test_histogram_quantile_interpolates_in_its_bucket() -> None:
    buckets = "sum by (le) (increase(lat_bucket[5m]))"
    assert evaluate(f"histogram_quantile(0.5, {buckets})", SCRAPES) == {
        frozenset(): pytest.approx(0.1)}
    assert evaluate(f"histogram_quantile(0.7, {buckets})", SCRAPES) == {
        frozenset(): pytest.approx(0.1 + 0.9 * (70 - 50) / (90 - 50))}
    assert evaluate(f"histogram_quantile(0.99, {buckets})", SCRAPES) == {
        frozenset(): 1.0}  # in +Inf: the highest finite bound
    assert evaluate("histogram_quantile(0.5, sum by (le) (no_such_bucket))", SCRAPES) == {}


def test_what_it_does_not_know_is_an_error() -> None:
    for expr in ("temp offset 5m", "label_replace(temp)", "1 > 2", "temp[5m]",
                 "sum(temp", "rate(temp)", 'temp{room="x"} @ 5'):
        with pytest.raises(PromQLError):
            evaluate(expr, SCRAPES)
    assert math.isnan(evaluate("0 / 0", SCRAPES))  # type: ignore[arg-type]
