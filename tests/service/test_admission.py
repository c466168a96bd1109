"""Admission of synchronous checks (``medverify.service.admission``): slots granted in
arrival order, several to a long check, a check that cannot finish in time refused at once
(503 ``too_long``), and what the slots learn from finished checks."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi.testclient import TestClient

from medverify.client import Client, TooLong
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.admission import CheckSlots, _Admission
from medverify.service.app import create_app
from medverify.service.errors import ApiError
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge


def _counting(limit: int) -> _Admission:
    """An admission that lets ``limit`` checks in at once, whatever their size."""
    return _Admission(lambda admission, units: admission.running < limit, time.monotonic)


def test_a_timed_out_wait_keeps_no_slot() -> None:
    async def race(delay: float) -> bool:
        """The slot is released about when the wait gives up; whatever the wait returns,
        afterwards no check may be counted as running."""
        slots = _counting(1)
        held = await slots.acquire(2)
        waiter = asyncio.ensure_future(slots.take(2, 0.01))
        await asyncio.sleep(delay)
        slots.release(held)
        ticket = await waiter
        if ticket is not None:
            slots.release(ticket)
        return slots.running == slots.units == 0 and not slots.locked()

    async def scenario() -> list[bool]:
        return [await race(0.01 + i * 0.0005) for i in range(-10, 10)]

    assert all(asyncio.run(scenario()))


def test_a_cancelled_wait_keeps_no_slot_and_lets_the_next_in() -> None:
    async def scenario() -> tuple[int, bool]:
        slots = CheckSlots(2, queue_wait_s=5.0, timeout_s=10.0)
        slots.unit_s = 1.0  # 8 s of room (0.8 * 10 s)
        admission = slots.slots
        assert admission is not None
        await admission.acquire(5)
        big = asyncio.ensure_future(admission.take(4, None))  # 5 + 4 > 8: waits
        small = asyncio.ensure_future(admission.take(1, None))  # would fit, but is behind
        await asyncio.sleep(0.01)
        assert not big.done() and not small.done()  # not overtaking the waiting long check
        big.cancel()
        await asyncio.sleep(0.01)
        return admission.units, small.done() and small.result() is not None

    assert asyncio.run(scenario()) == (6, True)


def test_checks_are_admitted_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        slots = _counting(1)
        first = await slots.acquire()
        order: list[str] = []

        async def want(name: str, units: int) -> None:
            ticket = await slots.take(units, None)
            order.append(name)
            await asyncio.sleep(0.02)
            assert ticket is not None
            slots.release(ticket)

        tasks = [asyncio.ensure_future(want(n, u)) for n, u in (("a", 3), ("b", 1))]
        await asyncio.sleep(0.01)
        assert order == []
        slots.release(first)
        await asyncio.sleep(0.01)
        assert order == ["a"]
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["a", "b"]


def test_an_answer_too_long_even_alone_is_refused_at_once_and_one_that_fits_waits() -> None:
    slots = CheckSlots(4, queue_wait_s=5.0, timeout_s=30.0, work_share=0.8)
    slots.refuse_too_long(500)  # nothing learnt yet: nothing to predict from
    slots.unit_s = 1.0  # a sentence takes 1 s; the budget is 0.8 * 30 = 24 s
    slots.refuse_too_long(24)
    with pytest.raises(ApiError) as refused:
        slots.refuse_too_long(25)
    assert refused.value.status == 503 and refused.value.code == "too_long"
    assert refused.value.headers is None  # no Retry-After: retrying will not help
    assert "job" in refused.value.message and "25 sentences" in refused.value.message
    admission = slots.slots
    assert admission is not None
    asyncio.run(admission.acquire(14))  # a check of 14 sentences in work
    assert slots._fits(admission, 10) and not slots._fits(admission, 11)
    asyncio.run(admission.acquire(2))  # then one of 2: the first may now wait on 16
    assert [t.work for t in admission.tickets] == [16, 16]
    assert slots._fits(admission, 8) and not slots._fits(admission, 9)
    admission.release(admission.tickets[1])  # the later one finished first
    assert admission.tickets[0].work == 16  # what ran before it still ran
    assert slots._fits(admission, 8) and not slots._fits(admission, 9)


def test_the_rate_is_learnt_from_the_busy_time() -> None:
    now = [0.0]
    slots = CheckSlots(4, queue_wait_s=5.0, timeout_s=30.0, clock=lambda: now[0])

    async def scenario() -> None:
        async def alone() -> None:
            now[0] = 8.0  # 4 sentences in 8 s of work

        await slots.run(alone, units=4)
        assert slots.unit_s == pytest.approx(2.0)
        now[0] = 100.0  # idle time is not work
        done = asyncio.Event()

        async def together() -> None:
            await done.wait()

        both = [asyncio.ensure_future(slots.run(together, units=n)) for n in (2, 4)]
        await asyncio.sleep(0.01)
        now[0] = 104.0  # 6 more sentences in 4 s of work, the two checks at once
        done.set()
        await asyncio.gather(*both)

    asyncio.run(scenario())
    spent, sentences = 0.9 * 8 + 4, 0.9 * 4 + 2  # the first of the two to finish
    spent, sentences = 0.9 * spent, 0.9 * sentences + 4  # the second: no more busy time
    assert slots.unit_s == pytest.approx(spent / sentences)  # 1.12 s a sentence
    assert slots.mean_s == pytest.approx(0.8 * 0.8 * 8 + 0.2 * 0.8 * 4 + 0.2 * 4)


def _serial_judge(group: int, unit_s: float):  # type: ignore[no-untyped-def]
    """Work as the built-in judge does it: each check's sentences in groups of ``group``,
    each group judged on one thread for the whole process, first come first served."""
    judge = asyncio.Lock()

    def work_of(units: int):  # type: ignore[no-untyped-def]
        async def work() -> None:
            for start in range(0, units, group):
                async with judge:
                    await asyncio.sleep(min(group, units - start) * unit_s)
        return work

    return work_of


def _simulate(sized: bool, seed: int = 8) -> dict[str, int]:
    """Mixed short and long checks arriving at random at a worker whose judge takes 9 ms a
    sentence, one group at a time; 4 slots, a 0.3 s limit, the rate known: what the
    admission answers (``sized`` False: only the slots count, as before issue 43)."""
    slots = CheckSlots(4, queue_wait_s=30.0, timeout_s=0.3, work_share=0.8)
    slots.unit_s = 0.009
    slots._observe = lambda *a: None  # type: ignore[method-assign]  # keep the known rate
    if not sized:
        slots.unit_s = None
    work_of = _serial_judge(16, 0.009)
    outcomes: dict[str, int] = {}
    rng = random.Random(seed)

    async def one(units: int) -> None:
        try:
            await slots.run(work_of(units), units=units)
            key = "ok"
        except ApiError as exc:
            key = exc.code
        outcomes[key] = outcomes.get(key, 0) + 1

    async def arrivals() -> None:
        tasks = []
        for _ in range(16):
            tasks.append(asyncio.ensure_future(one(rng.choice([2, 3, 4, 26, 24, 22, 30]))))
            await asyncio.sleep(rng.uniform(0.0, 0.04))
        await asyncio.gather(*tasks)

    asyncio.run(arrivals())
    return outcomes


def test_long_checks_among_short_ones_finish_in_time_or_are_refused_at_once() -> None:
    sized = _simulate(sized=True)
    assert sized.get("timeout", 0) == 0, sized
    assert sized.get("too_long", 0) > 0 and sized.get("ok", 0) > 8, sized
    plain = _simulate(sized=False)  # only the slots: checks queue behind long ones, cut off
    assert plain.get("timeout", 0) > 0, plain


# ------------------------------------------------------------------ through the service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, str, str]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin",
                            text="Metformin is a first-line medicine for type 2 diabetes.")])
    register_fake("admission", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line"))))
    with RunStore(tmp_path / "runs.db") as store:
        secret = KeyStore(store).create("client", Role.CLIENT).secret
        admin = KeyStore(store).create("admin", Role.ADMIN).secret
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:admission",
                    decomposer="rules", service={"max_concurrent_checks": 4})
    try:
        with TestClient(create_app(config, run_jobs=False)) as client:
            yield client, secret, admin
    finally:
        unregister_fake("admission")


def test_an_answer_too_long_to_check_in_time_is_refused_at_once_with_nothing_recorded(
        service: tuple[TestClient, str, str]) -> None:
    client, secret, admin = service
    auth = {"Authorization": f"Bearer {secret}"}
    short = {"question": "q", "text": "Metformin is a first-line medicine."}
    assert client.post("/v1/check", json=short, headers=auth).status_code == 200
    state = client.app.state.service  # type: ignore[attr-defined]
    assert state.check_slots.unit_s is not None  # learnt from the check
    state.check_slots.unit_s = 9.0  # now a sentence takes 9 s: 3 pass 0.8 * 30 s
    runs = len(client.portal.call(state.runs.list_runs))  # type: ignore[union-attr]
    long = {"question": "q", "text": "Metformin is a first-line medicine. " * 3}
    started = time.monotonic()
    refused = client.post("/v1/check", json=long, headers=auth)
    assert time.monotonic() - started < 2.0  # at once, not after the time limit
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "too_long"
    assert "Retry-After" not in refused.headers
    assert len(client.portal.call(state.runs.list_runs)) == runs  # type: ignore[union-attr]

    def relay(request: httpx.Request) -> httpx.Response:  # the Python client, in process
        got = client.request(request.method, request.url.path, content=request.content,
                             headers=dict(request.headers))
        return httpx.Response(got.status_code, headers=dict(got.headers), content=got.content)

    with Client("http://testserver", secret, transport=httpx.MockTransport(relay)) as api, \
            pytest.raises(TooLong, match="submit it as a job"):
        api.check(long["text"], question="q")
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    assert re.search(r'medverify_admission_refusals_total\{code="too_long",status="503"\} 2',
                     metrics), metrics
    assert client.post("/v1/check", json=short, headers=auth).status_code == 200  # 1 sentence
