"""Fakes shipped with medverify, for its own tests and for yours.

``ScriptedProvider`` (alias ``FakeProvider``) is a chat provider answering from a script;
``register_fake(name, provider)`` makes the spec ``fake:<name>`` resolve to it.
``FakeChatServer`` is a real local OpenAI-compatible HTTP server with scripted behaviour.
``PageServer`` serves fixed web pages (e.g. documents) on 127.0.0.1; ``CitingModel`` and
``register_citing_models`` script models under test with different citation habits, and
``study_documents`` / ``study_questions`` are a small offline study built on them.
``factcheck_model`` scripts every prompt of the fact-check-and-correct flow (a RAG answer
with a wrong dose and an invented contraindication, and their correction).
"""

from medverify.testing.citers import (
    CitingModel,
    register_citing_models,
    study_documents,
    study_questions,
)
from medverify.testing.factcheck_model import (
    DEMO_ANSWER,
    DEMO_QUESTION,
    factcheck_model,
    prompt_stage,
)
from medverify.testing.fake_provider import (
    FakeProvider,
    ScriptedProvider,
    register_fake,
    unregister_fake,
)
from medverify.testing.fake_server import FakeChatServer, FakeResponse, ReceivedCall
from medverify.testing.page_server import Page, PageServer

__all__ = [
    "DEMO_ANSWER",
    "DEMO_QUESTION",
    "CitingModel",
    "FakeChatServer",
    "FakeProvider",
    "FakeResponse",
    "Page",
    "PageServer",
    "ReceivedCall",
    "ScriptedProvider",
    "factcheck_model",
    "prompt_stage",
    "register_citing_models",
    "register_fake",
    "study_documents",
    "study_questions",
    "unregister_fake",
]
