"""Synthetic ClinicalTrials.gov API v2 study records, for scale tests.

:func:`synthetic_studies` recombines the modules of real sample records: each synthetic
study takes its design (``designModule``, ``armsInterventionsModule``,
``outcomesModule``, ``statusModule``, ``resultsSection``, ``documentSection``,
``hasResults`` and ``interventionBrowseModule``, which must agree with each other) from
one sample, and each of its conditions (``conditionsModule`` with
``conditionBrowseModule``), description, eligibility, locations, sponsor/oversight,
references and identification modules from a sample drawn independently. The enrolment
count is rescaled and the titles get a short synthetic suffix so records differ.

Marking: a synthetic record has an NCT id ``NCT9xxxxxxx`` (``NCT9`` then 7 digits; real
ids start with ``NCT0``) and ``derivedSection.miscInfoModule.versionHolder`` set to
``"synthetic:<seed>:<index>"`` (real records hold a date there). Nothing is added at the
top level, so the reader sees no unknown field. :func:`is_synthetic` checks both.

With ``variants=True`` each record is then varied (:mod:`medverify.trials.synthetic_variants`:
every overall status with estimated, anticipated and untyped dates, markdown escapes, long
lists, many serious adverse events with ties, baseline characteristics), with a generator of
its own, so the records without variants stay the same.

Output is deterministic for a seed and the same samples, and streamed: one record is
built at a time; each yielded dict is new (parsed from its own JSON text), so changing it
does not touch the samples or other records. :func:`write_bulk_zip` writes records as a
zip like the registry's bulk download (``NCT########.json`` members, deflated).
"""

from __future__ import annotations

import copy
import json
import os
import random
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from medverify.errors import ConfigError
from medverify.files import data_dir
from medverify.trials.reader import iter_studies
from medverify.trials.synthetic_variants import vary

__all__ = [
    "SAMPLES_ENV",
    "default_samples_dir",
    "is_synthetic",
    "load_samples",
    "synthetic_studies",
    "synthetic_texts",
    "write_bulk_zip",
]

SAMPLES_ENV = "MEDVERIFY_TRIALS_SAMPLES"
_DESIGN = (
    "statusModule",
    "designModule",
    "armsInterventionsModule",
    "outcomesModule",
)
_DESIGN_TOP = ("resultsSection", "documentSection", "hasResults")
_MIXED = (
    ("identificationModule",),
    ("conditionsModule",),  # with derivedSection.conditionBrowseModule
    ("descriptionModule",),
    ("eligibilityModule",),
    ("contactsLocationsModule",),
    ("sponsorCollaboratorsModule", "oversightModule"),
    ("referencesModule", "ipdSharingStatementModule"),
)
_PROTOCOL_ORDER = (
    "identificationModule",
    "statusModule",
    "sponsorCollaboratorsModule",
    "oversightModule",
    "descriptionModule",
    "conditionsModule",
    "designModule",
    "armsInterventionsModule",
    "outcomesModule",
    "eligibilityModule",
    "contactsLocationsModule",
    "referencesModule",
    "ipdSharingStatementModule",
)
_ID_SPACE = 10_000_000  # NCT9 + 7 digits


def default_samples_dir() -> Path:
    """Where sample records are read from by default: ``$MEDVERIFY_TRIALS_SAMPLES``, else
    ``raw/clinicaltrials`` in the data folder (:func:`medverify.files.data_dir`:
    ``$MEDVERIFY_DATA``, else ``../shared/data`` beside the source checkout)."""
    env = os.environ.get(SAMPLES_ENV)
    if env:
        return Path(env)
    return data_dir() / "raw" / "clinicaltrials"


def load_samples(
    samples: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """The sample records: dicts as given, or read (with :func:`iter_studies`) from a
    path; ``None``: :func:`default_samples_dir`."""
    if samples is None:
        samples = default_samples_dir()
    if isinstance(samples, str | os.PathLike):
        if not Path(samples).exists():
            raise ConfigError(f"no trial samples at {samples}; set {SAMPLES_ENV} or pass samples")
        loaded = [study.data for study in iter_studies(samples)]
    else:
        loaded = [dict(sample) for sample in samples]
    if not loaded:
        raise ConfigError(f"no usable trial sample records in {samples!r}")
    return loaded


def synthetic_texts(
    n: int, seed: int, samples: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
    variants: bool = False,
) -> Iterator[tuple[str, str]]:
    """``(nct_id, json_text)`` of ``n`` synthetic records (see the module docstring)."""
    pool = load_samples(samples)
    if n > _ID_SPACE:
        raise ValueError(f"at most {_ID_SPACE} synthetic records (NCT9 + 7 digits)")
    rng = random.Random(seed)
    offset = rng.randrange(_ID_SPACE)
    for index in range(n):
        nct_id = f"NCT9{(offset + index) % _ID_SPACE:07d}"
        record = _combine(pool, rng, nct_id, seed, index)
        if variants:
            record = vary(copy.deepcopy(record), random.Random(f"variants:{seed}:{index}"))
        yield nct_id, json.dumps(record, ensure_ascii=False)


def synthetic_studies(
    n: int, seed: int, samples: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
    variants: bool = False,
) -> Iterator[dict[str, Any]]:
    """``n`` synthetic registry records, one at a time, deterministic for ``seed``."""
    for _, text in synthetic_texts(n, seed, samples, variants):
        yield json.loads(text)


def write_bulk_zip(
    path: str | os.PathLike[str],
    n: int,
    seed: int,
    samples: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
    variants: bool = False,
) -> Path:
    """Write ``n`` synthetic records to a zip at ``path``, one ``NCT9xxxxxxx.json`` member
    each (deflated), like the registry's bulk download. Returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for nct_id, text in synthetic_texts(n, seed, samples, variants):
            zf.writestr(f"{nct_id}.json", text.encode("utf-8"))
    return target


def is_synthetic(record: dict[str, Any]) -> bool:
    """Whether a record was made by this module (NCT9 id and the versionHolder mark)."""
    try:
        nct_id = record["protocolSection"]["identificationModule"]["nctId"]
        holder = record["derivedSection"]["miscInfoModule"]["versionHolder"]
    except (KeyError, TypeError):
        return False
    return (
        isinstance(nct_id, str)
        and nct_id.startswith("NCT9")
        and isinstance(holder, str)
        and holder.startswith("synthetic:")
    )


def _combine(
    pool: list[dict[str, Any]], rng: random.Random, nct_id: str, seed: int, index: int
) -> dict[str, Any]:
    """One record; the parts taken from samples are shared, not copied (the caller
    serialises it at once), except the few dicts changed here, which are copied."""
    base, protocol, derived = _mix_modules(pool, rng)
    protocol["identificationModule"] = _identification(
        protocol.get("identificationModule") or {}, nct_id, seed, index)
    _vary_enrollment(protocol, rng)
    misc = dict((base.get("derivedSection") or {}).get("miscInfoModule") or {})
    misc["versionHolder"] = f"synthetic:{seed}:{index}"
    derived = {"miscInfoModule": misc, **derived}

    record: dict[str, Any] = {
        "protocolSection": {k: protocol[k] for k in _PROTOCOL_ORDER if k in protocol}
    }
    for name in _DESIGN_TOP[:2]:
        if name in base:
            record[name] = base[name]
    record["derivedSection"] = derived
    record["hasResults"] = bool(base.get("hasResults", "resultsSection" in base))
    return record


def _mix_modules(
    pool: list[dict[str, Any]], rng: random.Random
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A base sample (its design modules) and one donor sample per group of
    :data:`_MIXED`: (base, protocol modules, derived modules)."""
    base = rng.choice(pool)
    base_protocol = base["protocolSection"]
    base_derived = base.get("derivedSection") or {}
    protocol: dict[str, Any] = {}
    derived: dict[str, Any] = {}
    for name in _DESIGN:
        if name in base_protocol:
            protocol[name] = base_protocol[name]
    if "interventionBrowseModule" in base_derived:
        derived["interventionBrowseModule"] = base_derived["interventionBrowseModule"]
    for group in _MIXED:
        donor = rng.choice(pool)
        donor_protocol = donor["protocolSection"]
        for name in group:
            if name in donor_protocol:
                protocol[name] = donor_protocol[name]
        if group[0] == "conditionsModule":
            browse = (donor.get("derivedSection") or {}).get("conditionBrowseModule")
            if browse is not None:
                derived["conditionBrowseModule"] = browse
    return base, protocol, derived


def _identification(module: dict[str, Any], nct_id: str, seed: int, index: int
                    ) -> dict[str, Any]:
    """A copy of an identification module with the synthetic id, marked titles and org
    study id, and no secondary ids."""
    ident = dict(module)
    ident["nctId"] = nct_id
    suffix = f" (synthetic {index})"
    for title in ("briefTitle", "officialTitle"):
        if isinstance(ident.get(title), str):
            ident[title] = ident[title] + suffix
    org_id = ident.get("orgStudyIdInfo")
    if isinstance(org_id, dict):
        ident["orgStudyIdInfo"] = {**org_id, "id": f"SYN-{seed}-{index}"}
    ident.pop("secondaryIdInfos", None)
    return ident


def _vary_enrollment(protocol: dict[str, Any], rng: random.Random) -> None:
    """Scale a positive enrollment count by 0.5-2 (a copied design module)."""
    design = protocol.get("designModule")
    if isinstance(design, dict) and isinstance(design.get("enrollmentInfo"), dict):
        enrollment = copy.copy(design["enrollmentInfo"])
        count = enrollment.get("count")
        if isinstance(count, int) and count > 0:
            enrollment["count"] = max(1, round(count * rng.uniform(0.5, 2.0)))
        protocol["designModule"] = {**design, "enrollmentInfo": enrollment}
