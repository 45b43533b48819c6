"""What the gateway says when it clears its environment: secrets are called secrets, settings
(``LUCIDGATE_GATEWAY__PORT``) are not — both leave the environment."""

from __future__ import annotations

import logging

import pytest

from lucidgate.config import Config
from lucidgate.gateway.daemon.secret_env import scrub_secret_env


def test_only_secret_named_variables_are_reported_as_secrets(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"LUCIDGATE_GATEWAY__PORT": "18791", "LUCIDGATE_PROVIDERS__OPENAI__API_KEY": "sk-x",
               "SLACK_BOT_TOKEN": "xoxb-1", "LUCIDGATE_CONFIG": "/c.json", "HOME": "/home/a"}
    with caplog.at_level(logging.DEBUG, logger="lucidgate.gateway.daemon.secret_env"):
        removed = scrub_secret_env(Config(), environ)
    assert sorted(removed) == ["LUCIDGATE_GATEWAY__PORT", "LUCIDGATE_PROVIDERS__OPENAI__API_KEY", "SLACK_BOT_TOKEN"]
    assert environ == {"LUCIDGATE_CONFIG": "/c.json", "HOME": "/home/a"}
    secret_lines = [r.getMessage() for r in caplog.records if "secret variable" in r.getMessage()]
    assert len(secret_lines) == 1 and "LUCIDGATE_GATEWAY__PORT" not in secret_lines[0], secret_lines
    assert "SLACK_BOT_TOKEN" in secret_lines[0] and "LUCIDGATE_PROVIDERS__OPENAI__API_KEY" in secret_lines[0]
    assert "sk-x" not in caplog.text and "xoxb-1" not in caplog.text
    settings = [r for r in caplog.records if "applied setting" in r.getMessage()]
    assert settings and settings[0].levelno == logging.DEBUG and "LUCIDGATE_GATEWAY__PORT" in settings[0].getMessage()
