"""The trials of a study: registry records curated into study trials, and the selection of
registry files (condition, posted results, a seeded sample) a study runs on, reusing the
trials a run directory stored when its selection is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medverify.errors import InputError
from medverify.files import read_records
from medverify.study.questions import record_sha256
from medverify.study.records import TRIALS, StudyTrial, read_manifest
from medverify.trials.curate import curate
from medverify.trials.reader import ReadReport

MAX_UNSAMPLED = 5_000  # a study of more trials than this needs an explicit --sample


def study_trials(studies: Sequence[Any]) -> list[StudyTrial]:
    """Study trials from registry records (dicts or ``trials.reader.Study`` objects):
    curated here. Records without an NCT id are refused (InputError); a repeated NCT id
    keeps its first record."""
    trials: list[StudyTrial] = []
    seen: set[str] = set()
    for item in studies:
        data = getattr(item, "data", item)
        if not isinstance(data, dict):
            raise InputError(f"not a registry record: {type(data).__name__}")
        summary = curate(data)
        if not summary.nct_id:
            raise InputError("a registry record without protocolSection.identificationModule"
                             ".nctId cannot be part of a study")
        if summary.nct_id in seen:
            continue
        seen.add(summary.nct_id)
        trials.append(StudyTrial(nct_id=summary.nct_id, title=summary.title,
                                 source=str(getattr(item, "source", "") or ""),
                                 record_sha256=record_sha256(data), record=data,
                                 summary=summary))
    return trials


def select_trials(paths: Sequence[Path], *, condition: str | None = None,
                  results_only: bool = True, sample: int | None = None, seed: int = 0,
                  run_dir: Path | None = None) -> tuple[list[StudyTrial], dict[str, Any],
                                                        ReadReport | None]:
    """The trials of a study from registry files (JSON, JSONL, directories, bulk zips),
    selected as ``kb ingest --format ctgov`` selects them, with the selection as recorded
    in the manifest and the reader's report. When ``run_dir`` is a study made with the
    same selection, its stored trials are used and nothing is read (report None): a
    resumed study over the 520k-record bulk zip does not read the zip again."""
    from medverify.trials.curate import matches, select_studies
    from medverify.trials.reader import iter_studies

    selection: dict[str, Any] = {
        "paths": [str(p) for p in paths], "condition": condition,
        "results_only": results_only, "sample": sample, "seed": seed}
    if run_dir is not None:
        manifest = read_manifest(run_dir)
        stored = run_dir / TRIALS
        if manifest is not None and manifest.selection == selection and stored.is_file():
            trials = read_records(stored, StudyTrial, key=lambda t: t.nct_id, repair=False)
            if [t.nct_id for t in trials] == manifest.trials:
                return trials, selection, None
    report = ReadReport()
    studies = iter_studies([Path(p) for p in paths], report=report)
    results = True if results_only else None
    if sample is not None:
        chosen = select_studies(studies, condition=condition, results_posted=results,
                                n=sample, seed=seed)
    else:
        chosen = []
        for study in studies:
            if matches(study.data, condition, results):
                chosen.append(study)
                if len(chosen) > MAX_UNSAMPLED:
                    raise InputError(
                        f"more than {MAX_UNSAMPLED:,} registry records match the selection: "
                        "draw a sample (--sample N) for a study")
    return study_trials(chosen), selection, report
