"""The ``message`` tool: send a text to a chat on any running channel (owner only)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from channels.bus import MessageBus
from channels.messages import OutboundText, Target
from gateway.errors import ToolError
from gateway.tools.base import ToolParams
from gateway.tools.turn import TurnContext


class MessageParams(ToolParams):
    text: str = Field(description="What to send.", min_length=1, max_length=20_000)
    channel: str | None = Field(None, description="Channel name (telegram, slack, …); default: this chat's.")
    chat_id: str | None = Field(None, description="Target chat id; default: this chat.")
    thread_id: str | None = Field(None, description="Thread within the chat, if any.")


class MessageTool:
    name: ClassVar[str] = "message"
    description: ClassVar[str] = (
        "Send a message to a chat (this one by default, or another chat on any running channel)."
    )
    Params: ClassVar[type[MessageParams]] = MessageParams
    owner_only: ClassVar[bool] = True

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def run(self, ctx: TurnContext, params: MessageParams) -> str:
        channel = params.channel or ctx.channel
        chat_id = params.chat_id or ctx.chat_id
        thread_id = params.thread_id if (params.channel or params.chat_id) else (params.thread_id or ctx.thread_id)
        if not self.bus.has_route(channel):
            raise ToolError(f"channel {channel!r} is not running; enabled channels receive messages")
        await self.bus.publish_outbound(OutboundText(Target(channel, chat_id, thread_id), params.text))
        return f"sent to {channel}:{chat_id}" + (f" (thread {thread_id})" if thread_id else "")
