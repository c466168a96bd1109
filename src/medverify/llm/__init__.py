"""Chat models: spec strings -> :class:`Model` (a provider wrapped with timeouts, retries,
time budgets, a reply size cap, concurrency limits, a request cache and per-stage token
accounting)."""

from medverify.llm.base import ChatRequest, Completion, Message, Provider, TokenCount
from medverify.llm.cache import RequestCache
from medverify.llm.facade import Model, UsageLedger, answer_budget, get_model
from medverify.llm.limits import BudgetSpent, ReplyTooLarge
from medverify.llm.spec import ModelSpec, parse_spec, providers

__all__ = [
    "BudgetSpent",
    "ChatRequest",
    "Completion",
    "Message",
    "Model",
    "ModelSpec",
    "Provider",
    "ReplyTooLarge",
    "RequestCache",
    "TokenCount",
    "UsageLedger",
    "answer_budget",
    "get_model",
    "parse_spec",
    "providers",
]
