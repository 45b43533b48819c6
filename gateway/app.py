"""The composition root: ``build_gateway(config) -> Gateway`` wires every part in plain view.

Nothing is built at import time. ``Gateway`` is an async context manager that starts the
parts in dependency order and stops them in reverse: stop intake, drain turns, stop
workers, close clients (STYLE §1–2). The typer commands and the FastAPI lifespan only
create and enter it.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from channels.base import Channel
from channels.bus import MessageBus
from channels.inbox import InboxJournal
from channels.messages import OutboundProgress
from config.schema import Config
from gateway.commands import CommandRegistry
from gateway.context import ContextBuilder
from gateway.llm import LiteLLMChatModel
from gateway.loop import AgentLoop
from gateway.metrics import Metrics
from gateway.roles import OwnerSessions, role_of
from gateway.runner import PromptEstimator, TurnRunner
from gateway.tools.base import ToolRegistry
from gateway.tools.message import MessageTool
from gateway.turn import TurnContext
from gateway.usage import UsageLedger
from memory.consolidator import Consolidator
from memory.dream import Dream
from memory.gitstore import GitStore
from memory.sessions import Session, SessionStore
from memory.store import MemoryStore

logger = logging.getLogger(__name__)


@dataclass
class Gateway:
    config: Config
    bus: MessageBus
    sessions: SessionStore
    store: MemoryStore
    git: GitStore
    model: LiteLLMChatModel
    builder: ContextBuilder
    tools: ToolRegistry
    consolidator: Consolidator
    dream: Dream
    agent: AgentLoop
    commands: CommandRegistry
    usage: UsageLedger
    metrics: Metrics
    owner_sessions: OwnerSessions
    channels: dict[str, Channel] = field(default_factory=dict)
    failed_channels: dict[str, str] = field(default_factory=dict)
    extras: list[Any] = field(default_factory=list)
    _stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        workspace = self.config.workspace
        await asyncio.to_thread(_prepare_workspace, workspace)
        await asyncio.to_thread(self.git.init)
        await self.bus.start()
        for name, channel in list(self.channels.items()):
            try:
                await channel.start()
            except Exception as exc:  # one platform's refusal must not take the others down
                logger.error("%s: failed to start (%s) — disabled", name, exc)
                await _quietly(channel.stop(), name)
                del self.channels[name]
                self.failed_channels[name] = str(exc)
        await self.agent.start()
        for extra in self.extras:
            await extra.start()
        logger.info("gateway started: workspace %s, model %s", workspace, self.config.agent.model)

    async def stop(self, grace_s: float | None = None) -> None:
        grace = self.config.gateway.shutdown_grace_s if grace_s is None else grace_s
        # Intake first (channels see BusClosed and leave platform messages unacked), then
        # let turns finish and their replies go out, and only then stop the channels.
        self.bus.close_intake()
        for extra in reversed(self.extras):
            await _quietly(extra.stop(), "extra")
        await self.agent.stop(grace)
        await _quietly(asyncio.wait_for(self.bus.flush_outbound(), 15), "outbound flush")
        for name, channel in self.channels.items():
            await _quietly(channel.stop(), name)
        await self.bus.stop()
        self.model.close()


async def _quietly(awaitable: Any, what: str) -> None:
    try:
        await awaitable
    except Exception:
        logger.exception("stopping %s failed", what)


def _prepare_workspace(workspace: Any) -> None:
    from config.onboard import install_templates

    install_templates(workspace)


def build_gateway(config: Config, *, channels: dict[str, Channel] | None = None,
                  inbox_name: str = "inbox.jsonl") -> Gateway:
    """Wire a gateway; channels given here are used as-is (tests, the CLI).

    ``inbox_name`` lets ``lucid agent`` journal into its own inbox beside a running daemon.
    """
    from gateway.builtin_commands import register_builtin_commands
    from gateway.tools.builtin import builtin_tools

    workspace = config.workspace
    agent = config.agent
    metrics = Metrics()
    bus = MessageBus(inbox=InboxJournal(workspace / inbox_name))
    sessions = SessionStore(workspace / "sessions")
    store = MemoryStore(workspace, max_history_entries=agent.memory.max_history_entries,
                        timezone=agent.timezone)
    git = GitStore(workspace)
    usage = UsageLedger(workspace / "usage", daily_budget=config.usage.daily_token_budget)
    model = LiteLLMChatModel(config, usage=usage, metrics=metrics)
    owner_sessions = OwnerSessions(workspace / "state" / "owner_sessions.json")
    builder = ContextBuilder(agent, workspace, history=store, owner_sessions=owner_sessions)
    tools = ToolRegistry(builtin_tools(config), max_result_chars=agent.max_tool_result_chars,
                         guest_tools=config.tools.guest_tools)
    tools.register(MessageTool(bus))
    estimator = PromptEstimator(builder, tools, budget=agent.prompt_budget)

    def origin_context(session: Session) -> TurnContext:
        """The context of the session's latest turn: its channel, chat and the sender's role,
        so a guest's chat is sized without the owner's memory and tools."""
        origin = session.metadata.get("origin") or {}
        channel = origin.get("channel", "cli")
        sender = next((str(m.get("sender_id", "")) for m in reversed(session.messages)
                       if m.get("role") == "user"), "")
        return TurnContext(session_key=session.key, channel=channel,
                           chat_id=str(origin.get("chat_id", "")), sender_id=sender,
                           role=role_of(config, channel, sender),
                           chat_type=origin.get("chat_type", "private"), workspace=workspace)

    async def estimate(session: Session) -> int:
        return await estimator.estimate(session, origin_context(session))

    consolidator = Consolidator(sessions, store, model, estimate=estimate, budget=agent.prompt_budget,
                                on_event=metrics.consolidation)
    dream = Dream(store, git, model, workspace=workspace, config=agent,
                  owner_sessions=lambda key: key in owner_sessions)
    async def progress(ctx: TurnContext, text: str) -> None:
        await bus.publish_outbound(OutboundProgress(ctx.target, text))

    streaming = frozenset(name for name in ("telegram",)
                          if getattr(getattr(config.channels, name), "streaming", False))
    runner = TurnRunner(model=model, builder=builder, tools=tools, sessions=sessions,
                        max_iterations=agent.max_tool_iterations,
                        force_consolidation=consolidator.force_round, metrics=metrics,
                        progress=progress, streaming_channels=streaming)
    commands = CommandRegistry()
    agent_loop = AgentLoop(config=config, bus=bus, sessions=sessions, runner=runner, commands=commands,
                           owner_sessions=owner_sessions, consolidator=consolidator, metrics=metrics)
    gateway = Gateway(config=config, bus=bus, sessions=sessions, store=store, git=git, model=model,
                      builder=builder, tools=tools, consolidator=consolidator, dream=dream,
                      agent=agent_loop, commands=commands, usage=usage, metrics=metrics,
                      owner_sessions=owner_sessions, channels=dict(channels or {}))
    register_builtin_commands(gateway)
    # Scheduler: Dream every intervalH, reminders (cron tool), heartbeat. Only the daemon
    # (the default inbox) runs Dream and the heartbeat; `lucid agent` just its own reminders.
    from gateway.tools.cron import CronTool
    from scheduler import SchedulerService

    scheduler = SchedulerService(config, bus=bus, dream=dream, usage=usage,
                                 background_jobs=inbox_name == "inbox.jsonl")
    gateway.extras.append(scheduler)
    tools.register(CronTool(scheduler))
    metrics.track_queue_depth(lambda: bus.inbound_depth + agent_loop.queued)
    metrics.track_active_turns(lambda: agent_loop.active_turns)
    return gateway
