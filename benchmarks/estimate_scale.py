"""A written estimate, from measured per-item costs, of two big jobs on N machines
(issue 19): embedding all of PubMed (36M abstracts) into a KB, and judging SourceCheckup's
58k statement-source pairs.

Nothing here is timed: it reads the committed benchmark results and measures only the
sizes it needs (token counts, with the MiniLM tokenizer):

- abstract length: Check-COVID's 347 CORD-19 abstracts (title + abstract) from
  ``../shared/data/retrieval/checkcovid/corpus.jsonl``, as the stand-in for a PubMed
  abstract (they are biomedical abstracts; PubMed's mean length was not measured here);
- CPU encoder cost per core: ``executor_ingest.json``'s warm one-worker Ray ingest (one
  task at a time on one core, one torch thread: the cleanest per-core number), in tokens
  per second from the slice's windows and their mean length (``ingest_speed.json``, the
  same MedQuAD slice at ``--step 40``); int8 scaled by the encoder's int8/fp32 forward
  ratio measured in ``ingest_speed.json``;
- GPU encoder cost: ``encoder_device_h200.json`` (MiniLM shapes, fp16, batch 1024, H200);
- Ray efficiency: ``executor_ingest.json`` (two workers warm vs twice one worker, and vs
  the warm local runs on the same machine);
- one writer: ``kb_scale.json`` ``ingest_slice`` (the real ingest path with a free
  embedder: what the process that stores the KB sustains, single SQLite writer);
- built-in judge cost: ``verifier_speed.json`` (pairs/s on 2 threads, fp32 and int8);
- LLM judge input: the judge prompt (``prompts/judge/v1.md``) + claim + passages, passages
  from ``audit_tokens.json`` (selected passages per pair), counted with MiniLM's tokenizer
  (a stand-in for the LLM's).

Prices are assumptions, not measurements (``--cpu-core-hour``, ``--gpu-hour``,
``--llm-input-per-m``): pass yours.

    .venv/bin/python benchmarks/estimate_scale.py

Writes benchmarks/results/estimate_scale.json and estimate_scale.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ABSTRACTS = data_dir() / "retrieval" / "checkcovid" / "corpus.jsonl"
JUDGE_PROMPT = ROOT / "src" / "medverify" / "prompts" / "judge" / "v1.md"

PUBMED = 36_000_000
PAIRS = 58_000
MACHINES = (1, 4, 16, 64)


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text("utf-8"))  # type: ignore[no-any-return]


def abstract_sizes() -> dict[str, float]:
    from medverify.kb.embed import minilm

    embedder = minilm("fp32", "cpu")
    rows = [json.loads(line) for line in ABSTRACTS.read_text("utf-8").splitlines() if line]
    texts = [f"{r.get('title') or ''}\n{r['text']}" for r in rows]
    windows = embedder.forward_throughput_input(texts)
    tokens = sum(len(w) for w in windows)
    return {"sample_abstracts": len(texts), "windows_per_abstract": len(windows) / len(texts),
            "tokens_per_abstract": tokens / len(texts)}


def prompt_tokens() -> int:
    from medverify.kb.embed import minilm

    return len(minilm("fp32", "cpu").tokenizer.offsets(JUDGE_PROMPT.read_text("utf-8")))


def judge_pairs(args: argparse.Namespace, efficiency: float) -> tuple[dict[str, Any], int]:
    """Judging :data:`PAIRS` claim-passage pairs: the built-in verifier on CPU machines and
    an LLM judge by input tokens; also the judge prompt's own tokens."""
    verifier = load("verifier_speed")
    judge: dict[str, Any] = {"pairs": PAIRS, "rows": []}
    for precision in ("float32", "int8"):
        run = verifier["runs"]["4"][f"{precision}_real_le256"]
        core_s = verifier["threads"] / run["pairs_per_s"]
        core_h = PAIRS * core_s / 3600
        for n in MACHINES[:3]:
            judge["rows"].append({
                "what": f"built-in verifier {precision}", "machines": n, "core_hours": core_h,
                "wall_h": core_h / (n * args.cores * efficiency),
                "cost_usd": core_h / efficiency * args.cpu_core_hour})
    audit = load("audit_tokens")
    passages = {run["dataset"]: run["all_pairs"] for run in audit["runs"]
                if run["pairing"] != "cited"}
    template = prompt_tokens()
    for name, row in passages.items():
        per_pair = template + row["selected_tokens_mean"]
        judge["rows"].append({"what": f"LLM judge, passages like {name}", "machines": None,
                              "input_tokens_per_pair": per_pair,
                              "input_tokens_total": PAIRS * per_pair,
                              "cost_usd": PAIRS * per_pair / 1e6 * args.llm_input_per_m})
    return judge, template


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=16, help="CPU cores per machine")
    parser.add_argument("--cpu-core-hour", type=float, default=0.04,
                        help="assumed USD per CPU core-hour (not measured)")
    parser.add_argument("--gpu-hour", type=float, default=4.0,
                        help="assumed USD per H200-hour (not measured)")
    parser.add_argument("--llm-input-per-m", type=float, default=0.15,
                        help="assumed USD per million LLM input tokens (not measured)")
    args = parser.parse_args()

    speed = load("ingest_speed")["speed"]
    window_tokens = speed["window_tokens_mean"]
    windows_per_chunk = speed["windows"] / speed["chunks"]
    executor = load("executor_ingest")
    if executor["step"] != speed["step"]:
        raise SystemExit("executor_ingest.json and ingest_speed.json must use the same --step")
    by = {(r["config"], str(r["pass"])): r for r in executor["runs"]}
    one_core = by[("ray-1", "warm")]["chunks_per_s"] * windows_per_chunk * window_tokens
    int8_ratio = speed["chunks_per_s"]["forward_int8"] / speed["chunks_per_s"]["forward_fp32"]
    cpu_tokens_per_core_s = {"fp32": one_core, "int8": one_core * int8_ratio}
    gpu = next(r for r in load("encoder_device_h200")["rows"]
               if r["device"] == "cuda" and r["dtype"] == "fp16" and r["batch"] == 1024)
    gpu_tokens_per_s = gpu["forward_per_s"] * gpu["mean_tokens"]
    warm_local = [r["chunks_per_s"] for r in executor["runs"]
                  if r["config"] == "local" and str(r["pass"]).startswith("after")]
    local_rate = sum(warm_local) / len(warm_local)
    ray2 = by[("ray-2", "warm")]["chunks_per_s"]
    ray1 = by[("ray-1", "warm")]["chunks_per_s"]
    efficiency = min(1.0, ray2 / (2 * ray1))  # 2 workers vs twice one, same machine
    writer_rate = load("kb_scale")["ingest_slice"]["passages_per_s"]
    sizes = abstract_sizes()

    tokens_total = PUBMED * sizes["tokens_per_abstract"]
    embed: dict[str, Any] = {"abstracts": PUBMED, **sizes, "tokens_total": tokens_total,
                             "int8_over_fp32": int8_ratio,
                             "cpu_tokens_per_core_s": cpu_tokens_per_core_s,
                             "gpu_tokens_per_s": gpu_tokens_per_s,
                             "ray_2_worker_efficiency": efficiency,
                             "ray_2_over_local": ray2 / local_rate,
                             "writer_chunks_per_s": writer_rate,
                             "writer_bound_h": PUBMED / writer_rate / 3600, "rows": []}
    for precision in ("fp32", "int8"):
        core_h = tokens_total / cpu_tokens_per_core_s[precision] / 3600
        for n in MACHINES:
            encode_h = core_h / (n * args.cores * efficiency)
            embed["rows"].append({
                "what": f"CPU {precision}", "machines": n, "core_hours": core_h,
                "encode_wall_h": encode_h, "wall_h": max(encode_h, embed["writer_bound_h"]),
                "cost_usd": core_h / efficiency * args.cpu_core_hour})
    gpu_h = tokens_total / gpu_tokens_per_s / 3600
    for n in MACHINES[:3]:
        embed["rows"].append({"what": "H200 fp16", "machines": n, "gpu_hours": gpu_h,
                              "encode_wall_h": gpu_h / n,
                              "wall_h": max(gpu_h / n, embed["writer_bound_h"]),
                              "cost_usd": gpu_h * args.gpu_hour})

    judge, template = judge_pairs(args, efficiency)
    out = {"assumed_prices": {"cpu_core_hour": args.cpu_core_hour, "gpu_hour": args.gpu_hour,
                              "llm_input_per_m": args.llm_input_per_m},
           "cores_per_machine": args.cores, "judge_prompt_tokens": template,
           "embed_pubmed": embed, "judge_pairs": judge}
    (RESULTS / "estimate_scale.json").write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    (RESULTS / "estimate_scale.md").write_text(render(out), "utf-8")
    print(render(out))


def _h(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def render(out: dict[str, Any]) -> str:
    embed, judge, prices = out["embed_pubmed"], out["judge_pairs"], out["assumed_prices"]
    lines = [
        "# Estimate: all of PubMed into a KB, and SourceCheckup's 58k pairs judged",
        "",
        "`python benchmarks/estimate_scale.py`: computed from committed benchmark results "
        "(nothing timed here); prices are assumptions "
        f"(${prices['cpu_core_hour']}/core-hour, ${prices['gpu_hour']}/H200-hour, "
        f"${prices['llm_input_per_m']}/M LLM input tokens). Machines of "
        f"{out['cores_per_machine']} cores.",
        "",
        f"## Embedding {embed['abstracts']:,} abstracts (all-MiniLM-L6-v2)",
        "",
        f"- Abstract size (Check-COVID's {embed['sample_abstracts']:,}-abstract stand-in: "
        f"{embed['tokens_per_abstract']:.0f} tokens, {embed['windows_per_abstract']:.2f} "
        f"windows per abstract) → {embed['tokens_total'] / 1e9:.1f} G tokens.",
        f"- Encoder cost: CPU fp32 {embed['cpu_tokens_per_core_s']['fp32']:.0f} tokens per "
        "core-second (one Ray worker, one core, warm), int8 "
        f"{embed['cpu_tokens_per_core_s']['int8']:.0f} (x{embed['int8_over_fp32']:.2f}, the "
        "encoder's measured int8 speed-up; int8 is opt-in: recall@5 -0.014 on Check-COVID "
        f"dev); H200 fp16 {embed['gpu_tokens_per_s'] / 1e6:.2f} M tokens/s (MiniLM shapes, "
        "batch 1024).",
        f"- Ray: 2 workers give {embed['ray_2_worker_efficiency']:.2f} of twice one worker "
        f"(assumed to hold per core across machines), {embed['ray_2_over_local']:.2f}x the "
        "warm local path (one process, torch on both cores) on the same 2 cores.",
        f"- One writer: the process storing the KB sustains {embed['writer_chunks_per_s']:.0f} "
        f"chunks/s (SQLite, FTS5, terms; embedding free), so one KB takes at least "
        f"**{_h(embed['writer_bound_h'])}** whatever the workers.",
        "",
        "| encoder | machines | compute | encoding wall | wall with one writer | cost |",
        "|---|---|---|---|---|---|",
    ]
    for row in embed["rows"]:
        compute = (f"{row['core_hours']:,.0f} core-h" if "core_hours" in row
                   else f"{row['gpu_hours']:.1f} GPU-h")
        lines.append(f"| {row['what']} | {row['machines']} | {compute} | "
                     f"{_h(row['encode_wall_h'])} | {_h(row['wall_h'])} | "
                     f"${row['cost_usd']:,.0f} |")
    lines += [
        "",
        f"## Judging {judge['pairs']:,} statement-source pairs",
        "",
        "| judge | machines | compute | wall | cost |",
        "|---|---|---|---|---|",
    ]
    for row in judge["rows"]:
        if row["machines"] is None:
            lines.append(f"| {row['what']} | API | {row['input_tokens_per_pair']:.0f} input "
                         f"tokens/pair, {row['input_tokens_total'] / 1e6:.1f} M in all | "
                         "rate limits | "
                         f"${row['cost_usd']:,.2f} (input only) |")
        else:
            lines.append(f"| {row['what']} | {row['machines']} | "
                         f"{row['core_hours']:.2f} core-h | {_h(row['wall_h'])} | "
                         f"${row['cost_usd']:.2f} |")
    lines += [
        "",
        "The built-in verifier's cost is per pair at the inputs it was timed on (claim + "
        "passage, mean 198 tokens, at most 256); a SourceCheckup page gives 3 selected "
        "passages per pair, so up to 3x that. The LLM rows count input tokens (prompt "
        "template + claim + selected passages, MiniLM tokens as a stand-in for the model's "
        "tokenizer), not output tokens; their wall time is set by the provider's rate limits: "
        "58k pairs x latency / concurrent requests (e.g. 2 s and 32 at once: about 1 h).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
