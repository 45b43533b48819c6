"""The workspace's stores, each built on first use: one factory for the daemon and the CLI.

``build_gateway`` (gateway/app.py) takes every store it wires from here, and so does each
``lucid`` command that reads or changes one (``lucid memory log``, ``lucid pairing approve``,
``lucid jobs`` …). So where a store lives under the workspace, and how it is configured, is
written once. A store is built when first asked for, and its module imported then, so a
CLI command pays only for what it touches (none of them import litellm).

    inbox.jsonl, inbox.cli.jsonl InboxJournal          accepted messages (daemon, one-off runs)
    sessions/                    SessionStore          the transcripts
    memory/, SOUL.md, USER.md …  MemoryStore, GitStore the memory files and their history
    usage/                       UsageLedger           the token journal
    state/pairing.json           PairingStore          approved strangers, one store for every gate
    state/owner_sessions.json    OwnerSessions         chats that are the owner's own
    state/models.json            SessionModels         per-session model presets
    state/token_calibration.json TokenCalibration      measured token scale per model
    state/scheduler.json         JobState              the scheduler's last and next runs
    state/reminders.sqlite       ReminderStore         reminders and tasks
    state/outbox.sqlite          Outbox                the daemon's undelivered replies
    state/memory_commit.json     CommitHealth          the last memory commit's failure, if any
    state/forgotten.json         Tombstones            what the owner asked to forget
    state/approvals.json         ApprovalStore         actions held for the owner's approval
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from lucidgate.config.schema import Config

if TYPE_CHECKING:
    from lucidgate.channels.inbox import InboxJournal
    from lucidgate.channels.outbox import Outbox
    from lucidgate.channels.pairing import PairingStore
    from lucidgate.gateway.agent.roles import OwnerSessions
    from lucidgate.gateway.model.fallback import SessionModels
    from lucidgate.gateway.model.usage import UsageLedger
    from lucidgate.memory.calibration import TokenCalibration
    from lucidgate.memory.gitstore import GitStore
    from lucidgate.memory.sessions import SessionStore
    from lucidgate.memory.store import MemoryStore
    from lucidgate.memory.tombstones import Tombstones
    from lucidgate.scheduler.reminders import ReminderStore
    from lucidgate.gateway.approvals.store import ApprovalStore
    from lucidgate.scheduler.state import JobState

__all__ = ["WorkspaceParts"]


class WorkspaceParts:
    """The stores of ``config.workspace``; each property builds its store once, on first use."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.workspace = config.workspace
        self.state_dir = config.workspace / "state"

    @property
    def sessions_dir(self) -> Path:
        """Where the transcripts are (a listing needs no ``SessionStore``)."""
        return self.workspace / "sessions"

    @property
    def outbox_path(self) -> Path:
        return self.state_dir / "outbox.sqlite"

    @property
    def reminders_path(self) -> Path:
        return self.state_dir / "reminders.sqlite"

    def inbox(self, *, daemon: bool) -> InboxJournal:
        """The journal of accepted messages. ``lucid agent`` and one-off commands keep their own,
        so they can run beside a daemon (which replays only its own journal at start)."""
        from lucidgate.channels.inbox import InboxJournal

        return InboxJournal(self.workspace / ("inbox.jsonl" if daemon else "inbox.cli.jsonl"),
                            forgotten_version=self.tombstones.version)

    @cached_property
    def sessions(self) -> SessionStore:
        from lucidgate.memory.sessions import SessionStore

        return SessionStore(self.sessions_dir, tombstones=self.tombstones)

    @cached_property
    def tombstones(self) -> Tombstones:
        from lucidgate.memory.tombstones import Tombstones

        return Tombstones(self.workspace)

    @cached_property
    def memory(self) -> MemoryStore:
        from lucidgate.memory.store import MemoryStore

        agent = self.config.agent
        return MemoryStore(self.workspace, max_history_entries=agent.memory.max_history_entries,
                           timezone=agent.timezone, tombstones=self.tombstones)

    @cached_property
    def git(self) -> GitStore:
        from lucidgate.memory.commit_health import CommitHealth
        from lucidgate.memory.gitstore import GitStore

        return GitStore(self.workspace, health=CommitHealth(self.commit_state_path))

    @property
    def commit_state_path(self) -> Path:
        """The last memory commit's outcome (``lucid doctor`` reads it)."""
        return self.state_dir / "memory_commit.json"

    @cached_property
    def usage(self) -> UsageLedger:
        from lucidgate.gateway.model.usage import UsageLedger

        budgets = self.config.usage
        return UsageLedger(self.workspace / "usage", daily_budget=budgets.daily_token_budget,
                           role_budgets={"guest": budgets.guest_daily_token_budget,
                                         "owner": budgets.owner_daily_token_budget},
                           guest_share=budgets.guest_share)

    @cached_property
    def pairing(self) -> PairingStore:
        from lucidgate.channels.pairing import PairingStore, default_path

        return PairingStore(default_path(self.workspace))

    @cached_property
    def owner_sessions(self) -> OwnerSessions:
        from lucidgate.gateway.agent.roles import OwnerSessions

        return OwnerSessions(self.state_dir / "owner_sessions.json")

    @cached_property
    def approvals(self) -> ApprovalStore:
        from lucidgate.gateway.approvals.store import ApprovalStore

        return ApprovalStore(self.state_dir / "approvals.json")

    @cached_property
    def session_models(self) -> SessionModels:
        from lucidgate.gateway.model.fallback import SessionModels

        return SessionModels(self.state_dir / "models.json")

    @cached_property
    def calibration(self) -> TokenCalibration:
        from lucidgate.memory.calibration import TokenCalibration

        return TokenCalibration(self.state_dir / "token_calibration.json")

    @cached_property
    def job_state(self) -> JobState:
        from lucidgate.scheduler.state import JobState

        return JobState(self.state_dir / "scheduler.json")

    @cached_property
    def outbox(self) -> Outbox:
        """The daemon's durable outbox, with each channel's delivery deadline from its section."""
        from lucidgate.channels.outbox import Outbox
        from lucidgate.channels.registry import delivery_deadlines

        return Outbox(self.outbox_path, deadlines_s=delivery_deadlines(self.config))

    @cached_property
    def reminders(self) -> ReminderStore:
        from lucidgate.scheduler.reminders import ReminderStore

        return ReminderStore(self.reminders_path)
