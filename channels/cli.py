"""The terminal channel used by ``lucid agent``: one local user, who is the owner.

It publishes what the user types and resolves a future when the reply for that message
comes back on the bus, so the CLI can print it (and show a spinner until then). A reply to
an ask that was cancelled (a stopped turn's "Stopped.") is dropped; only messages nobody
ever asked for (a reminder, the ``message`` tool) go to ``on_unsolicited``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import InboundMessage, OutboundMessage, OutboundText
from lucidgate.channels.outfiles import unsent_note
from lucidgate.channels.waiters import AnsweringChannel

logger = logging.getLogger(__name__)

CLI_CHANNEL = "cli"
LOCAL_USER = "local"


class CliChannel(AnsweringChannel[tuple[bool, str]]):
    name = CLI_CHANNEL

    def __init__(self, bus: MessageBus, *, chat_id: str = "local",
                 on_unsolicited: Callable[[str], None] | None = None,
                 on_progress: Callable[[str, str | None], None] | None = None, agent: str = "") -> None:
        super().__init__(bus)
        self.chat_id = chat_id
        # The agent this terminal's messages are for ("": the bindings decide, as for any
        # channel); ``lucid agent --agent ID`` running one agent alone stamps its own.
        self.agent = agent
        # Messages nobody is waiting for (a reminder, the `message` tool): shown, not dropped.
        self.on_unsolicited = on_unsolicited
        # The terminal's live view: the answer so far and the step that runs ("running grep…").
        self.on_progress = on_progress

    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind == "progress":
            if self.on_progress is not None:
                self.on_progress(msg.text, msg.activity)
            return
        if msg.kind not in ("text", "error"):
            return
        key = msg.in_reply_to or ""
        text = unsent_note(msg.text, msg.files, "terminal") if isinstance(msg, OutboundText) else msg.text
        fut = self._waiters.take(key)
        if fut is not None and not fut.done():
            fut.set_result((msg.kind == "text", text))
        elif fut is not None:
            # The answer to an ask its caller gave up on (Ctrl-C stopped the turn, and the
            # terminal said so): printed now it would look like something typed at the prompt.
            logger.info("terminal answer after its ask was abandoned: %s", msg.text[:200])
        elif self.on_unsolicited is not None:
            self.on_unsolicited(text)
        else:
            logger.info("terminal message with nobody waiting: %s", msg.text[:200])

    async def ask(self, text: str, chat_id: str | None = None, *, agent: str | None = None) -> tuple[bool, str]:
        """Send ``text`` as the local owner; return (ok, reply text) once answered.

        ``chat_id`` picks the session (``cli:<chat_id>``); the channel's own by default.
        ``agent`` names the agent it is for (``lucid agent --agent ID`` beside a daemon): an
        explicit agent wins over the bindings (``Router.route``).
        """
        message_id = uuid.uuid4().hex[:16]
        fut = self._waiters.expect(message_id)
        await self.bus.publish_inbound(InboundMessage(
            channel=self.name, chat_id=chat_id or self.chat_id, sender_id=LOCAL_USER, text=text,
            chat_type="private", message_id=message_id, role="owner",
            agent=self.agent if agent is None else agent,
        ))
        return await fut

