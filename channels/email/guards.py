"""Mail the channel must never answer: loops and automatic mail.

An assistant that answers mail can loop with anything else that answers mail: itself (a mail
from its own address), a vacation responder, a bounce, a mailing list that echoes every post.
``why_not_answer`` names the reason a mail is skipped, or returns None; the channel logs the
reason and marks the mail handled, so a skipped mail is never looked at twice either.

* the bot's own address in From (or in Sender), whatever else the mail says;
* ``Auto-Submitted`` other than ``no`` (RFC 3834), and the vendor headers of auto-replies
  (``X-Autoreply``, ``X-Autorespond``, Microsoft's ``X-Auto-Response-Suppress: All`` replies);
* bounces: ``mailer-daemon``/``postmaster`` senders, an empty Return-Path, delivery reports;
* ``Precedence: bulk/list/junk`` and mailing lists (``List-Id``, ``List-Unsubscribe``) unless
  ``answerLists`` is on.

The channel's own replies carry ``Auto-Submitted: auto-replied``, so a well-behaved responder
on the other side does not answer them either.
"""

from __future__ import annotations

from email.message import EmailMessage

__all__ = ["why_not_answer"]

_DAEMONS = ("mailer-daemon", "postmaster", "mail-daemon", "noreply-dmarc-support")


def why_not_answer(msg: EmailMessage, sender: str, *, own: str, answer_lists: bool) -> str | None:
    """The reason ``msg`` (from ``sender``, lowercased) gets no answer, or None."""
    own = own.lower()
    if not sender:
        return "no sender address"
    if sender == own or _address(msg.get("Sender")) == own:
        return "sent from the bot's own address"
    auto = str(msg.get("Auto-Submitted", "")).strip().lower()
    if auto and not auto.startswith("no"):
        return f"automatic mail (Auto-Submitted: {auto})"
    if msg.get("X-Autoreply") or msg.get("X-Autorespond") or msg.get("X-Autoresponder"):
        return "an auto-reply"
    local = sender.partition("@")[0]
    if local in _DAEMONS or local.startswith("mailer-daemon"):
        return f"a bounce or system mail ({local})"
    if str(msg.get("Return-Path", "")).strip() == "<>":
        return "a bounce (empty Return-Path)"
    if msg.get_content_type() == "multipart/report":
        return "a delivery or read report"
    if answer_lists:
        return None
    precedence = str(msg.get("Precedence", "")).strip().lower()
    if precedence in ("bulk", "list", "junk"):
        return f"bulk mail (Precedence: {precedence})"
    if msg.get("List-Id") or msg.get("List-Unsubscribe") or msg.get("List-Post"):
        return "a mailing-list mail (answerLists is off)"
    return None


def _address(header: object) -> str:
    addresses = getattr(header, "addresses", ()) if header is not None else ()
    return str(addresses[0].addr_spec).lower() if addresses else ""
