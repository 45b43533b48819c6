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

Several agents (``agents.list``, docs/agents.md): each agent's parts are built over its own
workspace by ``build_agent`` (gateway/agent_stack.py); the bus (with the ``Router`` that
stamps each message's agent), the channels, the metrics and the daemon's own stores (inbox,
outbox, pairing: the default agent's workspace) are built here once and shared. Without a
list the one agent is built from the config itself, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from lucidgate.channels.base import Channel
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.cli import CliChannel
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.registry import build_channels
from lucidgate.channels.routing import Router
from lucidgate.config.schema import Config
from lucidgate.gateway.agent_stack import AgentStack, Mode, Shared, build_agent, build_dream, build_model
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.gateway.components import AgentRun, Grace, History, Intake, ModelClient, WorkspaceFiles
from lucidgate.gateway.lifecycle import Lifecycle, Step
from lucidgate.gateway.runtime import ConsoleAgents, ConsoleParts, Gateway, GatewayParts, HttpParts
from lucidgate.gateway.tools.memory_search import MemorySearch
from lucidgate.memory import tokens
from lucidgate.memory.sessions_view import SessionsOnDisk

__all__ = ["Gateway", "Mode", "build_dream", "build_gateway", "build_model"]

logger = logging.getLogger(__name__)

CHANNELS = "channels"  # the components group the channels start in, between the bus and the flush




def build_gateway(config: Config, mode: Mode = "embedded", *, http: bool = False,
                  on_unsolicited: Callable[[str], None] | None = None,
                  on_progress: Callable[[str, str | None], None] | None = None,
                  only_agent: str | None = None) -> Gateway:
    """Wire a gateway for ``mode``. For ``lucid agent``'s terminal: ``on_unsolicited`` prints what
    reaches it unasked, ``on_progress`` shows an answer as it is written, and ``only_agent``
    (``lucid agent --agent ID``) builds that one agent alone, over its own workspace, its
    terminal's messages stamped for it as the daemon would route them (same session keys)."""
    background_jobs = mode in ("daemon", "embedded")
    metrics = Metrics(config.agent_ids())  # labelled by agent when there are several
    # The default agent (or the one agent asked for); the daemon's stores are its.
    base = config.for_agent(only_agent or config.default_agent_id)
    daemon_stores = WorkspaceParts(base)
    router = Router(config)
    routed = router.several and only_agent is None  # one agent alone: its terminal stamps its messages
    # Each other agent's workspace, where the channels find the files of its replies.
    others = {agent_id: config.for_agent(agent_id).workspace for agent_id in config.agent_ids()
              if agent_id != config.default_agent_id}
    bus = MessageBus(maxsize=config.gateway.inbound_queue_size, inbox=daemon_stores.inbox(daemon=background_jobs),
                     # `lucid agent` prints its own replies: only the daemon records them.
                     outbox=daemon_stores.outbox if background_jobs else None,
                     lane_idle_s=config.gateway.worker_idle_s, router=router if routed else None,
                     agent_workspaces=others)
    bus.delivery.on_dead.append(metrics.dead_letter)
    stacks = _agent_stacks(config, Shared(bus, metrics, mode), only=only_agent)
    parts = stacks[0].parts
    metrics.track_turns(bus, [(stack.id, stack.stamp, stack.parts.agent) for stack in stacks])
    bus.observe(metrics.outbound)
    serves_http = http or mode == "daemon"
    # What every channel is built with, complete: nothing is handed to a channel afterwards.
    # The command specs fill platform menus (Telegram's); every gate shares the one pairing store.
    # Channels are the daemon's: built with the default agent's workspace, commands and sessions.
    deps = ChannelDeps(bus, base.workspace, daemon_stores.pairing, commands=tuple(parts.commands.specs()),
                       sessions=SessionsOnDisk(parts.sessions, {s.stamp: s.parts.sessions for s in stacks[1:]},
                                               default=stacks[0].id))
    channels = _channels_for(mode, config, deps, http=serves_http,
                             terminal=partial(CliChannel, bus, on_unsolicited=on_unsolicited, on_progress=on_progress,
                                              agent=stacks[0].stamp))
    grace = Grace(config.gateway.shutdown_grace_s)
    components = _components(stacks, channels, grace, short_lived=mode == "agent")
    return Gateway(parts, components, grace, http=_http_parts(stacks, channels) if serves_http else None,
                   channel_deps=deps, agents={stack.id: stack.parts for stack in stacks})


def _agent_stacks(config: Config, shared: Shared, *, only: str | None = None) -> list[AgentStack]:
    """Each agent's parts over its own workspace, the default agent first (or agent ``only``
    alone, still kept from the others' workspaces). Without ``agents.list`` that is one
    agent, built from ``config`` itself."""
    ids = config.agent_ids()
    configs = {agent_id: config.for_agent(agent_id) for agent_id in ids}
    stacks = []
    for agent_id in ids if only is None else [only]:
        others = [c.workspace for other, c in configs.items() if other != agent_id]
        stamp = "" if agent_id == ids[0] else agent_id
        media_from = configs[ids[0]].workspace if stamp else None  # the channels save attachments there
        stacks.append(build_agent(agent_id, configs[agent_id], shared, stamp=stamp, other_workspaces=others,
                                  media_from=media_from))
    _share_recall(config, {stack.id: stack for stack in stacks})
    return stacks


def _share_recall(config: Config, stacks: Mapping[str, AgentStack]) -> None:
    """``shareWith``: an agent's memory_search also reads the named agents' memory, read-only
    (among the agents built: one agent alone reads only its own)."""
    for entry in config.agents.entries:
        if entry.id not in stacks:
            continue
        search = stacks[entry.id].parts.tools.get("memory_search")
        if isinstance(search, MemorySearch):
            search.shared = {other: recall for other in entry.share_with
                             if other in stacks and (recall := stacks[other].parts.recall) is not None}


def _components(stacks: Sequence[AgentStack], channels: Mapping[str, Channel], grace: Grace, *,
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

    With several agents each step is taken for every agent in turn (the default agent
    first, under the plain names; another's parts are named ``<part> (<agent>)``).
    """
    life = Lifecycle()
    default = stacks[0].parts

    def each(add: Callable[[str, GatewayParts], None]) -> None:
        for stack in stacks:
            add("" if stack is stacks[0] else f" ({stack.id})", stack.parts)

    each(lambda at, p: life.add(f"workspace{at}", WorkspaceFiles(p.config.workspace)))
    each(lambda at, p: life.add(f"history{at}", History(p.git)))
    each(lambda at, p: life.add(f"usage{at}", Step(p.usage.start, p.usage.aclose)))
    if not short_lived:
        life.add("tokenizer", Step(tokens.ready))
    each(lambda at, p: life.add(f"provider{at}", ModelClient(p.model, p.config.agent.model)))
    life.add("bus", Intake(default.bus))
    life.group(CHANNELS)
    for name, channel in channels.items():
        life.add_to(CHANNELS, name, channel)
    life.add("outbound flush", Step(stop=lambda: asyncio.wait_for(default.bus.flush_outbound(), OUTBOUND_FLUSH_S)))
    each(lambda at, p: _agent_components(life, at, p, grace))
    each(lambda at, p: life.add(f"scheduler{at}", p.scheduler))
    return life


def _agent_components(life: Lifecycle, at: str, p: GatewayParts, grace: Grace) -> None:
    """One agent's memory commits, MCP, recall index, approvals and loop, in that order."""
    if p.committer is not None:
        committer = p.committer  # hand edits made while we were down at start; the last turns' commits at stop
        life.add(f"memory commits{at}", Step(_ignore_result(committer.commit_manual_edits), committer.drain))
    if p.mcp is not None:  # spawns supervisors; turns wait for them, readiness never does
        life.add(f"mcp{at}", p.mcp)
    if p.recall is not None:
        life.add(f"recall index{at}", p.recall)
    if p.approvals is not None:
        life.add(f"approvals{at}", p.approvals)
    life.add(f"agent{at}", AgentRun(p.agent, grace))


OUTBOUND_FLUSH_S = 15.0  # how long the last replies get to leave before the channels close


def _ignore_result(call: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await call()

    return run


def _http_parts(stacks: Sequence[AgentStack], channels: Mapping[str, Channel]) -> HttpParts:
    """What the HTTP app serves: the default agent's parts for its own routes, and every
    agent's console parts (the default first) for the console."""
    cli = channels["cli"]
    assert isinstance(cli, CliChannel)
    console = ConsoleAgents({stack.id: _console_parts(stack) for stack in stacks})
    p = stacks[0].parts
    return HttpParts(config=p.config, metrics=p.metrics, model=p.model, recall=p.recall, cli=cli, console=console)


def _console_parts(stack: AgentStack) -> ConsoleParts:
    p = stack.parts
    return ConsoleParts(config=p.config, commands=p.commands, sessions=p.sessions, store=p.store, git=p.git,
                        dream=p.dream, usage=p.usage, bus=p.bus, model=p.model, agent=p.agent,
                        scheduler=p.scheduler, recall=p.recall, approvals=p.approvals, stamp=stack.stamp)


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
            from lucidgate.channels.web import build as build_web

            channels["web"] = build_web(config, deps)
        channels["cli"] = CliChannel(deps.bus)
    return channels
