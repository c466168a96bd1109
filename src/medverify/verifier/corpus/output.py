"""What a corpus build hands out: count tables of the pairs (dict and markdown) and the pairs
as gzip JSON lines (written atomically and byte-reproducibly, read back)."""

from __future__ import annotations

import gzip
import io
import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from medverify.verifier.corpus.records import CorpusPair


def count_table(pairs: Iterable[CorpusPair]) -> dict[str, dict]:
    """Counts per label, per generator/edit type (with label), per source, per source x label."""
    pairs = list(pairs)
    by_type: Counter[str] = Counter(f"{p.generator}/{p.edit_type}" for p in pairs)
    by_source: Counter[str] = Counter(p.source for p in pairs)
    by_source_label: Counter[str] = Counter(f"{p.source}/{p.label}" for p in pairs)
    return {
        "by_label": dict(sorted(Counter(p.label for p in pairs).items())),
        "by_edit_type": dict(sorted(by_type.items())),
        "by_source": dict(sorted(by_source.items())),
        "by_source_label": dict(sorted(by_source_label.items())),
        "groups": {"n": len({p.group for p in pairs})},
    }


def format_count_table(report: dict) -> str:
    """The count table of a build report as markdown."""
    lines = ["| family / edit type | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_edit_type"].items()]
    lines += ["", "| label | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_label"].items()]
    lines += ["", "| source | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_source"].items()]
    return "\n".join(lines)


def write_jsonl_gz(pairs: Iterable[CorpusPair], out: Path) -> None:
    """Write pairs as gzip JSON lines, atomically (temporary file in the folder, then rename).

    The gzip header carries no name or time, so equal pairs give byte-identical files.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as zipped,
            io.TextIOWrapper(zipped, encoding="utf-8") as handle,
        ):
            for pair in pairs:
                handle.write(json.dumps(pair.to_dict(), ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_jsonl_gz(path: Path) -> list[CorpusPair]:
    """Pairs written by :func:`write_jsonl_gz`."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [CorpusPair(**json.loads(line)) for line in handle if line.strip()]
