"""Fakes shipped with medverify, for its own tests and for yours.

``ScriptedProvider`` (alias ``FakeProvider``) is a chat provider answering from a script;
``register_fake(name, provider)`` makes the spec ``fake:<name>`` resolve to it.
``FakeChatServer`` is a real local OpenAI-compatible HTTP server with scripted behaviour.
"""

from medverify.testing.fake_provider import (
    FakeProvider,
    ScriptedProvider,
    register_fake,
    unregister_fake,
)
from medverify.testing.fake_server import FakeChatServer, FakeResponse, ReceivedCall

__all__ = [
    "FakeChatServer",
    "FakeProvider",
    "FakeResponse",
    "ReceivedCall",
    "ScriptedProvider",
    "register_fake",
    "unregister_fake",
]
