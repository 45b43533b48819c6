"""The Matrix channel's pure parts, on recorded event JSON: what counts as a turn, mentions,
replies as Matrix HTML and edits, splitting, error verdicts, the config's preflight and the
saved state. No homeserver needed (``test_matrix`` covers the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lucidgate.channels.matrix import preflight
from lucidgate.channels.matrix.calls import MatrixCallError, classify
from lucidgate.channels.matrix.events import Attachment, file_name, parse_message, safe_component
from lucidgate.channels.matrix.format import edit_content, message_content, reply_to, split_markdown, to_html
from lucidgate.channels.matrix.state import MatrixState, load_state, save_state
from lucidgate.config.schema import Config
from tests.matrix_kit import require_synapse

BOT = "@lucid:example.org"


def event(content: dict[str, Any], sender: str = "@ann:example.org", **extra: Any) -> dict[str, Any]:
    return {"type": "m.room.message", "event_id": "$e1", "sender": sender, "content": content, **extra}


def text(body: str, **extra: Any) -> dict[str, Any]:
    return event({"msgtype": "m.text", "body": body, **extra})


def test_a_plain_text_message_is_a_turn_without_a_mention() -> None:
    parsed = parse_message(text("what is my cat called?"), bot_id=BOT, bot_name="Lucid")
    assert parsed is not None
    assert (parsed.text, parsed.sender, parsed.event_id, parsed.mentioned) == (
        "what is my cat called?", "@ann:example.org", "$e1", False)


@pytest.mark.parametrize("message", [
    text("hi", **{"m.mentions": {"user_ids": [BOT]}}),
    text("Lucid: hi"),
    text("lucid, hi"),
    text(f"{BOT}: hi"),
    text("hey there", format="org.matrix.custom.html",
         formatted_body='<a href="https://matrix.to/#/%40lucid%3Aexample.org">Lucid</a> hey there'),
])
def test_mentions_are_recognised_and_removed_from_the_text(message: dict[str, Any]) -> None:
    parsed = parse_message(message, bot_id=BOT, bot_name="Lucid")
    assert parsed is not None and parsed.mentioned
    assert parsed.text in ("hi", "hey there")


def test_someone_else_named_is_not_a_mention() -> None:
    parsed = parse_message(text("Lucas: hi", **{"m.mentions": {"user_ids": ["@lucas:example.org"]}}),
                           bot_id=BOT, bot_name="Lucid")
    assert parsed is not None and not parsed.mentioned


@pytest.mark.parametrize("message", [
    event({"msgtype": "m.notice", "body": "I am another bot"}),  # bots do not answer notices
    event({"msgtype": "m.text", "body": "my own words"}, sender=BOT),
    text("* fixed typo", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}}),
    {"type": "m.room.encrypted", "event_id": "$e2", "sender": "@ann:example.org", "content": {}},
    event({"msgtype": "m.image", "body": "x.png", "file": {"url": "mxc://e/encrypted"}}),
    event("not a dict"),  # type: ignore[arg-type]
])
def test_what_is_never_a_turn(message: dict[str, Any]) -> None:
    assert parse_message(message, bot_id=BOT, bot_name="Lucid") is None


def test_a_reply_loses_the_quoted_fallback() -> None:
    body = "> <@lucid:example.org> The answer is 42.\n> more\n\nand why?"
    parsed = parse_message(text(body), bot_id=BOT, bot_name="Lucid")
    assert parsed is not None and parsed.text == "and why?"


def test_an_image_becomes_an_attachment_with_a_safe_unique_file_name() -> None:
    content = {"msgtype": "m.image", "body": "cat.PNG", "url": "mxc://example.org/abc",
               "info": {"mimetype": "image/png", "size": 1234}}
    parsed = parse_message(event(content), bot_id=BOT, bot_name=None)
    assert parsed is not None and parsed.text == ""
    assert parsed.attachment == Attachment("image", "mxc://example.org/abc", "cat.PNG", 1234, "image/png")
    name = file_name("$a/../b:c", parsed.attachment)
    assert name.endswith(".png") and "/" not in name and ".." not in name
    assert safe_component("!a:b") != safe_component("!a_b")  # no two rooms share a folder
    assert file_name("$x", Attachment("file", "mxc://e/f", "noext", None, "application/pdf")).endswith(".pdf")


def test_replies_are_matrix_html_with_raw_html_escaped_and_only_web_links() -> None:
    html = to_html("**bold** <script>x</script> [ok](https://example.org) [bad](javascript:alert(1))")
    assert "<strong>bold</strong>" in html and "&lt;script&gt;" in html
    assert '<a href="https://example.org">ok</a>' in html and 'href="javascript' not in html
    content = message_content("| a | b |\n|---|---|\n| 1 | 2 |", msgtype="m.text")
    assert content["format"] == "org.matrix.custom.html" and "<table>" in content["formatted_body"]
    assert message_content("<fixed> *text*", msgtype="m.notice", plain=True) == {
        "msgtype": "m.notice", "body": "<fixed> *text*"}


def test_an_edit_replaces_the_content_and_a_reply_points_at_the_question() -> None:
    new = message_content("final **answer**", msgtype="m.notice")
    edit = edit_content("$preview", new)
    assert edit["m.new_content"] == new
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$preview"}
    assert edit["body"] == "* final answer"
    assert reply_to({"body": "x"}, "$q")["m.relates_to"] == {"m.in_reply_to": {"event_id": "$q"}}
    assert reply_to({"body": "x"}, None) == {"body": "x"}


def test_long_replies_split_between_paragraphs_and_keep_fences_whole() -> None:
    fence = "```python\n" + "\n".join(f"line_{i} = {i}" for i in range(30)) + "\n```"
    text_ = "\n\n".join(["intro " * 20, fence, "outro " * 20])
    pieces = split_markdown(text_, 500)
    assert all(len(p) <= 500 for p in pieces)
    assert any(p.startswith("```python") and p.endswith("```") for p in pieces)
    assert "".join(pieces).count("line_29 = 29") == 1
    huge = split_markdown("```\n" + "\n".join("x" * 50 for _ in range(100)) + "\n```", 400)
    assert len(huge) > 1 and all(p.startswith("```") and p.endswith("```") for p in huge)
    assert split_markdown("   ") == []


def test_failed_calls_get_the_right_verdict() -> None:
    assert classify(MatrixCallError("send", 429, "M_LIMIT_EXCEEDED", "slow", 1500)).delay == 1.5
    assert classify(MatrixCallError("send", 500, "M_UNKNOWN", "boom")).action == "retry"
    assert classify(MatrixCallError("send", 403, "M_FORBIDDEN", "not in room")).action == "fail"
    assert classify(aiohttp.ClientConnectionError()).action == "retry"
    assert classify(TimeoutError()).action == "retry"  # a send has a transaction id: safe to repeat
    assert MatrixCallError("sync", 401, "M_UNKNOWN_TOKEN", "").unauthorized


def test_preflight_names_the_setting_to_fix() -> None:
    def section(**matrix: Any) -> Any:
        return Config.model_validate({"channels": {"matrix": {"enabled": True, **matrix}}}).channels.matrix

    assert "homeserver" in (preflight(section()) or "")
    assert "credential" in (preflight(section(homeserver="https://m.example.org")) or "")
    assert "userId" in (preflight(section(homeserver="https://m.example.org", password="pw")) or "")
    assert preflight(section(homeserver="https://m.example.org", accessToken="syt_x")) is None
    with pytest.raises(ValueError):
        section(homeserver="https://m.example.org", msgtype="m.emote")


def test_state_belongs_to_one_account_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "matrix.json"
    save_state(path, MatrixState("https://a", "@bot:a", next_batch="s1", access_token="secret"))
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_state(path, "https://a", "@bot:a").next_batch == "s1"
    assert load_state(path, "https://b", "@bot:a").next_batch is None  # another homeserver
    assert load_state(path, "https://a", "@other:a").access_token is None  # another account
    path.write_text("{broken")
    assert load_state(path, "https://a", "@bot:a") == MatrixState("https://a", "@bot:a")


def test_a_missing_homeserver_skips_or_fails_when_a_real_one_is_required(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LUCID_SYNAPSE_VENV", str(tmp_path / "no-venv"))
    monkeypatch.delenv("LUCID_REQUIRE_REAL", raising=False)
    with pytest.raises(pytest.skip.Exception, match="matrix-synapse is not installed"):
        require_synapse()
    monkeypatch.setenv("LUCID_REQUIRE_REAL", "1")
    with pytest.raises(pytest.fail.Exception, match="LUCID_REQUIRE_REAL=1"):
        require_synapse()


def test_every_channel_sections_delivery_deadline_reaches_the_outbox(tmp_path: Path) -> None:
    from lucidgate.gateway.stores import WorkspaceParts

    config = Config.model_validate({
        "agents": {"defaults": {"workspace": str(tmp_path)}},
        "channels": {"matrix": {"deliveryDeadlineH": 2}, "slack": {"deliveryDeadlineH": 3}}})
    outbox = WorkspaceParts(config).outbox
    assert (outbox.deadline_s("matrix"), outbox.deadline_s("slack"), outbox.deadline_s("telegram")) == (
        7200.0, 10800.0, 86400.0)
