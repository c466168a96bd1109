"""The public API: the curated names of ``medverify/__init__.py`` (docs/architecture.md),
pinned so that a restructuring cannot drop or rename one unnoticed."""

from __future__ import annotations

import json

import medverify


def test_public_api_is_pinned() -> None:
    assert set(medverify.__all__) == {
        "CATEGORY_SCORE",
        "Analysis",
        "Answer",
        "AsyncClient",
        "Category",
        "Checker",
        "Claim",
        "ClaimResult",
        "Client",
        "Config",
        "Document",
        "EvidenceLabel",
        "KnowledgeBase",
        "MedverifyError",
        "Metrics",
        "Model",
        "Overloaded",
        "Passage",
        "RateLimited",
        "Report",
        "RunStore",
        "ServiceError",
        "Source",
        "Span",
        "Usage",
        "Verdict",
        "acheck",
        "check",
        "get_model",
    }
    for name in medverify.__all__:
        assert getattr(medverify, name) is not None
    assert json.loads(medverify.Answer(text="t").model_dump_json())["text"] == "t"
