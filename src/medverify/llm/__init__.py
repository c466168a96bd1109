"""Chat models: spec strings -> :class:`Model` (a provider wrapped with timeouts, retries,
concurrency limits, a request cache and per-stage token accounting)."""

from medverify.llm.base import ChatRequest, Completion, Message, Provider, TokenCount
from medverify.llm.cache import RequestCache
from medverify.llm.facade import Model, UsageLedger, get_model
from medverify.llm.spec import ModelSpec, parse_spec, providers

__all__ = [
    "ChatRequest",
    "Completion",
    "Message",
    "Model",
    "ModelSpec",
    "Provider",
    "RequestCache",
    "TokenCount",
    "UsageLedger",
    "get_model",
    "parse_spec",
    "providers",
]
