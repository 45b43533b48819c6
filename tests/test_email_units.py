"""The email channel's pure parts, without a mail server: who is authenticated, what is cut
from a mail, which mail is never answered, how replies are threaded and named."""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from pathlib import Path

import pytest

from lucidgate.channels.email import preflight
from lucidgate.channels.email.authres import authenticated
from lucidgate.channels.email.channel import roster_of
from lucidgate.channels.email.compose import build_reply, reply_subject
from lucidgate.channels.email.guards import why_not_answer
from lucidgate.channels.email.parse import parse_mail, safe_name
from lucidgate.channels.email.state import ImapState, load_state, save_state
from lucidgate.channels.email.strip import strip_reply
from lucidgate.channels.email.threads import MailRecord, ThreadStore, thread_key
from lucidgate.config.schema import EmailConfig


def message(headers: dict[str, str | list[str]], body: str = "hi") -> EmailMessage:
    lines = []
    for key, value in headers.items():
        for one in value if isinstance(value, list) else [value]:
            lines.append(f"{key}: {one}")
    raw = ("\r\n".join(lines) + "\r\n\r\n" + body + "\r\n").encode()
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


@pytest.mark.parametrize(("results", "expected"), [
    (["mx.example.org; dkim=pass header.d=example.com header.s=s1"], True),
    (["mx.example.org; spf=pass smtp.mailfrom=alice@example.com; dkim=none"], True),
    (["mx.example.org; dkim=pass header.d=mail.example.com"], True),  # relaxed alignment
    (["mx.example.org; dmarc=pass (p=reject) header.from=example.com"], True),
    (["mx.example.org 1; dkim=pass (good signature) header.i=@example.com"], True),
    (["mx.example.org; dkim=pass header.d=attacker.net"], False),  # signed, by someone else
    (["mx.example.org; spf=pass smtp.mailfrom=bounce@attacker.net"], False),
    (["mx.example.org; dkim=fail header.d=example.com; spf=softfail smtp.mailfrom=example.com"], False),
    (["evil.example; dkim=pass header.d=example.com"], False),  # not our server's header
    (["mx.example.org; dkim=pass header.d=com"], False),  # a bare top-level domain never aligns
    ([], False),
])
def test_only_the_configured_server_can_vouch_for_the_from_domain(results: list[str], expected: bool) -> None:
    msg = message({"From": "alice@example.com", "Authentication-Results": results})
    assert authenticated(msg, "example.com", "mx.example.org") is expected


def test_without_an_authserv_id_nobody_is_authenticated() -> None:
    msg = message({"From": "a@example.com", "Authentication-Results": "mx; dkim=pass header.d=example.com"})
    assert authenticated(msg, "example.com", "") is False


@pytest.mark.parametrize(("text", "kept"), [
    ("Yes, Tuesday works.\n\nOn Mon, 2 Jun 2025 at 09:12, Bob <bob@x.org> wrote:\n> Does Tuesday work?\n",
     "Yes, Tuesday works."),
    ("Yes.\n\nOn Mon, 2 Jun 2025 at 09:12, Bob Example\n<bob@x.org> wrote:\n> old", "Yes."),
    ("Am 2. Juni 2025 schrieb Bob:\n> Frage", "Am 2. Juni 2025 schrieb Bob:\n> Frage"),  # nothing above: kept
    ("Thanks!\n-- \nAlice\nCEO, Example Inc.", "Thanks!"),
    ("Thanks!\n\nSent from my iPhone", "Thanks!"),
    ("See below.\n\n-----Original Message-----\nFrom: Bob\nSent: Monday\nSubject: x\n\nold", "See below."),
    ("Fine.\n________________________________\nFrom: Bob <b@x>\nSent: Monday", "Fine."),
    ("> you said this\nand I answer inline\n> and this\nand here", "> you said this\nand I answer inline\n"
     "> and this\nand here"),
])
def test_quotes_and_signatures_are_cut(text: str, kept: str) -> None:
    assert strip_reply(text) == kept


@pytest.mark.parametrize(("headers", "reason"), [
    ({"From": "bot@example.org"}, "own address"),
    ({"From": "x@example.com", "Sender": "Bot <BOT@example.org>"}, "own address"),
    ({"From": "a@example.com", "Auto-Submitted": "auto-replied"}, "Auto-Submitted"),
    ({"From": "a@example.com", "X-Autoreply": "yes"}, "auto-reply"),
    ({"From": "MAILER-DAEMON@example.com"}, "bounce"),
    ({"From": "a@example.com", "Return-Path": "<>"}, "bounce"),
    ({"From": "a@example.com", "Precedence": "bulk"}, "bulk"),
    ({"From": "a@example.com", "List-Id": "<dev.lists.example.com>"}, "mailing-list"),
])
def test_loops_and_automatic_mail_are_never_answered(headers: dict[str, str], reason: str) -> None:
    msg = message(headers)
    sender = str(msg["From"].addresses[0].addr_spec).lower()
    why = why_not_answer(msg, sender, own="bot@example.org", answer_lists=False)
    assert why is not None and reason in why


def test_lists_are_answered_when_configured_but_auto_replies_never() -> None:
    listed = message({"From": "a@example.com", "List-Id": "<x>", "Precedence": "list"})
    assert why_not_answer(listed, "a@example.com", own="bot@example.org", answer_lists=True) is None
    auto = message({"From": "a@example.com", "Auto-Submitted": "auto-generated"})
    assert why_not_answer(auto, "a@example.com", own="bot@example.org", answer_lists=True) is not None
    person = message({"From": "a@example.com", "Auto-Submitted": "no"})
    assert why_not_answer(person, "a@example.com", own="bot@example.org", answer_lists=False) is None


def test_reply_subjects_fold_their_prefixes() -> None:
    assert reply_subject("Lunch") == "Re: Lunch"
    assert reply_subject("RE: Re: AW: Lunch") == "Re: Lunch"
    assert reply_subject("Re[2]: Lunch") == "Re: Lunch"
    assert reply_subject("") == "Re: your message"


def test_a_reply_is_threaded_automatic_and_plain_text() -> None:
    refs = [f"r{n}@x" for n in range(30)]
    msg = build_reply(sender="bot@example.org", from_name="Lucid", to="a@example.com", subject="Re: Lunch",
                      body="**Yes**, see [the menu](https://example.com/menu).\n\n- soup\n- bread",
                      plain=False, message_id="lucid.abc@example.org", in_reply_to="m1@x", references=refs)
    assert msg["In-Reply-To"] == "<m1@x>" and msg["Message-ID"] == "<lucid.abc@example.org>"
    chain = str(msg["References"]).split()
    assert len(chain) == 20 and chain[-1] == "<m1@x>" and chain[-2] == "<r29@x>"
    assert msg["Auto-Submitted"] == "auto-replied"
    text = str(msg.get_content())
    assert "**" not in text and "Yes" in text and "https://example.com/menu" in text and "soup" in text
    assert msg.get_content_type() == "text/plain"


def test_names_are_sanitised_and_mail_is_parsed_leniently() -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\Users\\me\\report final.pdf") == "report_final.pdf"
    assert safe_name("...") == "attachment"
    assert len(safe_name("a" * 300 + ".txt")) == 100 and safe_name("a" * 300 + ".txt").endswith(".txt")
    parsed = parse_mail(b"garbage without headers", "fallback@id")
    assert parsed.message_id == "fallback@id" and parsed.sender == ""


def test_a_thread_is_found_through_the_bots_own_reply(tmp_path: Path) -> None:
    store = ThreadStore(tmp_path / "threads.json")
    root = store.root_of("m1@x", None, [])
    assert root == "m1@x"
    store.note_mail("m1@x", root, thread_key(root), MailRecord(thread_key(root), "a@x", "Hi", ["m1@x"]))
    store.answered("m1@x", "d1", "lucid.d1@bot")
    store.save()
    again = ThreadStore(tmp_path / "threads.json")  # a restart
    assert again.root_of("m2@x", "lucid.d1@bot", []) == "m1@x"  # the client named only our reply
    assert again.mail("m1@x") is not None and again.mail("m1@x").answered == "d1"  # type: ignore[union-attr]
    assert again.root_of("m3@x", "unknown@y", ["first@y", "unknown@y"]) == "first@y"


def test_allow_from_takes_addresses_and_domains_case_insensitively() -> None:
    roster = roster_of(EmailConfig(allow_from=["Alice@Example.com", "@friends.org", "family.net"],
                                   owners=["Owner@Example.com"]))
    assert roster.allows("alice@example.com")
    assert roster.allows("bob@friends.org", "friends.org")
    assert roster.allows("kid@family.net", "family.net")
    assert not roster.allows("eve@evil.org", "evil.org")
    assert roster.is_owner("owner@example.com")


def test_preflight_names_the_setting_to_fix() -> None:
    assert "address" in (preflight(EmailConfig()) or "")
    assert "imapHost" in (preflight(EmailConfig(address="a@b.c")) or "")
    assert "password" in (preflight(EmailConfig(address="a@b.c", imap_host="h")) or "")
    assert "moveTo" in (preflight(EmailConfig(address="a@b.c", imap_host="h", password="p",
                                              after_handling="move")) or "")
    assert preflight(EmailConfig(address="a@b.c", imap_host="h", password="p")) is None


def test_the_uid_state_belongs_to_one_account(tmp_path: Path) -> None:
    path = tmp_path / "email.json"
    save_state(path, ImapState("me@host/INBOX", 7, 42))
    assert load_state(path, "me@host/INBOX") == ImapState("me@host/INBOX", 7, 42)
    assert load_state(path, "other@host/INBOX") == ImapState("other@host/INBOX")
    path.write_text("{not json")
    assert load_state(path, "me@host/INBOX") == ImapState("me@host/INBOX")
