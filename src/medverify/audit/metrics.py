"""SourceCheckup metrics of a citation audit, computed from records only.

Definitions (Wu et al. 2025, Methods; see ``docs/audit-metrics.md``):

- *source URL validity*: the share of cited sources with a URL that are valid
  (``Source.valid``: fetched with status 200 and non-empty text, or given with text);
- *statement-level support*: the share of claims supported by at least one source, over
  claims whose support is known (a claim whose pairs all failed is unscored, never
  unsupported);
- *response-level support*: the share of answers all of whose claims are supported, over
  answers whose support is known;
- *unused sources*: the share of valid sources that support no claim (Supplementary
  Table 10 of the paper), over valid sources whose use is known.

Every pooled share comes with a 95 % percentile-bootstrap interval from
:func:`medverify.stats.bootstrap_ci`. The resampled unit is the URL for
validity, the valid source for unused sources and the answer for response-level support.
Statement-level support resamples *answers* (a cluster bootstrap: claims of one answer
are correlated, and resampling claims as if independent gives too narrow an interval);
``cluster=False`` resamples claims instead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from medverify.audit.records import (
    AnswerAudit,
    AnswerMetrics,
    AuditMetrics,
    Estimate,
    PairJudgement,
)
from medverify.records import FetchFailure, Source
from medverify.stats import bootstrap_ci

MISSING = "(missing)"
MAX_GROUPS = 50


def claim_supported(pairs: Sequence[PairJudgement]) -> bool | None:
    """Whether a claim is supported by any of the sources it was judged against.

    True when some pair is supported; None (unknown) when none is but some pair failed;
    False otherwise, including when there is no pair at all (no valid source to check:
    unsupported, as in the paper).
    """
    verdicts = [pair.supported for pair in pairs]
    if any(v is True for v in verdicts):
        return True
    if any(v is None for v in verdicts):
        return None
    return False


def _share(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _url_sources(audit: AnswerAudit) -> list[Source]:
    return [s for s in audit.answer.sources if s.url]


def source_use(audit: AnswerAudit) -> list[bool | None]:
    """One entry per valid source: True (supports some claim), False (supports none) or
    None (supports none, but some of its pairs failed: unknown)."""
    supporting = {sid for c in audit.claims for sid in c.supporting_source_ids}
    supporting |= {p.source_id for c in audit.claims for p in c.pairs if p.supported}
    failed = {p.source_id for c in audit.claims for p in c.pairs if p.supported is None}
    return [
        True if s.id in supporting else (None if s.id in failed else False)
        for s in audit.answer.sources
        if s.valid
    ]


def _response_support(claims: Sequence[bool | None]) -> bool | None:
    if any(v is False for v in claims):
        return False
    if not claims or any(v is None for v in claims):
        return None
    return True


def answer_metrics(audit: AnswerAudit) -> AnswerMetrics:
    """The paper's metrics of one answer (shares None when undefined).

    Claim support is read from ``ClaimAudit.supported`` (set by :func:`claim_supported`).
    """
    urls = _url_sources(audit)
    n_valid = sum(1 for s in urls if s.valid)
    support = [c.supported for c in audit.claims]
    scored = [v for v in support if v is not None]
    use = [v for v in source_use(audit) if v is not None]
    n_unused = sum(1 for v in use if not v)
    return AnswerMetrics(
        n_urls=len(urls),
        n_valid_urls=n_valid,
        url_validity=_share(n_valid, len(urls)),
        n_claims=len(support),
        n_scored=len(scored),
        n_supported=sum(scored),
        statement_support=_share(sum(scored), len(scored)),
        response_support=_response_support(support),
        n_unused_sources=n_unused,
        unused_source_share=_share(n_unused, len(use)),
    )


def _finite_ci(ci: tuple[float, float]) -> tuple[float, float] | None:
    return ci if all(math.isfinite(v) for v in ci) else None


def share_estimate(flags: Sequence[bool], *, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """Share of True with a percentile-bootstrap CI that resamples the flags."""
    if not flags:
        return Estimate()
    values = np.asarray(flags, dtype=float)
    ci = bootstrap_ci(values, n=n_boot, seed=seed)
    return Estimate(value=float(values.mean()), ci=_finite_ci(ci), n=len(values))


def cluster_share_estimate(
    clusters: Sequence[tuple[int, int]], *, n_boot: int = 2000, seed: int = 0
) -> Estimate:
    """Pooled share sum(successes) / sum(trials) over clusters of (successes, trials),
    with a CI that resamples whole clusters. Clusters with no trials are dropped;
    ``n`` is the number of trials."""
    kept = np.asarray([c for c in clusters if c[1] > 0], dtype=float).reshape(-1, 2)
    if kept.size == 0:
        return Estimate()
    hits, trials = kept[:, 0], kept[:, 1]

    def pooled(index: np.ndarray) -> float:
        rows = index.astype(int)
        return float(hits[rows].sum() / trials[rows].sum())

    ci = bootstrap_ci(np.arange(len(kept), dtype=float), stat=pooled, n=n_boot, seed=seed)
    value = float(hits.sum() / trials.sum())
    return Estimate(value=value, ci=_finite_ci(ci), n=int(trials.sum()))


def invalid_reason(source: Source) -> str:
    """Why a source is invalid: its failure, else ``not_fetched`` or ``unknown``."""
    if source.failure is not None:
        return source.failure.value
    return "not_fetched" if source.status == "not_fetched" else "unknown"


def invalid_reasons(audits: Sequence[AnswerAudit]) -> dict[str, int]:
    """Invalid cited URLs by failure (counts sum to URLs minus valid URLs)."""
    reasons = Counter(invalid_reason(s) for a in audits for s in _url_sources(a) if not s.valid)
    return dict(reasons.most_common())


def _statement_estimate(
    audits: Sequence[AnswerAudit], *, cluster: bool, n_boot: int, seed: int
) -> Estimate:
    per_answer = [[c.supported for c in a.claims if c.supported is not None] for a in audits]
    if cluster:
        clusters = [(sum(flags), len(flags)) for flags in per_answer]
        return cluster_share_estimate(clusters, n_boot=n_boot, seed=seed)
    return share_estimate([f for flags in per_answer for f in flags], n_boot=n_boot, seed=seed)


UNCHECKED_REASONS = frozenset({FetchFailure.OFFLINE.value, "not_fetched", "unknown"})
"""Invalid-URL reasons that say the URL was never checked (not that it is dead)."""


def not_measured_reason(audits: Sequence[AnswerAudit]) -> str | None:
    """Why statement- and response-level support cannot be measured over ``audits``, or
    None when they can.

    They can when some statement was judged against some source, or when cited URLs were
    checked and found invalid (404, DNS...: the paper counts those statements as
    unsupported, a real 0). They cannot when there is no statement, no answer cites a
    source, every cited URL went unchecked (offline, not in the cache), or no statement
    could be paired with a valid source: a 0 % there would stand for "nothing to measure".
    """
    n_claims = sum(len(a.claims) for a in audits)
    if not audits or not n_claims:
        return "no statement to check" + ("" if audits else " (no answer)")
    if any(c.pairs for a in audits for c in a.claims):
        return None
    sources = [s for a in audits for s in a.answer.sources]
    urls = [s for s in sources if s.url]
    if not any(s.url or s.text for s in sources):
        return (f"no answer cites a source ({len(audits):,} answers, {n_claims:,} "
                "statements): nothing to check the statements against")
    if any(s.valid for s in sources):
        return (f"no statement could be paired with a valid source ({n_claims:,} "
                "statements; with pairing 'cited', no statement cites one)")
    reasons = Counter(invalid_reason(s) for s in urls)
    if urls and set(reasons) <= UNCHECKED_REASONS:
        listed = ", ".join(f"{k} {v:,}" for k, v in reasons.most_common())
        return (f"none of the {len(urls):,} cited URLs could be checked ({listed}): "
                "no statement was judged")
    return None


def _why_not(estimate: Estimate, reason: str) -> Estimate:
    if estimate.value is not None or estimate.reason is not None:
        return estimate
    return estimate.model_copy(update={"reason": reason})


def audit_metrics(
    audits: Sequence[AnswerAudit], *, n_boot: int = 2000, seed: int = 0, cluster: bool = True
) -> AuditMetrics:
    """The paper's metrics pooled over answers, each with a 95 % bootstrap CI (see the
    module docstring for the unit each interval resamples). A share with nothing to
    measure has no value and says why (:func:`not_measured_reason`), never 0."""
    urls = [s.valid for a in audits for s in _url_sources(a)]
    responses = [answer_metrics(a).response_support for a in audits]
    unused = [not used for a in audits for used in source_use(a) if used is not None]
    pairs = [p for a in audits for c in a.claims for p in c.pairs]
    options: dict[str, Any] = {"n_boot": n_boot, "seed": seed}
    not_measured = not_measured_reason(audits)
    if not_measured is None:
        statement = _statement_estimate(audits, cluster=cluster, **options)
        response = share_estimate([r for r in responses if r is not None], **options)
    else:
        statement = response = Estimate(reason=not_measured)
    return AuditMetrics(
        n_answers=len(audits),
        n_urls=len(urls),
        n_claims=sum(len(a.claims) for a in audits),
        n_scored_claims=sum(1 for a in audits for c in a.claims if c.supported is not None),
        n_pairs=len(pairs),
        n_pair_errors=sum(1 for p in pairs if p.supported is None),
        url_validity=_why_not(share_estimate(urls, **options), "no cited URL"),
        statement_support=_why_not(statement, "no statement could be scored (every "
                                   "judgement failed)"),
        response_support=_why_not(response, "no answer with a known support"),
        unused_sources=_why_not(share_estimate(unused, **options), "no valid source"),
        invalid_reasons=invalid_reasons(audits),
    )


def group_value(meta: dict[str, Any], field: str) -> str:
    """The breakdown group of one answer: the meta value as text, ``(missing)`` if absent."""
    value = meta.get(field)
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def breakdown_fields(audits: Sequence[AnswerAudit], max_groups: int = MAX_GROUPS) -> list[str]:
    """Meta fields worth breaking down by: every value a string, int or bool (or absent),
    and at most ``max_groups`` distinct values."""
    values: dict[str, set[str]] = {}
    unusable: set[str] = set()
    for audit in audits:
        for key, value in audit.answer.meta.items():
            if value is not None and not isinstance(value, str | int | bool):
                unusable.add(key)
            values.setdefault(key, set()).add(group_value(audit.answer.meta, key))
    return sorted(k for k, v in values.items() if k not in unusable and len(v) <= max_groups)


def group_audits(audits: Sequence[AnswerAudit], field: str) -> dict[str, list[AnswerAudit]]:
    """Answers by the value of one meta field, groups sorted by value."""
    groups: dict[str, list[AnswerAudit]] = {}
    for audit in audits:
        groups.setdefault(group_value(audit.answer.meta, field), []).append(audit)
    return dict(sorted(groups.items()))


def breakdowns(
    audits: Sequence[AnswerAudit],
    fields: Sequence[str] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, dict[str, AuditMetrics]]:
    """field -> value -> metrics of the answers with that value (``(missing)`` when the
    field is absent). ``fields=None`` picks every meta field :func:`breakdown_fields`
    accepts."""
    chosen = breakdown_fields(audits) if fields is None else list(fields)
    return {
        field: {
            value: audit_metrics(group, n_boot=n_boot, seed=seed)
            for value, group in group_audits(audits, field).items()
        }
        for field in chosen
    }
