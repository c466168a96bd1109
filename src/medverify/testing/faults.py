"""Kill -9 and resume: run a ``medverify`` command in a subprocess, SIGKILL it at seeded
points, rerun it to completion, and compare what it left with a clean run's outputs.

>>> chain = run_killed(["kb", "ingest", "docs", "--kb", "kb"], env=cli_env(home),
...                    cwd=work, points=[40, 120, 300], progress=documents_in_kb)
>>> chain.kills            # how many runs were really killed mid-way
>>> compare_records(clean, resumed, key=lambda r: r["id"], drop=VOLATILE)

A kill point is a level of ``progress()`` (records in an output file, rows in a store,
requests a local fake model server received, or seconds since the start): the process is
killed as soon as progress reaches it, which the harness polls every few milliseconds.
Points are drawn from a seeded RNG (:func:`kill_points`), so a failing case can be rerun.

The comparator works on JSON-like data: :func:`normalise` drops the fields that
legitimately differ between runs (run ids, timestamps, durations, token usage that a
cache hit does not pay for) and rewrites the paths of a run's own workspace, then
:func:`compare_records` matches records by key and counts lost, duplicated, extra and
differing ones, with the first difference of each for the assertion message.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VOLATILE: frozenset[str] = frozenset({
    "run_id", "created_at", "finished_at", "started_at", "added_at", "wall_s", "seconds",
    "latency_s", "elapsed_s", "duration_s", "fetched_at", "from_cache", "usage", "cached",
})
"""Fields that differ between two runs of the same work by design: identity and time of
the run, whether a reply or page came from a cache and the tokens it cost (a reply
served by the cache costs none)."""

POLL_S = 0.005


@dataclass(frozen=True)
class Invocation:
    """One subprocess run of the CLI."""

    args: tuple[str, ...]
    returncode: int
    killed: bool  # SIGKILLed by the harness before it finished on its own
    seconds: float
    progress_at_kill: float | None
    stdout: str
    stderr: str

    def describe(self) -> str:
        what = f"killed at progress {self.progress_at_kill}" if self.killed else \
            f"exit {self.returncode}"
        return f"medverify {' '.join(self.args)}: {what} after {self.seconds:.2f}s\n" \
               f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


@dataclass
class KillChain:
    """Runs of one command killed at increasing points, then one run to completion."""

    attempts: list[Invocation] = field(default_factory=list)
    final: Invocation | None = None

    @property
    def kills(self) -> int:
        return sum(a.killed for a in self.attempts)

    @property
    def finished_early(self) -> int:
        """Attempts that finished before their kill point was reached."""
        return sum(not a.killed for a in self.attempts)


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: this one's, with its own ``MEDVERIFY_HOME``,
    no other ``MEDVERIFY_*`` settings, nothing downloaded, wide terminal tables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDVERIFY_")}
    env.update({"MEDVERIFY_HOME": str(home), "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200", "PYTHONHASHSEED": "0"})
    env.update(extra)
    return env


def kill_points(seed: int, n: int, low: float, high: float, *,
                integer: bool = True) -> list[float]:
    """``n`` distinct increasing kill points in ``[low, high)``, drawn from ``seed``."""
    rng = random.Random(seed)
    if integer:
        lo, hi = int(low), max(int(high), int(low) + n)
        return [float(p) for p in sorted(rng.sample(range(lo, hi), n))]
    return sorted(rng.uniform(low, high) for _ in range(n))


def run_cli(args: Sequence[str], *, env: Mapping[str, str], cwd: Path,
            stdin: bytes | None = None, timeout: float = 120.0,
            kill_when: Callable[[float], float | None] | None = None) -> Invocation:
    """Run ``python -m medverify ARGS``; with ``kill_when``, SIGKILL it (and its process
    group) as soon as ``kill_when(seconds since start)`` returns a progress value (not
    None). Output goes to files, so a chatty process never blocks on a full pipe."""
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / ".fault-stdout", cwd / ".fault-stderr"
    started = time.monotonic()
    progress: float | None = None
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "medverify", *args], cwd=cwd, env=dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out, stderr=err, start_new_session=True)
        try:
            if stdin is not None:
                assert proc.stdin is not None
                proc.stdin.write(stdin)
                proc.stdin.close()
            progress = _watch(proc, started, timeout, kill_when)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                _kill(proc)
                proc.wait()
    return Invocation(args=tuple(args), returncode=proc.returncode,
                      killed=progress is not None, seconds=time.monotonic() - started,
                      progress_at_kill=progress,
                      stdout=out_path.read_text("utf-8", "replace"),
                      stderr=err_path.read_text("utf-8", "replace"))


def _watch(proc: subprocess.Popen[bytes], started: float, timeout: float,
           kill_when: Callable[[float], float | None] | None) -> float | None:
    """Poll until the process ends (None) or ``kill_when`` fires (the progress it saw)."""
    while proc.poll() is None:
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            _kill(proc)
            proc.wait()
            raise TimeoutError(f"medverify {' '.join(map(str, proc.args))} ran over "
                               f"{timeout:.0f}s")
        if kill_when is not None:
            seen = kill_when(elapsed)
            if seen is not None and proc.poll() is None:
                _kill(proc)
                return seen
        time.sleep(POLL_S)
    return None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def at_progress(progress: Callable[[], float], point: float) -> Callable[[float], float | None]:
    """A ``kill_when`` that fires once ``progress()`` reaches ``point``."""

    def fire(_elapsed: float) -> float | None:
        seen = progress()
        return seen if seen >= point else None

    return fire


def after_seconds(point: float) -> Callable[[float], float | None]:
    """A ``kill_when`` that fires ``point`` seconds after the start."""
    return lambda elapsed: round(elapsed, 3) if elapsed >= point else None


def run_killed(args: Sequence[str], *, env: Mapping[str, str], cwd: Path,
               points: Iterable[float], progress: Callable[[], float] | None = None,
               stdin: bytes | None = None, timeout: float = 120.0,
               ok: Collection[int] = (0,)) -> KillChain:
    """Run ``args`` once per kill point, each killed when ``progress()`` reaches the point
    (seconds since its start when ``progress`` is None), then once more to completion.
    Every run resumes what the earlier ones left. Raises AssertionError when a run that
    was not killed exits with a status outside ``ok``."""
    chain = KillChain()
    for point in points:
        trigger = after_seconds(point) if progress is None else at_progress(progress, point)
        attempt = run_cli(args, env=env, cwd=cwd, stdin=stdin, timeout=timeout,
                          kill_when=trigger)
        if not attempt.killed and attempt.returncode not in ok:
            raise AssertionError("a rerun after a kill failed:\n" + attempt.describe())
        chain.attempts.append(attempt)
    chain.final = run_cli(args, env=env, cwd=cwd, stdin=stdin, timeout=timeout)
    if chain.final.returncode not in ok:
        raise AssertionError("the final rerun failed:\n" + chain.final.describe())
    return chain


# -- comparing outputs ---------------------------------------------------------------------


def normalise(value: Any, *, drop: Collection[str] = VOLATILE,
              replace: Mapping[str, str] | None = None) -> Any:
    """``value`` (JSON-like) without the keys in ``drop`` (at any depth), with every
    ``replace`` key in strings (e.g. a run's workspace path) rewritten."""
    replace = replace or {}
    if isinstance(value, Mapping):
        return {str(k): normalise(v, drop=drop, replace=replace)
                for k, v in value.items() if k not in drop}
    if isinstance(value, list | tuple):
        return [normalise(v, drop=drop, replace=replace) for v in value]
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
        return value
    return value


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    """Where two JSON-like values first differ (a JSON path and both values), or None."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'second' if key not in a else 'first'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if a != b:
        return f"{path}: {_short(a)} != {_short(b)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


@dataclass
class RecordComparison:
    """Records of a resumed run matched by key against a clean run's."""

    compared: int = 0
    lost: list[Hashable] = field(default_factory=list)
    duplicated: list[Hashable] = field(default_factory=list)
    extra: list[Hashable] = field(default_factory=list)
    differing: dict[Hashable, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.extra or self.differing)

    def __str__(self) -> str:
        diffs = "; ".join(f"{k}: {d}" for k, d in list(self.differing.items())[:5])
        return (f"{self.compared} compared, lost {self.lost[:10]}, duplicated "
                f"{self.duplicated[:10]}, extra {self.extra[:10]}, "
                f"{len(self.differing)} differing: {diffs}")


def compare_records(clean: Sequence[Any], resumed: Sequence[Any],
                    key: Callable[[Any], Hashable], *, drop: Collection[str] = VOLATILE,
                    replace_clean: Mapping[str, str] | None = None,
                    replace_resumed: Mapping[str, str] | None = None) -> RecordComparison:
    """Match ``resumed`` records to ``clean`` ones by ``key`` and compare them normalised.
    The clean records must have unique keys (ValueError otherwise)."""
    clean_keys = Counter(key(r) for r in clean)
    if any(n > 1 for n in clean_keys.values()):
        raise ValueError(f"the clean run has duplicated keys: "
                         f"{[k for k, n in clean_keys.items() if n > 1][:10]}")
    by_key = {key(r): normalise(r, drop=drop, replace=replace_clean) for r in clean}
    counts = Counter(key(r) for r in resumed)
    result = RecordComparison(
        duplicated=[k for k, n in counts.items() if n > 1],
        lost=[k for k in by_key if k not in counts],
        extra=[k for k in counts if k not in by_key],
    )
    for record in resumed:
        k = key(record)
        if k not in by_key:
            continue
        result.compared += 1
        diff = first_difference(by_key[k], normalise(record, drop=drop,
                                                     replace=replace_resumed))
        if diff:
            result.differing[k] = diff
    return result


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file as a dict (blank lines skipped; a bad line raises)."""
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
