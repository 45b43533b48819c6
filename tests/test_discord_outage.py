"""Discord's "done when": Discord answers 503 for every send, the gateway is killed with
``kill -9`` during the outage, and after the restart the reply arrives exactly once.

The real gateway runs as a subprocess with the real discord.py client against the loopback
Discord stand-in, which lives in this test process and so survives the kill (as Discord
would). The outage lasts until the restarted gateway has retried from its outbox, then ends.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from lucidgate.channels.outbox import read_counts
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_shutdown import GatewayProcess, _env
from tests.test_webhook import TOKEN
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

OWNER = 4242
ANSWER = "The answer is 42."


async def test_a_reply_during_a_discord_outage_survives_kill_9_and_arrives_once(
        tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    workspace, home, config_path = tmp_path / "ws", tmp_path / "home", tmp_path / "config.json"
    home.mkdir()
    fake_llm.queue(Reply(ANSWER))
    async with FakeDiscordAPI() as dc:
        config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "llmRetryBaseDelayS": 0.01}},
            "providers": {"openai": {"apiKey": "sk-chaos", "apiBase": fake_llm.base_url}},
            "channels": {"webhook": {"token": TOKEN},
                         "discord": {"enabled": True, "token": DISCORD_TOKEN, "apiBase": dc.base_url,
                                     "owners": [str(OWNER)]}},
            "gateway": {"port": 0, "shutdownGraceS": 1},
        }))
        env = _env(home)
        first = await GatewayProcess(config_path, env).start()
        try:
            await first.url(timeout=60)
            await until(lambda: dc.gateway.current is not None and dc.gateway.current.ws is not None,
                        60, what="the first gateway identified")
            dc.set_outage(503)
            await dc.push_dm(user_id=OWNER, text="what is the answer?")
            await until(lambda: len(fake_llm.requests) == 1, 60, what="the model call")
            await until(lambda: len(dc.calls_to("POST /messages")) >= 2, 60, what="sends failing in the outage")
        finally:
            await first.stop(signal.SIGKILL)
        tried_before_restart = len(dc.calls_to("POST /messages"))
        assert dc.sent == {}  # nothing got through

        second = await GatewayProcess(config_path, env).start()
        try:
            await second.url(timeout=60)
            await until(lambda: len(dc.calls_to("POST /messages")) > tried_before_restart, 60,
                        what="the restarted gateway retrying from its outbox")
            dc.set_outage(None)
            await until(lambda: (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("delivered", 0) >= 1 and
                        (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("pending", 1) == 0, 60, what="the delivered mark")
        finally:
            code = await second.stop(signal.SIGTERM)
        assert code == 0, second.output
    assert dc.texts() == [ANSWER]  # exactly once
    assert len(fake_llm.requests) == 1  # the turn was not run again
    assert len(dc.gateway.ops(2)) == 2  # each process identified once
