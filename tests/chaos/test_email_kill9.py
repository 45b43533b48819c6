"""Issue 43's "done when" for email: ``kill -9`` in the middle — once while a mail's turn is
running, once while the SMTP server refuses the answers — and every mail is answered exactly
once, including one that arrived while the gateway was down.

The real gateway runs as a subprocess (``lucid gateway``) with the real aioimaplib and
aiosmtplib clients; Dovecot (``tests.email_kit``), the SMTP server and the fake LLM live in
this test process, so they survive the kills and count what reached them.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest

from lucidgate.channels.outbox import read_counts
from tests.email_kit import AUTHSERV, PASSWORD, Dovecot, SmtpSink, body_of, dovecot, mail, passed
from tests.fakes.llm import FakeLLMServer, HeldReply
from tests.test_shutdown import GatewayProcess, _env
from tests.test_webhook import TOKEN
from tests.waiting import until

__all__ = ["dovecot"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OWNER = "owner@lucid.test"


async def test_kill_9_mid_turn_and_mid_send_answers_every_mail_exactly_once(
        tmp_path: Path, fake_llm: FakeLLMServer, dovecot: Dovecot) -> None:
    workspace, home, config_path = tmp_path / "ws", tmp_path / "home", tmp_path / "config.json"
    home.mkdir()
    bot = dovecot.add_user()
    box = dovecot.mailbox(bot)
    outbox = workspace / "state" / "outbox.sqlite"

    async def write(text: str) -> None:
        await box.deliver(mail(OWNER, bot, text, text, headers={"Authentication-Results": passed(OWNER)}))

    release = threading.Event()
    async with SmtpSink(bot) as sink:
        config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "llmRetryBaseDelayS": 0.01, "dream": {"enabled": False},
                                    "memory": {"autoRecall": False, "search": {"enabled": False}}}},
            "providers": {"openai": {"apiKey": "sk-chaos", "apiBase": fake_llm.base_url}},
            "channels": {"webhook": {"token": TOKEN},
                         "email": {"enabled": True, "address": bot, "password": PASSWORD,
                                   "imapHost": "127.0.0.1", "imapPort": dovecot.port, "imapSecurity": "plain",
                                   "smtpHost": "127.0.0.1", "smtpPort": sink.port, "smtpSecurity": "plain",
                                   "authservId": AUTHSERV, "owners": [OWNER], "allowFrom": [OWNER]}},
            "gateway": {"port": 0, "shutdownGraceS": 1},
        }))
        env = _env(home)

        def answered(word: str) -> int:
            return sum(word in body_of(m) for m in sink.received)

        # 1. A mail answered normally; then a second one's turn is running when the kill lands.
        first = await GatewayProcess(config_path, env).start()
        try:
            await first.url(timeout=180)
            await until(lambda: (workspace / "state" / "email.json").exists(), 120, what="the IMAP folder selected")
            await write("alpha")
            await until(lambda: answered("alpha") == 1, 120, what="the first answer")
            fake_llm.queue(HeldReply("held: never sent", release))
            await write("bravo")
            await until(lambda: len(fake_llm.requests) == 2, 120, what="bravo's turn at the model")
        finally:
            await first.stop(signal.SIGKILL)
        await write("charlie")  # arrives while the gateway is down

        # 2. The restart answers bravo and charlie; then the SMTP server refuses, and the kill
        #    lands while delta's answer waits in the outbox.
        second = await GatewayProcess(config_path, env).start()
        try:
            await second.url(timeout=180)
            await until(lambda: answered("bravo") >= 1 and answered("charlie") >= 1, 120,
                        what="bravo and charlie answered after the restart")
            sink.refuse_next = 10_000
            await write("delta")
            await until(lambda: sink.refused >= 1, 120, what="delta's answer refused by the SMTP server")
        finally:
            await second.stop(signal.SIGKILL)
        sink.refuse_next = 0

        # 3. A last start sends delta's answer from the outbox; a clean stop.
        third = await GatewayProcess(config_path, env).start()
        try:
            await third.url(timeout=180)
            await until(lambda: answered("delta") >= 1, 120, what="delta answered after the second restart")
            await until(lambda: (read_counts(outbox) or {}).get("pending", 1) == 0, 120, what="the outbox drained")
        finally:
            code = await third.stop(signal.SIGTERM)
        release.set()
        assert code == 0, third.output
    counts = {word: answered(word) for word in ("alpha", "bravo", "charlie", "delta")}
    assert counts == {"alpha": 1, "bravo": 1, "charlie": 1, "delta": 1}, counts
    assert all(m["To"] == OWNER for m in sink.received)
    assert "held: never sent" not in str([body_of(m) for m in sink.received])
    flags = [f for _, f, _ in await box.listing()]
    assert len(flags) == 4 and all("\\Seen" in f for f in flags)
