"""Issue 31's "done when" for Matrix: the homeserver fails every send, the gateway is killed
with ``kill -9`` during the outage, and after the restart the reply arrives exactly once.

The real gateway runs as a subprocess with the real matrix-nio client against the real
homeserver (Synapse, ``tests.matrix_kit``) through a loopback proxy that lives in this test
process (so it survives the kill) and answers the gateway's sends with 500 until the
restarted gateway has retried from its outbox; then the outage ends.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from lucidgate.channels.outbox import read_counts
from tests.fakes.llm import FakeLLMServer, Reply
from tests.matrix_kit import Homeserver, OutageProxy, Person
from tests.test_shutdown import GatewayProcess, _env
from tests.test_webhook import TOKEN
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ANSWER = "The answer is 42."


async def test_a_reply_during_a_matrix_outage_survives_kill_9_and_arrives_once(
        tmp_path: Path, fake_llm: FakeLLMServer, homeserver: Homeserver) -> None:
    workspace, home, config_path = tmp_path / "ws", tmp_path / "home", tmp_path / "config.json"
    home.mkdir()
    bot, owner = await homeserver.register(), await homeserver.register()
    fake_llm.queue(Reply(ANSWER))
    async with OutageProxy(homeserver.url) as proxy:
        config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "llmRetryBaseDelayS": 0.01,
                                    "memory": {"autoRecall": False, "search": {"enabled": False}}}},
            "providers": {"openai": {"apiKey": "sk-chaos", "apiBase": fake_llm.base_url}},
            "channels": {"webhook": {"token": TOKEN},
                         "matrix": {"enabled": True, "homeserver": proxy.url, "userId": bot.user_id,
                                    "password": bot.password, "allowFrom": [owner.user_id],
                                    "owners": [owner.user_id], "syncTimeoutS": 2}},
            "gateway": {"port": 0, "shutdownGraceS": 1},
        }))
        env = _env(home)
        first = await GatewayProcess(config_path, env).start()
        try:
            await first.url(timeout=120)
            room = await owner.create_room([bot.user_id])
            await owner.wait(lambda: _joined(owner, room, bot), 120, "the bot joining")
            proxy.outage = "500"
            await owner.send(room, "what is the answer?")
            await until(lambda: len(fake_llm.requests) == 1, 120, what="the model call")
            await until(lambda: proxy.failed >= 2, 120, what="sends failing in the outage")
        finally:
            await first.stop(signal.SIGKILL)
        tried_before_restart = proxy.sends
        assert await owner.messages_from(room, bot.user_id) == []  # nothing got through

        second = await GatewayProcess(config_path, env).start()
        try:
            await second.url(timeout=120)
            await until(lambda: proxy.sends > tried_before_restart, 120,
                        what="the restarted gateway retrying from its outbox")
            proxy.outage = None
            await until(lambda: (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("delivered", 0) >= 1
                        and (read_counts(workspace / "state" / "outbox.sqlite") or {}).get("pending", 1) == 0, 120, what="the delivered mark")
        finally:
            code = await second.stop(signal.SIGTERM)
        assert code == 0, second.output
    delivered = [m["content"]["body"] for m in await owner.messages_from(room, bot.user_id)]
    assert delivered == [ANSWER], delivered  # exactly once
    assert len(fake_llm.requests) == 1  # the turn was not run again
    # the password login happened once: the restart reused the session kept in the workspace
    devices = (await bot.call("GET", "/devices"))["devices"]
    assert len(devices) == 2, devices  # the one registration made, and the gateway's
    print(f"matrix outage: killed once, {proxy.sends} send attempts, delivered {len(delivered)} time(s)")


async def _joined(person: Person, room: str, bot: Person) -> bool:
    return (await person.members(room)).get(bot.user_id) == "join"
