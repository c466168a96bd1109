"""medverify: check what medical LLM answers claim.

The public API is this curated list of names (pinned by a test). Heavy modules (the
knowledge base, the pipeline) are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from medverify.config import Config
from medverify.errors import MedverifyError
from medverify.records import (
    Analysis,
    Answer,
    Category,
    Claim,
    ClaimResult,
    Document,
    Metrics,
    Passage,
    Report,
    Source,
    Span,
    Usage,
    Verdict,
)
from medverify.verdict_rules import CATEGORY_SCORE, EvidenceLabel

__all__ = [
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
]

_LAZY = {
    "check": "medverify.checker",
    "acheck": "medverify.checker",
    "Checker": "medverify.checker",
    "KnowledgeBase": "medverify.kb",
    "Model": "medverify.llm.facade",
    "get_model": "medverify.llm.facade",
    "RunStore": "medverify.store.runs",
    # the HTTP service's client (imports httpx and the service's records)
    "Client": "medverify.client",
    "AsyncClient": "medverify.client",
    "ServiceError": "medverify.client",
    "RateLimited": "medverify.client",
    "Overloaded": "medverify.client",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'medverify' has no attribute {name!r}")
