"""One agent's parts, wired over its own workspace: what ``build_gateway`` builds once per agent.

An agent (issue 41; ``agents.list``) is a workspace and the settings ``Config.for_agent``
gives it. Everything that reads or writes an agent's memory is built here from that config
alone, so it reaches that workspace and no other: its stores (``WorkspaceParts``), the model
client with its usage ledger, the recall index, the context builder, the tools (file tools
rooted in its workspace; with several agents confined to it and exec sandboxed with the
other workspaces hidden), the consolidator, Dream, the runner, the ``AgentLoop`` that takes
only this agent's messages from the bus, its commands and its scheduler (Dream schedule,
heartbeat, reminders). The daemon's shared parts come in ``Shared``: the bus, the metrics,
the embedders (one per embedding setting, whatever the number of agents).

Without ``agents.list`` the one agent is the default one, its config the root config, and
this builds exactly what the composition root built before there were several agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import OutboundProgress, SessionRef
from lucidgate.channels.registry import channel_hints, streaming_channels
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.commands import CommandRegistry
from lucidgate.gateway.agent.context import ContextBuilder
from lucidgate.gateway.agent.loop import AgentLoop
from lucidgate.gateway.agent.memory_commits import CommittingRunner, MemoryCommitter, record_memory_writes
from lucidgate.gateway.agent.memory_flush import MemoryFlush
from lucidgate.gateway.agent.roles import history_provenance, last_user_line, line_role
from lucidgate.gateway.agent.runner import PromptEstimator
from lucidgate.gateway.agent.toolloop import ModelToolLoop
from lucidgate.gateway.approvals.gate import Approvals, owner_private_chats
from lucidgate.gateway.commands.approvals import Approve, Deny
from lucidgate.gateway.commands.memory import DreamLog, DreamNow, DreamRestore, Forget, ShowMemory
from lucidgate.gateway.commands.model import SwitchModel
from lucidgate.gateway.commands.session import STOP, Compact, Help, New
from lucidgate.gateway.commands.status import Context, Status
from lucidgate.gateway.mcp import McpManager
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.model.client import LiteLLMChatModel, SharedLLMIO
from lucidgate.gateway.model.fallback import ModelChain
from lucidgate.gateway.model.task_budget import BudgetedModel
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.gateway.runtime import GatewayParts
from lucidgate.gateway.skills.catalog import SkillsLoader, builtin_skills_dir, config_checker
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.builtin import builtin_tools
from lucidgate.gateway.tools.cron import CronTool
from lucidgate.gateway.tools.memory_forget import MemoryForget, MemoryList
from lucidgate.gateway.tools.memory_search import MemoryGet, MemorySearch
from lucidgate.gateway.tools.message import MessageTool
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.gateway.tools.web import web_tools
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.dream import Dream
from lucidgate.memory.search.configured import Embedders
from lucidgate.memory.search.service import make_recall_service
from lucidgate.memory.search.threads import RecallThreads
from lucidgate.memory.search.watch_hub import WatchHub
from lucidgate.memory.sessions import Session
from lucidgate.scheduler.heartbeat import Heartbeat
from lucidgate.scheduler.reminder_jobs import ReminderJobs
from lucidgate.scheduler.service import SchedulerService, scheduler_timezone

__all__ = ["AgentStack", "Shared", "build_agent", "build_dream", "build_model"]

Mode = Literal["daemon", "embedded", "agent"]


def build_model(config: Config, stores: WorkspaceParts, metrics: Metrics | None = None, *,
                chain: ModelChain | None = None, io: SharedLLMIO | None = None) -> LiteLLMChatModel:
    """The model client, with its fallback chain, usage ledger and token calibration; ``io``
    the I/O thread it shares with the other agents' clients."""
    if chain is None:
        chain = ModelChain(config, metrics=metrics, sessions=stores.session_models)
    return LiteLLMChatModel(config, usage=stores.usage, metrics=metrics, chain=chain, calibration=stores.calibration,
                            io=io)


def build_dream(config: Config, stores: WorkspaceParts, model: LiteLLMChatModel,
                metrics: Metrics | None = None) -> Dream:
    """Dream over the workspace's memory and history: the gateway's, and ``lucid dream``'s and
    ``lucid memory forget``'s without a gateway around it."""
    return Dream(stores.memory, stores.git, model, workspace=config.workspace, config=config.agent,
                 tool_loop=ModelToolLoop(model), builtin_skills=builtin_skills_dir(),
                 on_run=metrics.dream_run if metrics is not None else None)


@dataclass
class Shared:
    """What every agent of one gateway shares: the bus, the metrics, the embedders, the model
    clients' I/O thread, the recall indexes' file watcher and threads."""

    bus: MessageBus
    metrics: Metrics
    mode: Mode
    embedders: Embedders = field(default_factory=Embedders)
    llm_io: SharedLLMIO = field(default_factory=SharedLLMIO)
    watch_hub: WatchHub = field(default_factory=WatchHub)
    recall_threads: RecallThreads = field(default_factory=RecallThreads)


@dataclass(frozen=True, slots=True)
class AgentStack:
    """One agent's parts (``parts``), the workspace parts they came from, and its id as its
    messages carry it (``stamp``: "" for the default agent)."""

    id: str
    stamp: str
    parts: GatewayParts
    stores: WorkspaceParts


def build_agent(agent_id: str, config: Config, shared: Shared, *, stamp: str = "",
                other_workspaces: Sequence[Path] = (), media_from: Path | None = None) -> AgentStack:
    """Wire agent ``agent_id`` from its own ``config`` (``Config.for_agent``); ``stamp`` is
    the id its messages carry ("" for the default agent), ``other_workspaces`` those of the
    daemon's other agents, which its tools must not reach; ``media_from`` the workspace the
    channels save attachments in, when it is not this agent's."""
    workspace, agent, bus = config.workspace, config.agent, shared.bus
    metrics = shared.metrics.for_agent(agent_id)  # counts under the agent's id (a label with several)
    background_jobs = shared.mode in ("daemon", "embedded")
    stores = WorkspaceParts(config)
    sessions, store, git, usage = stores.sessions, stores.memory, stores.git, stores.usage
    calibration, owner_sessions = stores.calibration, stores.owner_sessions
    chain = ModelChain(config, metrics=metrics, sessions=stores.session_models)
    model = build_model(config, stores, metrics, chain=chain, io=shared.llm_io)
    # The recall index (background sync + watcher; `lucid agent` is short-lived: no watcher).
    recall = make_recall_service(config, watch=shared.mode != "agent", embedders=shared.embedders,
                                 hub=shared.watch_hub, threads=shared.recall_threads)
    builder = ContextBuilder(agent, workspace, history=store, owner_sessions=owner_sessions,
                             channel_hints=channel_hints(), recall=recall,
                             skills=SkillsLoader(workspace, config_check=config_checker(config)))
    tools = ToolRegistry(builtin_tools(config, other_agents=other_workspaces),
                         max_result_chars=agent.max_tool_result_chars, guest_tools=config.tools.guest_tools)
    tools.register(MessageTool(bus, agent=stamp))
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
    dream = build_dream(config, stores, model, metrics)

    async def progress(ctx: TurnContext, text: str, activity: str | None) -> None:
        await bus.publish_outbound(OutboundProgress(ctx.target, text, activity=activity))

    committer = MemoryCommitter(git, workspace)  # every memory change is a commit
    mcp = McpManager(config.tools.mcp_servers, tools) if config.tools.mcp_servers else None
    record_memory_writes(tools, committer)
    approvals = Approvals(store=stores.approvals, tools=tools, bus=bus, mode=config.tools.approvals,
                          timeout_s=config.tools.approval_timeout_s,
                          max_pending=config.tools.max_pending_approvals,
                          owner_chats=owner_private_chats(owner_sessions, bus.has_route, agent=stamp),
                          agent=stamp)
    runner = CommittingRunner(committer=committer, model=BudgetedModel(model), builder=builder, tools=tools,
                              sessions=sessions, max_iterations=agent.max_tool_iterations,
                              force_consolidation=consolidator.force_round, metrics=metrics,
                              progress=progress, streaming_channels=streaming_channels(config),
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
                           flush=flush, agent=stamp, media_from=media_from)
    tz, tasks = scheduler_timezone(config), agent.tasks
    reminder_jobs = ReminderJobs(stores.reminders, bus, tz, grace_s=tasks.missed_grace_s, min_every_s=tasks.min_every_s,
                                 task_token_budget=tasks.token_budget, guest_max_active=tasks.guest_max_active,
                                 owners_of=config.channels.owners_of, on_sent=agent_loop.record_reminder,
                                 agent=stamp)
    heartbeat = Heartbeat(agent.heartbeat, workspace=workspace, bus=bus, usage=usage, tz=tz, state=stores.job_state,
                          agent=stamp)
    scheduler = SchedulerService(config, bus=bus, dream=dream, state=stores.job_state, reminders=reminder_jobs,
                                 heartbeat=heartbeat, background_jobs=background_jobs)
    tools.register(CronTool(scheduler))
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
    register_commands(parts, flush=flush, chain=chain)
    return AgentStack(agent_id, stamp, parts, stores)


def register_commands(p: GatewayParts, *, flush: MemoryFlush, chain: ModelChain) -> None:
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
