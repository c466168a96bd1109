"""What the parts of ``bench_service.py`` share: the machine, load averages, latency
percentiles, a client key, the one-claim answers, the sample KB, CPU seconds of a
process group, and the words of the report."""

from __future__ import annotations

import contextlib
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from medverify.kb import KnowledgeBase, iter_documents, sample_kb_path
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TERMINAL = ("done", "failed", "cancelled")
UNLIMITED = {"MEDVERIFY_SERVICE__RATE_PER_MINUTE": "100000000",
             "MEDVERIFY_SERVICE__RATE_BURST": "100000000"}
"""The per-key rate limit raised out of the way: the benchmark measures the checks."""

DRUGS = ["Metformin", "Aspirin", "Insulin", "Lisinopril", "Atorvastatin", "Warfarin",
         "Ibuprofen", "Amoxicillin", "Omeprazole", "Levothyroxine"]




def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform()}


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "p99_ms": float("nan")}
    ms = np.asarray(seconds) * 1000.0
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99)}


def client_key(store: Path) -> str:
    with RunStore(store) as runs:
        return KeyStore(runs).create("bench client", Role.CLIENT).secret


def one_claim_answer(n: int) -> dict[str, str]:
    """A one-sentence answer (one claim with the rules decomposer), new for every ``n``."""
    drug = DRUGS[n % len(DRUGS)]
    return {"question": f"What is {drug} used for?",
            "text": f"{drug} is a first-line medicine in treatment plan number {n}."}


def sample_kb(path: Path) -> dict[str, Any]:
    """A hash-embedder KB of the shipped sample (built once per run of this script)."""
    if not path.exists():
        with KnowledgeBase.create(path, embedder="hash") as kb:
            kb.ingest(iter_documents([sample_kb_path()]))
    with KnowledgeBase.open(path) as kb:
        stats = kb.stats()
        return {"source": sample_kb_path().name, "embedder": kb.embedder_id,
                "documents": stats.documents, "chunks": stats.chunks}


def process_cpu_s(pid: int, *, group: bool = True) -> float:
    """CPU seconds (user + system) of process ``pid`` or, with ``group``, of every live
    process in the process group it leads (Linux /proc; 0.0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    entries = Path("/proc").iterdir() if group else [Path(f"/proc/{pid}")]
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields from the state on: [2] is the process group, [11] and [12] utime, stime
        if not group or int(fields[2]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def met_word(met: bool) -> str:
    return "**met**" if met else "**missed**"


def verdict(section: dict[str, Any]) -> str:
    return met_word(bool(section.get("met")))
