"""Log-probability scorers: local tiny models (two architectures, two tokenizers) checked
against a direct torch computation, and a vLLM-shaped server (prompt_logprobs)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from medverify.config import RiskSettings  # noqa: E402
from medverify.errors import ConfigError  # noqa: E402
from medverify.risk.records import TokenTrace  # noqa: E402
from medverify.risk.scorers import (  # noqa: E402
    EMPTY_ANSWER,
    NO_PROMPT_LOGPROBS,
    HFScorer,
    ScoreItem,
    Scorer,
    load_local_lm,
    make_scorer,
    render_prompt,
)
from medverify.risk.server_scorer import OpenAICompatScorer  # noqa: E402
from medverify.testing.local_server import CompletionsServer  # noqa: E402
from medverify.testing.tiny_lm import build_tiny_lm  # noqa: E402

ARCHS = ("gpt2", "llama")
ITEMS = [
    ScoreItem(question="What is the first-line drug for type 2 diabetes?",
              answer="Metformin is the first-line drug for type 2 diabetes."),
    ScoreItem(question="How is warfarin monitored?", answer="With the INR, weekly at first.",
              context="Warfarin is an anticoagulant."),
    ScoreItem(question=None, answer="Aspirin inhibits platelets."),
]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-lm")
    return {arch: build_tiny_lm(root / arch, arch, seed=1) for arch in ARCHS}


def run(scorer: Scorer, items: list[ScoreItem]) -> list[TokenTrace]:
    return asyncio.run(scorer.score(items))


def scorer_for(path: Path, **settings: Any) -> Scorer:
    return make_scorer(f"hf:{path}", RiskSettings(**settings))


def direct_logprobs(path: Path, item: ScoreItem) -> tuple[Any, list[int]]:
    """log_softmax(logits[t-1])[token t] for every answer token, computed by hand."""
    lm = load_local_lm(path.resolve(), "cpu")
    tok = lm.tokenizer
    prompt = tok(render_prompt(item), add_special_tokens=True)["input_ids"]
    answer = tok(item.answer, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = lm.model(torch.tensor([prompt + answer])).logits[0]
    rows = torch.log_softmax(logits.float(), dim=-1)[len(prompt) - 1:-1]
    return rows, answer


# ----------------------------------------------------------------------- tiny models


def test_tiny_models_load_offline_with_different_tokenizers(tiny_models: dict[str, Path]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    toks = {a: AutoTokenizer.from_pretrained(p, local_files_only=True)
            for a, p in tiny_models.items()}
    model = AutoModelForCausalLM.from_pretrained(tiny_models["llama"], local_files_only=True)
    assert model.config.model_type == "llama"
    text = "Metformin lowers blood glucose."
    pieces = {a: t.convert_ids_to_tokens(t(text, add_special_tokens=False)["input_ids"])
              for a, t in toks.items()}
    assert pieces["gpt2"] != pieces["llama"]
    assert any(p.startswith("▁") for p in pieces["llama"])
    assert toks["llama"](text)["input_ids"][0] == toks["llama"].bos_token_id
    assert toks["gpt2"](text)["input_ids"] == toks["gpt2"](text, add_special_tokens=False)[
        "input_ids"]


def test_tiny_lm_sizes_are_configurable(tmp_path: Path) -> None:
    small = build_tiny_lm(tmp_path / "s", "gpt2", hidden=16, layers=1, heads=2)
    large = build_tiny_lm(tmp_path / "l", "gpt2", hidden=64, layers=3, heads=4)
    params = {p: json.loads((p / "medverify_tiny_lm.json").read_text())["parameters"]
              for p in (small, large)}
    assert params[large] > 4 * params[small]


# ----------------------------------------------------------------------- local scorer


@pytest.mark.parametrize("arch", ARCHS)
def test_hf_logprobs_and_ranks_match_direct_computation(tiny_models: dict[str, Path],
                                                        arch: str) -> None:
    k = 7
    [trace] = run(scorer_for(tiny_models[arch], top_k=k, device="cpu"), [ITEMS[1]])
    rows, answer_ids = direct_logprobs(tiny_models[arch], ITEMS[1])
    assert trace.error is None and len(trace.steps) == len(answer_ids)
    for step, row, tid in zip(trace.steps, rows, answer_ids, strict=True):
        expected = float(row[tid])
        assert step.logprob == pytest.approx(expected, abs=1e-5)
        assert step.rank == int((row > row[tid]).sum()) + 1
        tops = [t.logprob for t in step.top]
        assert len(tops) == k and tops == sorted(tops, reverse=True)
        assert tops[0] == pytest.approx(float(row.max()), abs=1e-5)
        assert tops[-1] == pytest.approx(float(row.topk(k).values[-1]), abs=1e-5)
        if step.rank <= k:
            assert step.top[step.rank - 1].logprob == pytest.approx(expected, abs=1e-5)
    assert trace.k == k and trace.context == ITEMS[1].context
    assert trace.scorer == f"hf:{tiny_models[arch].resolve()}"


@pytest.mark.parametrize("arch", ARCHS)
def test_hf_offsets_cover_the_answer(tiny_models: dict[str, Path], arch: str) -> None:
    answer = "Metformin  lowers glucose; dose: 500 mg, twice daily (CKD-3)."
    [trace] = run(scorer_for(tiny_models[arch]), [ScoreItem(answer=answer)])
    spans = [(s.start, s.end) for s in trace.steps]
    assert all(0 <= a <= b <= len(answer) for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
    covered = "".join(answer[a:b] for a, b in spans)
    assert "".join(covered.split()) == "".join(answer.split())
    assert covered == answer
    for step in trace.steps:
        if step.end > step.start:
            assert step.token.strip() == answer[step.start:step.end].strip()


def test_hf_prepended_word_marker_gets_an_empty_span(tiny_models: dict[str, Path]) -> None:
    [trace] = run(scorer_for(tiny_models["llama"]), [ScoreItem(answer="zq ok")])
    first = trace.steps[0]
    assert first.token == " " and (first.start, first.end) == (0, 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_hf_batch_equals_one_by_one(tiny_models: dict[str, Path], arch: str) -> None:
    batched = run(scorer_for(tiny_models[arch], batch_size=8, top_k=5), ITEMS)
    single = run(scorer_for(tiny_models[arch], batch_size=1, top_k=5), ITEMS)
    assert [len(t.steps) for t in batched] == [len(t.steps) for t in single]
    assert len({len(t.steps) for t in batched}) > 1  # padding is exercised
    for b, s in zip(batched, single, strict=True):
        for x, y in zip(b.steps, s.steps, strict=True):
            assert (x.token, x.start, x.end, x.rank) == (y.token, y.start, y.end, y.rank)
            assert x.logprob == pytest.approx(y.logprob, abs=1e-5)
            assert [t.token for t in x.top] == [t.token for t in y.top]
            for tx, ty in zip(x.top, y.top, strict=True):
                assert tx.logprob == pytest.approx(ty.logprob, abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_dtype_is_a_separate_model_close_to_float32(tiny_models: dict[str, Path],
                                                               arch: str) -> None:
    path = tiny_models[arch].resolve()
    assert load_local_lm(path, "cpu", "auto") is load_local_lm(path, "cpu", "float32")
    half = load_local_lm(path, "cpu", "bfloat16")
    assert half is not load_local_lm(path, "cpu", "float32")
    assert next(half.model.parameters()).dtype == torch.bfloat16
    full = run(scorer_for(path, device="cpu"), ITEMS[:2])
    fast = run(scorer_for(path, device="cpu", dtype="bfloat16"), ITEMS[:2])
    for f, b in zip(full, fast, strict=True):
        assert b.error is None and [s.token for s in b.steps] == [s.token for s in f.steps]
        mean_f = sum(s.logprob for s in f.steps) / len(f.steps)
        mean_b = sum(s.logprob for s in b.steps) / len(b.steps)
        assert mean_b == pytest.approx(mean_f, abs=0.05)  # bf16 rounding, not another model
        assert mean_b != mean_f  # it really ran in bfloat16


def test_different_tokenizers_give_different_step_counts(tiny_models: dict[str, Path]) -> None:
    counts = {arch: len(run(scorer_for(p), [ITEMS[0]])[0].steps)
              for arch, p in tiny_models.items()}
    assert counts["gpt2"] != counts["llama"] and min(counts.values()) > 0


def test_hf_bad_items_give_error_traces(tiny_models: dict[str, Path]) -> None:
    items = [ScoreItem(answer="  "), ITEMS[2], ScoreItem(answer="Metformin " * 700),
             ScoreItem(answer="")]
    traces = run(scorer_for(tiny_models["gpt2"], batch_size=3), items)
    assert [t.answer for t in traces] == [i.answer for i in items]
    assert traces[0].error == EMPTY_ANSWER and traces[0].steps == []
    assert traces[1].error is None and traces[1].steps
    assert "at most 1024" in (traces[2].error or "") and traces[2].steps == []
    assert traces[3].error == EMPTY_ANSWER


def test_hf_out_of_memory_fails_only_the_answer_that_needs_it(
        tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward pass that runs out of memory (simulated: any batch holding the long answer)
    is retried answer by answer; only the long answer fails, with the cause."""
    import medverify.risk.scorers as scorers

    real = scorers._forward
    long_answer = "Metformin lowers glucose " * 20

    def forward(lm: Any, batch: list[Any], k: int) -> Any:
        if max(len(enc.ids) for enc in batch) > 300:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(lm, batch, k)

    monkeypatch.setattr(scorers, "_forward", forward)
    items = [ITEMS[0], ScoreItem(answer=long_answer), ITEMS[1]]
    traces = run(scorer_for(tiny_models["gpt2"], batch_size=3), items)
    assert [t.answer for t in traces] == [i.answer for i in items]
    assert traces[0].error is None and traces[0].steps
    assert traces[2].error is None and traces[2].steps
    assert traces[1].steps == []
    assert "scoring failed" in (traces[1].error or "")
    assert "out of memory" in (traces[1].error or "")


def test_hf_scorer_is_a_scorer_and_runs_off_the_event_loop(
        tiny_models: dict[str, Path]) -> None:
    scorer = scorer_for(tiny_models["gpt2"])
    assert isinstance(scorer, HFScorer) and isinstance(scorer, Scorer)
    threads: dict[str, threading.Thread] = {}
    original = scorer.score_batch

    def recording(items: list[ScoreItem]) -> list[TokenTrace]:
        threads["model"] = threading.current_thread()
        return original(items)

    scorer.score_batch = recording  # type: ignore[method-assign]

    async def main() -> list[TokenTrace]:
        threads["loop"] = threading.current_thread()
        return await scorer.score([ITEMS[2].model_copy(update={"prompt_variant": "r-1"})])

    [trace] = asyncio.run(main())
    assert trace.prompt_variant == "r-1" and trace.steps
    assert threads["model"] is not threads["loop"]


def test_hf_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        make_scorer(f"hf:{tmp_path / 'nope'}", RiskSettings())
    with pytest.raises(ConfigError, match=r"no config\.json"):
        make_scorer(f"hf:{tmp_path}", RiskSettings())
    with pytest.raises(ConfigError, match="unknown risk scorer 'nosuch'"):
        make_scorer("nosuch:model", RiskSettings())
    with pytest.raises(ConfigError, match="expected hf:"):
        make_scorer("hf:", RiskSettings())


def test_cuda_request_without_cuda_is_a_config_error(tiny_models: dict[str, Path]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    scorer = scorer_for(tiny_models["gpt2"], device="cuda")
    with pytest.raises(ConfigError, match="no CUDA device"):
        run(scorer, [ITEMS[2]])


# ------------------------------------------------------------- vLLM-shaped test server

Reply = Callable[[dict[str, Any]], tuple[int, Any]]


def vllm_reply(model_dir: Path) -> Reply:
    """Score the whole prompt with the tiny model and answer like vLLM: per prompt token
    ``{id: {logprob, rank, decoded_token}}``, the prompt token first, then the top-k."""
    lm = load_local_lm(model_dir.resolve(), "cpu")

    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        ids = lm.tokenizer(body["prompt"])["input_ids"]
        with torch.no_grad():
            rows = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].float(), -1)
        entries: list[Any] = [None]
        for pos in range(1, len(ids)):
            entries.append(_vllm_entry(lm, rows[pos - 1], ids[pos], body["prompt_logprobs"]))
        choice = {"index": 0, "text": "x", "finish_reason": "length",
                  "prompt_logprobs": entries}
        return 200, {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}

    return reply


def _vllm_entry(lm: Any, row: Any, token_id: int, k: int) -> dict[str, Any]:
    def item(tid: int) -> dict[str, Any]:
        return {"logprob": float(row[tid]), "rank": int((row > row[tid]).sum()) + 1,
                "decoded_token": lm.tokenizer.decode([tid])}

    entry = {str(token_id): item(token_id)}
    for tid in row.topk(k).indices.tolist():
        entry.setdefault(str(tid), item(tid))
    return entry


def compat(server: CompletionsServer, k: int = 5, **kwargs: Any) -> OpenAICompatScorer:
    return OpenAICompatScorer(kind="vllm", model="tiny", base_url=server.base_url, k=k,
                              backoff_s=0.01, **kwargs)


def test_vllm_prompt_logprobs_map_like_the_local_model(tiny_models: dict[str, Path]) -> None:
    with CompletionsServer(vllm_reply(tiny_models["gpt2"])) as server:
        remote = run(compat(server), ITEMS)
    local = run(scorer_for(tiny_models["gpt2"], top_k=5, device="cpu"), ITEMS)
    assert server.bodies[0]["prompt_logprobs"] == 5 and server.bodies[0]["max_tokens"] == 1
    assert sorted(b["prompt"] for b in server.bodies) == sorted(
        render_prompt(i) + i.answer for i in ITEMS)  # requests run concurrently
    for r, loc in zip(remote, local, strict=True):
        assert r.error is None and len(r.steps) == len(loc.steps) > 0
        for x, y in zip(r.steps, loc.steps, strict=True):
            assert (x.token, x.start, x.end, x.rank) == (y.token, y.start, y.end, y.rank)
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
            assert [t.token for t in x.top] == [t.token for t in y.top]


def test_vllm_hand_built_payload_with_a_token_straddling_the_answer() -> None:
    prompt, answer = render_prompt(ScoreItem(answer="x")), "Hi there"
    assert prompt == "Answer:\n"

    def lp(token: str, logprob: float, rank: int) -> dict[str, Any]:
        return {"logprob": logprob, "rank": rank, "decoded_token": token}

    entries = [None, {"2": lp(":", -0.1, 1)},
               {"7": lp("\nH", -2.0, 3), "8": lp("\n", -0.5, 1), "9": lp(" ", -1.0, 2)},
               {"11": lp("i", -0.2, 1)},
               {"12": lp(" there", -4.0, 9), "13": lp(" the", -0.3, 1),
                "14": lp("!", -0.9, 2)}]

    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        assert body["prompt"] == prompt + answer
        return 200, {"choices": [{"index": 0, "text": "", "prompt_logprobs": entries}]}

    with CompletionsServer(reply) as server:
        [trace] = run(compat(server, k=2), [ScoreItem(answer=answer)])
    assert trace.error is None
    got = [(s.token, s.start, s.end, s.logprob, s.rank) for s in trace.steps]
    assert got == [("\nH", 0, 1, -2.0, 3), ("i", 1, 2, -0.2, 1), (" there", 2, 8, -4.0, 9)]
    assert [(t.token, t.logprob) for t in trace.steps[0].top] == [("\n", -0.5), (" ", -1.0)]
    assert [t.token for t in trace.steps[2].top] == [" the", "!"]


def test_server_without_prompt_logprobs_gives_an_honest_error() -> None:
    plain = {"choices": [{"index": 0, "text": " yes", "logprobs": None}]}
    with CompletionsServer(lambda body: (200, plain)) as server:
        [trace] = run(compat(server), [ITEMS[0]])
    assert trace.error == NO_PROMPT_LOGPROBS and trace.steps == []


def test_server_rejecting_prompt_logprobs_gives_an_honest_error() -> None:
    refusal = {"error": {"message": "Requested prompt logprobs of 50, which is greater than "
                                    "max allowed: 20"}}
    with CompletionsServer(lambda body: (400, refusal)) as server:
        [trace] = run(compat(server, k=50), [ITEMS[0]])
    assert trace.error is not None and trace.error.startswith(NO_PROMPT_LOGPROBS)
    assert "--max-logprobs 50" in trace.error and len(server.bodies) == 1


def test_server_errors_are_retried_then_reported(tiny_models: dict[str, Path]) -> None:
    good = vllm_reply(tiny_models["gpt2"])
    answers = iter([(503, {"error": "busy"}), (429, {"error": "slow down"})])

    def flaky(body: dict[str, Any]) -> tuple[int, Any]:
        return next(answers, None) or good(body)

    with CompletionsServer(flaky) as server:
        [trace] = run(compat(server, max_retries=2), [ITEMS[2]])
    assert trace.error is None and trace.steps and len(server.bodies) == 3
    with CompletionsServer(lambda body: (500, {"error": "down"})) as server:
        [trace] = run(compat(server, max_retries=1), [ITEMS[2]])
    assert "HTTP 500" in (trace.error or "") and len(server.bodies) == 2


def test_api_key_is_sent_and_never_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RISK_TEST_KEY", "sk-secret-123")
    with CompletionsServer(lambda body: (401, {"error": "bad key"})) as server:
        scorer = make_scorer(f"vllm:tiny@{server.base_url}?key_env=RISK_TEST_KEY",
                             RiskSettings(top_k=3))
        [trace] = run(scorer, [ITEMS[0]])
    assert server.headers[0]["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in (trace.error or "") and "sk-secret" not in repr(scorer)
    assert "RISK_TEST_KEY" in (trace.error or "") and "sk-secret" not in scorer.id
    monkeypatch.delenv("RISK_TEST_KEY")
    with pytest.raises(ConfigError, match="RISK_TEST_KEY"):
        run(scorer, [ITEMS[0]])


def test_openai_compatible_specs() -> None:
    scorer = make_scorer("openai-compatible:org/model@http://gpu:8000/v1/", RiskSettings())
    assert isinstance(scorer, OpenAICompatScorer)
    assert scorer.id == "openai-compatible:org/model@http://gpu:8000/v1" and scorer.k == 50
    assert make_scorer("vllm:m", RiskSettings()).url == "http://localhost:8000/v1/completions"
    with pytest.raises(ConfigError, match="needs a base URL"):
        make_scorer("openai-compatible:m", RiskSettings())


def test_empty_answer_is_not_sent_to_the_server() -> None:
    with CompletionsServer(lambda body: (500, {})) as server:
        [trace] = run(compat(server), [ScoreItem(answer=" ")])
    assert trace.error == EMPTY_ANSWER and server.bodies == []


def test_unknown_model_is_reported_as_such() -> None:
    missing = {"error": {"message": "The model `tiny` does not exist."}}
    with CompletionsServer(lambda body: (404, missing)) as server:
        [trace] = run(compat(server), [ITEMS[0]])
    assert "check the model name 'tiny'" in (trace.error or "")
    assert NO_PROMPT_LOGPROBS not in (trace.error or "") and len(server.bodies) == 1


def test_an_oversized_scorer_reply_is_an_error_not_a_memory_spike() -> None:
    big = {"choices": [{"index": 0, "text": "", "prompt_logprobs": None}], "pad": "x" * 300_000}
    with CompletionsServer(lambda body: (200, big)) as server:
        [trace] = run(compat(server, max_reply_bytes=100_000, max_retries=3), [ITEMS[0]])
    assert trace.steps == [] and "max_reply_bytes" in (trace.error or "")
    assert len(server.bodies) == 1  # not retried: the same request gets the same reply
