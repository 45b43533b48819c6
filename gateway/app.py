"""The composition root: ``build_gateway(config, mode) -> Gateway`` wires every part in plain view.

This is the only place parts are built — for the daemon, ``lucid agent`` and tests alike —
and the only place their life is ordered: each part that has one is registered as a
component (gateway/lifecycle.py), in the order ``Gateway`` starts them (and, reversed, stops
them). Nothing is built at import time, and nothing is started here. One-off CLI commands do
not build a gateway: they take stores from ``WorkspaceParts`` and, to dream or forget,
``build_dream`` — the model client and Dream alone. The modes differ only in which channels
exist and which jobs run:

    daemon    the channels enabled in config, plus the terminal channel behind the local API;
              Dream and the heartbeat on schedule                      (``lucid gateway``)
    embedded  only the channels the caller adds; Dream and heartbeat on (tests, benchmarks)
    agent     the terminal channel, its own inbox journal; reminders only  (``lucid agent``)

A daemon gateway also gets what its HTTP app serves (``http``: the terminal channel behind
the local API, the web chat when the console is on); ``http=True`` gives an embedded one the
same, for a test that serves it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Literal

from lucidgate.channels.base import Channel
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.cli import CliChannel
from lucidgate.channels.deps import ChannelDeps
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
from lucidgate.gateway.components import AgentRun, Grace, History, Intake, ModelClient, WorkspaceFiles
from lucidgate.gateway.lifecycle import Lifecycle, Step
from lucidgate.gateway.runtime import ConsoleParts, Gateway, GatewayParts, HttpParts
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
from lucidgate.memory import tokens
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.dream import Dream
from lucidgate.memory.search.service import make_recall_service
from lucidgate.memory.sessions import Session
from lucidgate.memory.sessions_view import SessionsOnDisk
from lucidgate.scheduler.heartbeat import Heartbeat
from lucidgate.scheduler.reminder_jobs import ReminderJobs
from lucidgate.scheduler.service import SchedulerService, scheduler_timezone

__all__ = ["Gateway", "Mode", "build_dream", "build_gateway", "build_model"]

logger = logging.getLogger(__name__)

Mode = Literal["daemon", "embedded", "agent"]

CHANNELS = "channels"  # the components group the channels start in, between the bus and the flush


def build_model(config: Config, stores: WorkspaceParts, metrics: Metrics | None = None, *,
                chain: ModelChain | None = None) -> LiteLLMChatModel:
    """The model client, with its fallback chain, usage ledger and token calibration."""
    if chain is None:
        chain = ModelChain(config, metrics=metrics, sessions=stores.session_models)
    return LiteLLMChatModel(config, usage=stores.usage, metrics=metrics, chain=chain, calibration=stores.calibration)


def build_dream(config: Config, stores: WorkspaceParts, model: LiteLLMChatModel,
                metrics: Metrics | None = None) -> Dream:
    """Dream over the workspace's memory and history: the gateway's, and ``lucid dream``'s and
    ``lucid memory forget``'s without a gateway around it."""
    return Dream(stores.memory, stores.git, model, workspace=config.workspace, config=config.agent,
                 tool_loop=ModelToolLoop(model), builtin_skills=builtin_skills_dir(),
                 on_run=metrics.dream_run if metrics is not None else None)


def build_gateway(config: Config, mode: Mode = "embedded", *, http: bool = False,
                  on_unsolicited: Callable[[str], None] | None = None,
                  on_progress: Callable[[str, str | None], None] | None = None) -> Gateway:
    """Wire a gateway for ``mode``. For ``lucid agent``'s terminal: ``on_unsolicited`` prints what
    reaches it unasked, ``on_progress`` shows an answer as it is written."""
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
    calibration = stores.calibration
    chain = ModelChain(config, metrics=metrics, sessions=stores.session_models)
    model = build_model(config, stores, metrics, chain=chain)
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
    dream = build_dream(config, stores, model, metrics)

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
    tz, tasks = scheduler_timezone(config), agent.tasks
    reminder_jobs = ReminderJobs(stores.reminders, bus, tz, grace_s=tasks.missed_grace_s, min_every_s=tasks.min_every_s,
                                 task_token_budget=tasks.token_budget, guest_max_active=tasks.guest_max_active,
                                 owners_of=config.channels.owners_of, on_sent=agent_loop.record_reminder)
    heartbeat = Heartbeat(agent.heartbeat, workspace=workspace, bus=bus, usage=usage, tz=tz, state=stores.job_state)
    scheduler = SchedulerService(config, bus=bus, dream=dream, state=stores.job_state, reminders=reminder_jobs,
                                 heartbeat=heartbeat, background_jobs=background_jobs)
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
    serves_http = http or mode == "daemon"
    # What every channel is built with, complete: nothing is handed to a channel afterwards.
    # The command specs fill platform menus (Telegram's); every gate shares the one pairing store.
    deps = ChannelDeps(bus, workspace, stores.pairing, commands=tuple(commands.specs()),
                       sessions=SessionsOnDisk(sessions))
    channels = _channels_for(mode, config, deps, http=serves_http,
                             terminal=partial(CliChannel, bus, on_unsolicited=on_unsolicited, on_progress=on_progress))
    grace = Grace(config.gateway.shutdown_grace_s)
    components = _components(parts, channels, grace, short_lived=mode == "agent")
    return Gateway(parts, components, grace, http=_http_parts(parts, channels) if serves_http else None,
                   channel_deps=deps)


def _components(p: GatewayParts, channels: Mapping[str, Channel], grace: Grace, *,
                short_lived: bool) -> Lifecycle:
    """Every part with a life, in the order it starts (stopping is the reverse).

    The workspace and its history come first (templates, the memory repository), then what a
    turn needs before any message arrives: the usage journal read once and the tokenizer
    loaded once, both in threads (a short-lived ``lucid agent`` loads the tokenizer when a
    count needs it instead); the model client; the bus, replaying its inbox; the channels.
    Stopping, the replies of the last turns are flushed before the channels close, and the
    last memory commits finish after the agent stops. MCP, the recall index and approvals
    start before the agent: a resumed turn may use their tools or hold an action. The
    scheduler starts last, so no job fires into a gateway that is not serving yet.
    """
    life = Lifecycle()
    life.add("workspace", WorkspaceFiles(p.config.workspace))
    life.add("history", History(p.git))
    life.add("usage", Step(lambda: p.usage.start(), lambda: p.usage.aclose()))
    if not short_lived:
        life.add("tokenizer", Step(tokens.ready))
    life.add("provider", ModelClient(p.model, p.config.agent.model))
    life.add("bus", Intake(p.bus))
    life.group(CHANNELS)
    for name, channel in channels.items():
        life.add_to(CHANNELS, name, channel)
    life.add("outbound flush", Step(stop=lambda: asyncio.wait_for(p.bus.flush_outbound(), OUTBOUND_FLUSH_S)))
    if p.committer is not None:
        committer = p.committer  # hand edits made while we were down at start; the last turns' commits at stop
        life.add("memory commits", Step(_ignore_result(committer.commit_manual_edits), committer.drain))
    if p.mcp is not None:  # spawns supervisors; turns wait for them, readiness never does
        life.add("mcp", p.mcp)
    if p.recall is not None:
        life.add("recall index", p.recall)
    if p.approvals is not None:
        life.add("approvals", p.approvals)
    life.add("agent", AgentRun(p.agent, grace))
    life.add("scheduler", p.scheduler)
    return life


OUTBOUND_FLUSH_S = 15.0  # how long the last replies get to leave before the channels close


def _ignore_result(call: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await call()

    return run


def _http_parts(p: GatewayParts, channels: Mapping[str, Channel]) -> HttpParts:
    cli = channels["cli"]
    assert isinstance(cli, CliChannel)
    console = ConsoleParts(config=p.config, commands=p.commands, sessions=p.sessions, store=p.store, git=p.git,
                           dream=p.dream, usage=p.usage, bus=p.bus, model=p.model, agent=p.agent,
                           scheduler=p.scheduler, recall=p.recall, approvals=p.approvals)
    return HttpParts(config=p.config, metrics=p.metrics, model=p.model, recall=p.recall, cli=cli, console=console)


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


def _channels_for(mode: Mode, config: Config, deps: ChannelDeps, *,
                  http: bool, terminal: Callable[[], CliChannel]) -> dict[str, Channel]:
    channels: dict[str, Channel] = {}
    if mode == "daemon":
        channels = build_channels(config, deps)
    elif mode == "agent":
        return {"cli": terminal()}
    if http:
        # The terminal channel behind the local API (`lucid agent` beside a running daemon),
        # and the console's chat when both are on and the registry did not build it already.
        if config.console.enabled and config.channels.web.enabled and "web" not in channels:
            from lucidgate.channels.web import WebChannel

            channels["web"] = WebChannel(deps.bus, workspace=deps.workspace, turns=deps.sessions)
        channels["cli"] = CliChannel(deps.bus)
    return channels
