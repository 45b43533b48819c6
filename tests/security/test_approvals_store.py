"""The approval store's guarantees on their own: an action's digest ignores key order and
spacing but nothing else; a request cut off mid-run by a crash is never run again; ``off`` is
said loudly at start."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.approvals.store import ApprovalRequest, ApprovalStore, action_digest, canonical
from tests.fakes.llm import FakeLLMServer, Reply


def request(**changes: object) -> ApprovalRequest:
    fields: dict[str, object] = dict(tool="exec", arguments=canonical('{"command": "ls"}'), session_key="telegram:-1",
                                     channel="telegram", chat_id="-1", chat_type="group", sender_id="42",
                                     origin="a guest's message", quote="run ls", created_at=1.0, expires_at=2.0)
    fields.update(changes)
    return ApprovalRequest.new(**fields)  # type: ignore[arg-type]


def test_the_digest_binds_the_exact_action_whatever_its_spelling() -> None:
    spelled = canonical('{ "timeout_s": 5,\n "command": "ls" }')
    assert spelled == canonical({"command": "ls", "timeout_s": 5})
    assert action_digest("exec", spelled) == action_digest("exec", canonical({"timeout_s": 5, "command": "ls"}))
    assert action_digest("exec", spelled) != action_digest("exec", canonical({"command": "ls ", "timeout_s": 5}))
    assert action_digest("exec", spelled) != action_digest("write_file", spelled)


def test_ids_are_unguessable_and_a_request_running_at_a_crash_is_never_run_again(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "state" / "approvals.json")
    first, second = request(), request()
    assert first.id != second.id and len(first.id) >= 16
    store.add(first)
    store.add(second)
    store.update(first, status="running")
    reloaded = ApprovalStore(store.path)
    [cut] = reloaded.load()
    assert cut.id == first.id and cut.status == "interrupted"
    assert [r.id for r in reloaded.pending()] == [second.id]
    assert reloaded.find(first.id[:-1]) is None and reloaded.find(second.id) is not None
    assert json.loads(store.path.read_text())["v"] == 1
    assert store.path.stat().st_mode & 0o077 == 0  # private to the owner


async def test_approvals_off_is_said_loudly_at_start(make_config: Callable[..., Config],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    gateway = build_gateway(make_config(tools={"approvals": "off"}))
    with caplog.at_level(logging.WARNING, logger="lucidgate.gateway.approvals.gate"):
        async with gateway:
            pass
    assert any("tools.approvals is OFF" in r.getMessage() for r in caplog.records)


async def test_an_expiry_is_a_decision_with_its_time_and_nobody_as_its_author(
        make_config: Callable[..., Config], fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("It was not run."))
    gateway = build_gateway(make_config())
    async with gateway:
        approvals = gateway.parts.approvals
        assert approvals is not None
        now = time.time()
        late = request(created_at=now - 60, expires_at=now - 1)
        await asyncio.to_thread(approvals.store.add, late)
        await approvals.expire_due()
        expired = approvals.find(late.id)
        await gateway.parts.agent.idle()
    assert expired is not None and (expired.status, expired.decided_by) == ("expired", None)
    assert expired.decided_at is not None and expired.decided_at >= late.expires_at
