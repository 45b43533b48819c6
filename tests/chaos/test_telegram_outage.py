"""Issue 11's "done when": Telegram answers 500, the gateway is killed with ``kill -9`` during
the outage, and after the restart the reply arrives exactly once.

The real gateway runs as a subprocess with the real python-telegram-bot poller against the
loopback Bot API stand-in (which lives in this test process, so it survives the kill). The
outage lasts until the restarted gateway has retried from its outbox at least once (and, with
``CHAOS_OUTAGE_S=60``, at least a minute), then ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from lucidgate.channels.outbox import read_counts
from tests.fakes.llm import FakeLLMServer, Reply
from tests.fakes.telegram_api import TOKEN as TG_TOKEN
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.test_shutdown import GatewayProcess, _env
from tests.test_webhook import TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OUTAGE_S = float(os.environ.get("CHAOS_OUTAGE_S", "0"))
OWNER = 42
ANSWER = "The answer is 42."


async def until(predicate, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_reply_during_a_telegram_outage_survives_kill_9_and_arrives_once(
        tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    workspace, home, config_path = tmp_path / "ws", tmp_path / "home", tmp_path / "config.json"
    home.mkdir()
    fake_llm.queue(Reply(ANSWER))
    async with FakeTelegramAPI() as tg:
        config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "llmRetryBaseDelayS": 0.01}},
            "providers": {"openai": {"apiKey": "sk-chaos", "apiBase": fake_llm.base_url}},
            "channels": {"webhook": {"token": TOKEN},
                         "telegram": {"enabled": True, "token": TG_TOKEN, "apiBase": tg.base_url,
                                      "allowFrom": [str(OWNER)], "owners": [str(OWNER)]}},
            "gateway": {"port": 0, "shutdownGraceS": 1},
        }))
        env = _env(home)
        first = await GatewayProcess(config_path, env).start()
        try:
            await first.url(timeout=60)
            tg.set_outage("500")
            outage_started = time.monotonic()
            tg.push_message(chat_id=OWNER, text="what is the answer?")
            await until(lambda: len(fake_llm.requests) == 1, "the model call")
            await until(lambda: len(tg.calls_to("sendMessage")) >= 2, "sends failing in the outage")
        finally:
            await first.stop(signal.SIGKILL)
        tried_before_restart = len(tg.calls_to("sendMessage"))
        assert tg.messages == {}  # nothing got through

        second = await GatewayProcess(config_path, env).start()
        try:
            await second.url(timeout=60)
            await until(lambda: len(tg.calls_to("sendMessage")) > tried_before_restart,
                        "the restarted gateway retrying from its outbox")
            await until(lambda: time.monotonic() - outage_started >= OUTAGE_S, "the outage's length",
                        timeout=OUTAGE_S + 60)
            tg.set_outage(None)
            await until(lambda: (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("delivered", 0) >= 1 and
                        (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("pending", 1) == 0, "the delivered mark")
        finally:
            code = await second.stop(signal.SIGTERM)
        assert code == 0, second.output
    delivered = [m["text"] for m in tg.messages.values()]
    assert delivered == [ANSWER], delivered  # exactly once
    assert len(fake_llm.requests) == 1  # the turn was not run again
    print(f"telegram outage: {time.monotonic() - outage_started:.0f} s, killed once, "
          f"{len(tg.calls_to('sendMessage'))} send attempts, delivered {len(delivered)} time(s)")
