"""Loopback stand-ins for the outside world (LLM, platform APIs) used by the tests.

Import the fake you need from its module, e.g. ``from tests.fakes.llm import FakeLLMServer, Reply``.
"""
