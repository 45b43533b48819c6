"""The composition root: ``build_gateway(config, mode) -> Gateway`` wires every part in plain view.

This is the only place parts are built — for the daemon, ``lucid agent``, one-off CLI
commands and tests alike. Nothing is built at import time, and nothing is started here:
``Gateway`` (gateway/runtime.py) starts the parts in dependency order and stops them in
reverse. The modes differ only in which channels exist and which jobs run:

    daemon    the channels enabled in config, plus the terminal channel behind the local API;
              Dream and the heartbeat on schedule                      (``lucid gateway``)
    embedded  only the channels the caller adds; Dream and heartbeat on (tests, benchmarks)
    agent     the terminal channel, its own inbox journal; reminders only  (``lucid agent``)
    tool      no channel, its own inbox journal, no background jobs   (``lucid dream``)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

from lucidgate.channels.base import Channel, CommandSpec
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.cli import CliChannel
from lucidgate.channels.registry import build_channels, channel_hints, streaming_channels
from lucidgate.channels.messages import OutboundProgress, SessionRef
from lucidgate.gateway.agent.memory_flush import MemoryFlush
from lucidgate.config.schema import Config
from lucidgate.gateway.approvals.gate import Approvals, owner_private_chats
from lucidgate.gateway.commands.approvals import Approve, Deny
from lucidgate.gateway.commands.memory import DreamLog, DreamNow, DreamRestore, Forget, ShowMemory
from lucidgate.gateway.commands.model import SwitchModel
from lucidgate.gateway.commands.session import STOP, Compact, Help, New
from lucidgate.gateway.commands.status import Context, Status
from lucidgate.gateway.agent.commands import CommandRegistry
from lucidgate.gateway.agent.context import ContextBuilder
from lucidgate.gateway.model.fallback import ModelChain
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.agent.loop import AgentLoop
from lucidgate.gateway.mcp import McpManager
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.agent.memory_commits import CommittingRunner, MemoryCommitter, record_memory_writes
from lucidgate.gateway.agent.roles import history_provenance, last_user_line, line_role
from lucidgate.gateway.agent.runner import PromptEstimator
from lucidgate.gateway.parts import WorkspaceParts
from lucidgate.gateway.runtime import Gateway, GatewayParts
from lucidgate.gateway.skills.catalog import SkillsLoader, builtin_skills_dir, config_checker
from lucidgate.gateway.model.task_budget import BudgetedModel
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.builtin import builtin_tools
from lucidgate.gateway.tools.cron import CronTool
from lucidgate.gateway.tools.memory_forget import MemoryForget, MemoryList
from lucidgate.gateway.tools.memory_search import MemoryGet, MemorySearch
from lucidgate.gateway.tools.message import MessageTool
from lucidgate.gateway.agent.toolloop import ModelToolLoop
from lucidgate.gateway.tools.web import web_tools
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.dream import Dream
from lucidgate.memory.search.service import make_recall_service
from lucidgate.memory.sessions import Session
from lucidgate.scheduler import SchedulerService

__all__ = ["Gateway", "Mode", "add_http_surfaces", "build_gateway"]

logger = logging.getLogger(__name__)

Mode = Literal["daemon", "embedded", "agent", "tool"]



def build_gateway(config: Config, mode: Mode = "embedded", *,
                  on_unsolicited: Callable[[str], None] | None = None) -> Gateway:
    """Wire a gateway for ``mode``; ``on_unsolicited`` prints what reaches the terminal unasked."""
    workspace = config.workspace
    agent = config.agent
    background_jobs = mode in ("daemon", "embedded")
    metrics = Metrics()
    stores = WorkspaceParts(config)
    bus = MessageBus(maxsize=config.gateway.inbound_queue_size, inbox=stores.inbox(daemon=background_jobs),
                     # `lucid agent` prints its own replies: only the daemon records them.
                     outbox=stores.outbox if background_jobs else None,
                     lane_idle_s=config.gateway.worker_idle_s)
    bus.delivery.on_dead.append(metrics.dead_letter)
    sessions, store, git, usage = stores.sessions, stores.memory, stores.git, stores.usage
    chain = ModelChain(config, metrics=metrics, sessions=stores.session_models)
    calibration = stores.calibration
    model = LiteLLMChatModel(config, usage=usage, metrics=metrics, chain=chain, calibration=calibration)
    owner_sessions = stores.owner_sessions
    # The recall index (background sync + watcher; `lucid agent` is short-lived: no watcher).
    recall = make_recall_service(config, watch=mode != "agent")
    builder = ContextBuilder(agent, workspace, history=store, owner_sessions=owner_sessions,
                             channel_hints=channel_hints(), recall=recall,
                             skills=SkillsLoader(workspace, config_check=config_checker(config)))
    tools = ToolRegistry(builtin_tools(config), max_result_chars=agent.max_tool_result_chars,
                         guest_tools=config.tools.guest_tools)
    tools.register(MessageTool(bus))
    for web_tool in web_tools(config.tools.web):
        tools.register(web_tool)
    estimator = PromptEstimator(builder, tools, budget=agent.prompt_budget,
                                scale=partial(calibration.scale, agent.model))

    def origin_context(session: Session) -> TurnContext:
        """The context of the session's latest turn: its channel, chat and the role its sender
        was admitted in, so a guest's chat is sized without the owner's memory and tools."""
        origin = SessionRef.from_stored(session.metadata) or SessionRef("cli", "")
        last = last_user_line(session)
        return TurnContext(session_key=session.key, channel=origin.channel, chat_id=origin.chat_id,
                           sender_id=str(last.get("sender_id", "")),
                           role=line_role(config, origin.channel, last),
                           chat_type=origin.chat_type, workspace=workspace)

    async def estimate(session: Session) -> int:
        await calibration.ensure_loaded()  # once, in a worker thread
        # Bootstrap files are loaded by a turn's refresh; the first check after a start
        # comes before any turn and would count a prompt without them.
        await builder.refresh()
        return await estimator.estimate(session, origin_context(session))

    consolidator = Consolidator(sessions, store, model, estimate=estimate, budget=agent.prompt_budget,
                                on_event=metrics.consolidation, working_set=agent.working_set,
                                provenance=history_provenance(config, owner_sessions))
    dream = Dream(store, git, model, workspace=workspace, config=agent, tool_loop=ModelToolLoop(model),
                  builtin_skills=builtin_skills_dir(), on_run=metrics.dream_run)

    async def progress(ctx: TurnContext, text: str, activity: str | None) -> None:
        await bus.publish_outbound(OutboundProgress(ctx.target, text, activity=activity))

    streaming = streaming_channels(config)
    committer = MemoryCommitter(git, workspace)  # every memory change is a commit
    mcp = McpManager(config.tools.mcp_servers, tools) if config.tools.mcp_servers else None
    record_memory_writes(tools, committer)
    approvals = Approvals(store=stores.approvals, tools=tools, bus=bus, mode=config.tools.approvals,
                          timeout_s=config.tools.approval_timeout_s,
                          max_pending=config.tools.max_pending_approvals,
                          owner_chats=owner_private_chats(owner_sessions, bus.has_route))
    runner = CommittingRunner(committer=committer, model=BudgetedModel(model), builder=builder, tools=tools,
                              sessions=sessions, max_iterations=agent.max_tool_iterations,
                              force_consolidation=consolidator.force_round, metrics=metrics,
                              progress=progress, streaming_channels=streaming,
                              live_readers=bus.live_readers,
                              tools_ready=mcp.first_turn_wait if mcp is not None else None,
                              approvals=approvals)
    commands = CommandRegistry()
    flush = MemoryFlush(runner, sessions, conversation_tokens=consolidator.conversation_tokens,
                        working_set=agent.working_set if agent.memory.flush_before_compaction else None,
                        timezone=agent.timezone, soft_threshold_tokens=agent.memory.flush_soft_threshold_tokens,
                        transcript_bytes=agent.memory.flush_transcript_bytes,
                        instruction=agent.memory.flush_instruction, framing=agent.memory.flush_framing)
    agent_loop = AgentLoop(config=config, bus=bus, sessions=sessions, runner=runner, commands=commands,
                           owner_sessions=owner_sessions, consolidator=consolidator, metrics=metrics,
                           flush=flush)
    scheduler = SchedulerService(config, bus=bus, dream=dream, state=stores.job_state,
                                 reminder_store=stores.reminders, usage=usage, background_jobs=background_jobs,
                                 on_reminder_sent=agent_loop.record_reminder)
    tools.register(CronTool(scheduler))
    metrics.track_queue_depth(lambda: bus.inbound_depth + agent_loop.queued)
    metrics.track_active_turns(lambda: agent_loop.active_turns)
    metrics.track_workers(lambda: agent_loop.session_workers, lambda: bus.delivery_lanes)
    bus.observe(metrics.outbound)
    if recall is not None:  # its two tools; memory_search tells the committer of words that are not the owner's
        tools.register(MemorySearch(recall, on_untrusted=committer.read_untrusted))
        tools.register(MemoryGet(config.workspace))
    tools.register(MemoryForget(store, git, dream, index=recall.index if recall else None, sessions=sessions))
    tools.register(MemoryList())
    parts = GatewayParts(config=config, bus=bus, sessions=sessions, store=store, git=git, model=model,
                         builder=builder, tools=tools, consolidator=consolidator, dream=dream,
                         agent=agent_loop, commands=commands, usage=usage, metrics=metrics,
                         owner_sessions=owner_sessions, scheduler=scheduler, committer=committer, recall=recall,
                         mcp=mcp, approvals=approvals)
    _register_commands(parts, flush=flush, chain=chain)
    return Gateway(parts, _channels_for(mode, config, bus, on_unsolicited, commands.specs()),
                   short_lived=mode == "agent")


def _register_commands(p: GatewayParts, *, flush: MemoryFlush, chain: ModelChain) -> None:
    """Every built-in command, in the order ``/help`` and platform menus list them, each
    handed only the parts it reads."""
    agent, workspace, index = p.config.agent, p.config.workspace, p.recall.index if p.recall else None
    add = p.commands.register
    add(Help(p.commands))
    add(New(p.sessions, p.store, p.consolidator, workspace=workspace,
            session_notes=agent.memory.session_notes))
    p.commands.listed(STOP)
    add(Status(agent, sessions=p.sessions, model=p.model, usage=p.usage, consolidator=p.consolidator,
               store=p.store, dream=p.dream, scheduler=p.scheduler, bus=p.bus, flush=flush, mcp=p.mcp,
               recall=p.recall))
    add(Compact(p.sessions, p.consolidator))
    add(Context(agent, sessions=p.sessions, builder=p.builder, tools=p.tools))
    add(DreamNow(p.dream))
    add(DreamLog(p.git))
    add(DreamRestore(p.git))
    add(ShowMemory(p.store, workspace=workspace))
    add(Forget(p.dream, p.store, p.git, index=index, sessions=p.sessions))
    add(SwitchModel(chain))
    if p.approvals is not None:
        add(Approve(p.approvals))
        add(Deny(p.approvals))


def add_http_surfaces(gateway: Gateway) -> CliChannel:
    """The channels the daemon's HTTP app serves, on a gateway built without them (a test's
    embedded gateway): the terminal channel behind the local API, and the web console's chat
    when both are on. A daemon-mode gateway already has both. Returns the terminal channel."""
    from lucidgate.channels.web import WebChannel

    config = gateway.parts.config
    if config.console.enabled and config.channels.web.enabled and gateway.channel("web") is None:
        gateway.add_channel("web", WebChannel(gateway.parts.bus, workspace=config.workspace))
    cli = gateway.channel("cli")
    if not isinstance(cli, CliChannel):
        cli = CliChannel(gateway.parts.bus)
        gateway.add_channel("cli", cli)
    return cli


def _channels_for(mode: Mode, config: Config, bus: MessageBus,
                  on_unsolicited: Callable[[str], None] | None,
                  commands: Sequence[CommandSpec]) -> dict[str, Channel]:
    if mode == "daemon":
        # The command specs fill platform menus (Telegram's), generated from the registry.
        channels = build_channels(config, bus, workspace=config.workspace, commands=commands)
        # The terminal channel behind the local API: `lucid agent` beside a running daemon.
        channels["cli"] = CliChannel(bus)
        return channels
    if mode == "agent":
        return {"cli": CliChannel(bus, on_unsolicited=on_unsolicited)}
    return {}
