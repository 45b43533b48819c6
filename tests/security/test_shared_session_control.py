"""A shared chat's session is the owner's to control: over the real Telegram channel (a group on
the loopback Bot API), a guest's /stop does not end the owner's running turn, and a guest's
/new and /compact are refused with a one-line reason; the guest can still stop their own turn."""

from __future__ import annotations

import threading

from lucidgate.gateway.app import Gateway
from lucidgate.gateway.agent.loop import STOPPED_NOTE
from tests.fakes.llm import FakeLLMServer, Hang, HeldReply, Reply
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI
from tests.test_channels_e2e import FIRST_REPLY_TIMEOUT, FRIEND, GROUP, OWNER, sends_to
from tests.test_channels_e2e import telegram_gateway, tg  # noqa: F401  (fixtures)

__all__: list[str] = []


def _reply_to(tg: FakeTelegramAPI, message_id: int) -> list[str]:
    return [c.params["text"] for c in sends_to(tg, GROUP)
            if c.json("reply_parameters") and c.json("reply_parameters")["message_id"] == message_id]


async def test_a_guests_stop_new_and_compact_leave_the_owners_turn_and_session_alone(
    telegram_gateway: Gateway, tg: FakeTelegramAPI, fake_llm: FakeLLMServer
) -> None:
    release = threading.Event()
    fake_llm.queue(HeldReply("the full answer for the owner", release))
    try:
        tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=OWNER,
                        text=f"@{BOT_USERNAME} plan the trip", message_id=100)
        await fake_llm.wait_for_requests(1, timeout=FIRST_REPLY_TIMEOUT)  # the owner's turn runs
        tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND, text="/stop", message_id=101)
        (refused,) = await tg.wait_for("sendMessage", 1)
        assert refused.json("reply_parameters")["message_id"] == 101
        assert refused.params["text"] == ("Nothing of yours is running; only the owner can stop "
                                          "someone else's answer.")
        tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND, text="/new", message_id=102)
        tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND, text="/compact",
                        message_id=103)
        release.set()
        await tg.wait_for("sendMessage", 4)
    finally:
        release.set()
    assert _reply_to(tg, 100) == ["the full answer for the owner"]
    for message_id, name in ((102, "new"), (103, "compact")):
        [line] = _reply_to(tg, message_id)
        assert line == f"/{name} changes this shared conversation for everyone, so only the owner may use it here."
    session = await telegram_gateway.parts.sessions.get(f"telegram:{GROUP}")
    said = [m.get("content") for m in session.messages]
    assert said == ["plan the trip", "the full answer for the owner"]  # nothing archived, nothing stopped
    assert session.last_consolidated == 0 and STOPPED_NOTE not in said
    assert len(fake_llm.requests) == 1  # no summary was asked for


async def test_a_guest_stops_their_own_turn_in_a_group_and_the_owner_stops_anyones(
    telegram_gateway: Gateway, tg: FakeTelegramAPI, fake_llm: FakeLLMServer
) -> None:
    fake_llm.queue(Hang(30), Hang(30), Reply("not reached"))
    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND,
                    text=f"@{BOT_USERNAME} a long question", message_id=200)
    await fake_llm.wait_for_requests(1, timeout=FIRST_REPLY_TIMEOUT)
    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND, text="/stop", message_id=201)
    await tg.wait_for("sendMessage", 2)
    assert _reply_to(tg, 201) == ["Stopping…"] and _reply_to(tg, 200) == ["Stopped."]

    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=FRIEND,
                    text=f"@{BOT_USERNAME} another long one", message_id=300)
    await fake_llm.wait_for_requests(2)
    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=OWNER, text="/stop", message_id=301)
    await tg.wait_for("sendMessage", 4)
    assert _reply_to(tg, 301) == ["Stopping…"] and _reply_to(tg, 300) == ["Stopped."]
