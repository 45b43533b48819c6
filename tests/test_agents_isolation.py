"""Several agents in one daemon, end to end (issue 41): one Telegram bot and one webhook serve
"home" and "work" by binding, and nothing told to one is ever found by the other.

The daemon is the real one (``GatewayServer``: the registry builds the Telegram channel over
the loopback Bot API stand-in, the webhook is served over HTTP); the LLM is the fake OpenAI
server reached through litellm. Isolation is checked where it would leak: the prompt, recall,
``memory_search``/``memory_get``, the file tools and exec, Dream's input, and roles.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lucidgate.config.loader import load_config
from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import load_session_file
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls, message_text
from tests.fakes.telegram_api import TOKEN, FakeTelegramAPI
from tests.waiting import until

OWNER = 42  # the channel's owner: home's owner
WORKER = 77  # work's owner on Telegram, allowed on the channel as a guest
GROUP = -100500  # a group bound to work
HOME_FACT = "The vault code is 7319."
SECRET = "7319"
LOCKER = "8842"
WORK_FACT = "The quarterly review is on Thursday."
HOOK_TOKEN = "wh-token-agents-0123456789abcdef"
FIRST_REPLY_TIMEOUT = 60.0


def request_text(request: dict[str, Any]) -> str:
    return "\n".join(message_text(m) for m in request["messages"])


def seed(root: Path) -> tuple[Path, Path]:
    home, work = root / "home", root / "work"
    for ws, fact in ((home, HOME_FACT), (work, WORK_FACT)):
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {fact}\n")
    return home, work


def agents_config(make_config: Callable[..., Config], root: Path, **extra: Any) -> Config:
    home, work = seed(root)
    return make_config(
        agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False},
                             "memory": {"search": {"embedding": {"model": "none"}, "watch": False}}},
                "list": [{"id": "home", "workspace": str(home)},
                         {"id": "work", "workspace": str(work),
                          "owners": {"telegram": [str(WORKER)], "fake": ["boss"]}}]},
        **extra)


def transcript(workspace: Path, key: str) -> list[dict[str, Any]]:
    return load_session_file(workspace / "sessions" / f"{session_file_stem(key)}.jsonl").messages


# ----------------------------------------------------------------------------- the daemon


async def test_one_bot_and_one_webhook_serve_two_agents_by_binding(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    async with FakeTelegramAPI() as tg:
        config = agents_config(
            make_config, tmp_path,
            channels={"telegram": {"enabled": True, "token": TOKEN, "apiBase": tg.base_url,
                                   "allowFrom": [str(OWNER), str(WORKER)], "owners": [str(OWNER)],
                                   "pollTimeoutS": 1, "watchdogS": 60},
                      "webhook": {"token": HOOK_TOKEN, "waitTimeoutS": 60, "rateLimitPerMin": 1000}},
            bindings=[{"agent": "work", "match": {"channel": "telegram", "sender": str(WORKER)}},
                      {"agent": "work", "match": {"channel": "telegram", "chat": str(GROUP)}},
                      {"agent": "work", "match": {"channel": "webhook", "chat": "w1"}}],
            gateway={"port": 0, "shutdownGraceS": 2})
        home, work = tmp_path / "home", tmp_path / "work"
        async with GatewayServer(config, access_log=False) as server:
            gateway = server.state.gateway
            assert list(gateway.agents) == ["home", "work"] and gateway.parts is gateway.agents["home"]
            await tg.wait_for("deleteWebhook")

            tg.push_message(chat_id=OWNER, text="hello home", message_id=1)
            await tg.wait_for("sendMessage", 1, timeout=FIRST_REPLY_TIMEOUT)
            tg.push_message(chat_id=WORKER, text="hello work", message_id=2)
            await tg.wait_for("sendMessage", 2, timeout=FIRST_REPLY_TIMEOUT)
            # An attachment for work is saved by the shared channel, then moves to work's workspace.
            doc = tg.add_file(b"%PDF-1.7 work plan", file_path="documents/plan.pdf")
            tg.push_message(chat_id=WORKER, caption="the plan", message_id=4,
                            document={**doc, "file_name": "plan.pdf", "mime_type": "application/pdf"})
            await tg.wait_for("sendMessage", 3, timeout=FIRST_REPLY_TIMEOUT)
            # The channel's owner in a group bound to work: a guest there.
            tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=OWNER,
                            text="@lucid_test_bot hello group", message_id=3)
            await tg.wait_for("sendMessage", 4, timeout=FIRST_REPLY_TIMEOUT)
            async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                         headers={"Authorization": f"Bearer {HOOK_TOKEN}"}) as client:
                bound = await client.post("/v1/messages", json={"chat_id": "w1", "sender_id": "u1",
                                                                "text": "hook for work"})
                unbound = await client.post("/v1/messages", json={"chat_id": "w2", "sender_id": "u1",
                                                                  "text": "hook for home"})
            assert bound.status_code == 200 and unbound.status_code == 200, (bound.text, unbound.text)
            for parts in gateway.agents.values():
                await parts.agent.idle()

    def asked(said: str) -> str:
        (found,) = [request_text(r) for r in fake_llm.requests if fake_llm.last_user_text(r).endswith(said)]
        return found

    assert len(fake_llm.requests) == 6
    attachment = f"media/telegram/{WORKER}/{doc['file_unique_id']}.pdf"
    assert (work / attachment).read_bytes() == b"%PDF-1.7 work plan" and not (home / attachment).exists()
    assert attachment in asked("the plan")
    # Each owner's prompt has its own agent's memory and never the other's; work's guests
    # (the webhook caller, home's owner in work's group) see neither home's memory nor recall.
    assert HOME_FACT in asked("hello home") and WORK_FACT not in asked("hello home")
    assert WORK_FACT in asked("hello work") and SECRET not in asked("hello work")
    for said in ("hook for work", "hello group", "hook for home"):
        assert SECRET not in asked(said) and WORK_FACT not in asked(said)

    # Each agent's sessions in its own workspace; the default agent's keys as they always were.
    assert transcript(home, f"telegram:{OWNER}")[0]["content"] == "hello home"
    assert transcript(home, "webhook:w2")[0]["content"] == "hook for home"
    assert transcript(work, "work:webhook:w1")[0]["content"] == "hook for work"
    assert not (home / "sessions" / f"{session_file_stem(f'telegram:{WORKER}')}.jsonl").exists()
    assert not list((work / "sessions").glob("telegram_*"))
    # Roles per agent: work's listed owner is its owner; home's owner is a guest in work.
    assert transcript(work, f"work:telegram:{WORKER}")[0]["sender_role"] == "owner"
    group_line = transcript(work, f"work:telegram:{GROUP}")[0]
    assert group_line["sender_id"] == str(OWNER) and group_line["sender_role"] == "guest"
    assert transcript(home, f"telegram:{OWNER}")[0]["sender_role"] == "owner"


# ----------------------------------------------------------------------------- tools and memory


def probes(home: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every way a tool could reach home's memory from work's turn."""
    memory = home / "memory" / "MEMORY.md"
    return [("read_file", {"path": str(memory)}),
            ("read_file", {"path": "../home/memory/MEMORY.md"}),
            ("list_dir", {"path": str(home / "memory")}),
            ("grep", {"pattern": SECRET, "path": str(home)}),
            ("edit_file", {"path": str(memory), "old_text": SECRET, "new_text": "0000"}),
            ("write_file", {"path": "../home/memory/MEMORY.md", "content": "overwritten"}),
            ("exec", {"command": f"cat {memory}"}),
            ("memory_get", {"path": str(memory)}),
            ("memory_get", {"path": "../home/memory/MEMORY.md"}),
            ("memory_search", {"query": "vault code"}),
            ("memory_search", {"query": "locker number"})]


async def test_every_tool_of_work_is_refused_home_and_memory_stays_apart(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    config = agents_config(make_config, tmp_path,
                           bindings=[{"agent": "work", "match": {"channel": "fake", "chat": "w"}}])
    home, work = tmp_path / "home", tmp_path / "work"
    gateway = build_gateway(config)
    channel = FakeChannel(gateway.parts.bus, "fake", owners=("boss",))
    gateway.add_channel("fake", channel)
    async with gateway:
        # Home is told a fact in chat (its transcript is part of what recall searches).
        fake_llm.queue(Reply("noted"))
        await channel.say(f"remember: my locker number is {LOCKER}", chat_id="h", sender_id="boss")
        await channel.wait_replies(1, timeout=FIRST_REPLY_TIMEOUT)
        # Work's owner tries every tool on home's memory.
        fake_llm.queue(ToolCalls(probes(home)), Reply("done"))
        await channel.say("look at home", chat_id="w", sender_id="boss")
        await channel.wait_replies(2, timeout=FIRST_REPLY_TIMEOUT)
        # The same searches in home find both: the search works, the index is home's alone.
        fake_llm.queue(ToolCalls([("memory_search", {"query": "vault code"}),
                                  ("memory_search", {"query": "locker number"})]), Reply("found"))
        await channel.say("search home", chat_id="h", sender_id="boss")
        await channel.wait_replies(3, timeout=FIRST_REPLY_TIMEOUT)
        # Dream in work reads work's history only.
        await gateway.agents["home"].store.append_history(f"- {HOME_FACT}", session_key="fake:h", owner=True)
        await gateway.agents["work"].store.append_history(f"- {WORK_FACT}", session_key="work:fake:w", owner=True)
        before = len(fake_llm.requests)
        fake_llm.queue(Reply("[SKIP]"))
        await gateway.agents["work"].dream.run()
        dream_requests = fake_llm.requests[before:]
    work_turn = fake_llm.requests[1:3]
    results = [message_text(m) for m in work_turn[1]["messages"] if m.get("role") == "tool"]
    assert len(results) == len(probes(home)), results
    assert all(SECRET not in r and LOCKER not in r for r in results), results
    assert all(SECRET not in request_text(r) and LOCKER not in request_text(r) for r in work_turn)
    for name_result in results[:6]:
        assert "outside the workspace" in name_result, name_result
    assert all("is not a memory source" in r for r in results[7:9]), results[7:9]
    assert (home / "memory" / "MEMORY.md").read_text() == f"# Memory\n\n- {HOME_FACT}\n"
    assert not (tmp_path / "memory").exists()  # nothing written beside the workspaces either
    home_search = [message_text(m) for m in fake_llm.requests[4]["messages"] if m.get("role") == "tool"]
    assert SECRET in home_search[0] and LOCKER in home_search[1], home_search
    assert dream_requests and all(SECRET not in request_text(r) for r in dream_requests)
    assert any(WORK_FACT in request_text(r) for r in dream_requests)
    assert transcript(work, "work:fake:w")[0]["sender_role"] == "owner"


def test_agents_with_the_same_embedding_settings_share_one_embedder(
        make_config: Callable[..., Config], tmp_path: Path) -> None:
    config = agents_config(make_config, tmp_path)
    config = config.model_copy(update={"agents": config.agents.model_copy(update={
        "defaults": config.agents.defaults.model_copy(update={"memory": config.agents.defaults.memory.model_copy(
            update={"search": config.agents.defaults.memory.search.model_copy(
                update={"embedding": type(config.agents.defaults.memory.search.embedding)(
                    model="openai/text-embedding-3-small")})})})})})
    gateway = build_gateway(config)
    home, work = (gateway.agents[a].recall for a in ("home", "work"))
    assert home is not None and work is not None and home is not work
    assert home.index.embedder is not None and home.index.embedder is work.index.embedder
    assert home.index.workspace != work.index.workspace


# ----------------------------------------------------------------------------- before several agents


async def test_a_workspace_and_config_from_before_several_agents_start_unchanged(
        tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    """Written as today's main writes them: config.json without agents.list, MEMORY.md, a
    transcript and an inbox journal line in the old shape. The pending message is replayed to
    the (only) agent, into the same session file, with the memory and the earlier turn."""
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {HOME_FACT}\n")
    (workspace / "sessions").mkdir()
    session = workspace / "sessions" / "fake_42.jsonl"
    header = {"_type": "metadata", "v": 1, "key": "fake:42", "created_at": "2026-11-01T10:00:00+00:00",
              "updated_at": "2026-11-01T10:00:05+00:00",
              "metadata": {"origin": {"channel": "fake", "chat_id": "42", "chat_type": "private", "thread_id": None}},
              "last_consolidated_in": "fake_42.state.json"}
    old_lines = [header,
                 {"role": "user", "content": "my dog is called Rex", "sender_id": "local", "sender_role": "owner",
                  "timestamp": "2026-11-01T10:00:00+00:00"},
                 {"role": "assistant", "content": "Noted: Rex.", "timestamp": "2026-11-01T10:00:05+00:00"}]
    session.write_text("".join(json.dumps(line) + "\n" for line in old_lines))
    pending = {"channel": "fake", "chat_id": "42", "sender_id": "local", "text": "what is my dog called?",
               "chat_type": "private", "thread_id": None, "media": [], "message_id": "m9", "sender_name": None,
               "silent": False, "task": None, "role": "owner", "spender": None}
    (workspace / "inbox.jsonl").write_text(json.dumps({"id": "e1", "msg": pending}) + "\n")
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model", "llmRetries": 0,
                                "dream": {"enabled": False}}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": fake_llm.base_url}}}))
    config = load_config(config_path, environ={})
    assert config.agent_ids() == ["default"] and config.for_agent("default") is config

    fake_llm.queue(Reply("Your dog is Rex."))
    gateway = build_gateway(config)
    channel = FakeChannel(gateway.parts.bus, "fake")
    gateway.add_channel("fake", channel)
    async with gateway:
        (reply,) = await channel.wait_replies(1, timeout=FIRST_REPLY_TIMEOUT)
        await gateway.parts.agent.idle()
    assert reply.text == "Your dog is Rex." and reply.target.chat_id == "42"  # type: ignore[union-attr]
    (request,) = fake_llm.requests
    text = request_text(request)
    assert HOME_FACT in text and "my dog is called Rex" in text and "what is my dog called?" in text
    assert sorted(p.name for p in (workspace / "sessions").glob("*.jsonl")) == ["fake_42.jsonl"]
    lines = transcript(workspace, "fake:42")
    assert [m["content"] for m in lines] == ["my dog is called Rex", "Noted: Rex.", "what is my dog called?",
                                             "Your dog is Rex."]
    assert (workspace / "memory" / "MEMORY.md").read_text() == f"# Memory\n\n- {HOME_FACT}\n"
    assert list(gateway.agents) == ["default"]


async def test_without_the_sandbox_exec_of_an_agent_among_several_refuses_to_run(
        make_config: Callable[..., Config], tmp_path: Path) -> None:
    from lucidgate.gateway.tools.turn import TurnContext

    config = agents_config(make_config, tmp_path, tools={"exec": {"sandbox": "off"}})
    gateway = build_gateway(config)
    work = gateway.agents["work"]
    exec_tool = work.tools.get("exec")
    assert exec_tool is not None and tmp_path / "home" in getattr(exec_tool, "hide")
    ctx = TurnContext(session_key="work:fake:w", channel="fake", chat_id="w", sender_id="boss", role="owner",
                      chat_type="private", workspace=tmp_path / "work")
    out = await work.tools.execute(ctx, "exec", {"command": f"touch {tmp_path}/ran"})
    assert "runs only inside the sandbox" in str(out) and not (tmp_path / "ran").exists()
    # A single agent's exec is as configured: it runs.
    single = build_gateway(make_config(tools={"exec": {"sandbox": "off"}}))
    alone = TurnContext(session_key="fake:w", channel="fake", chat_id="w", sender_id="boss", role="owner",
                        chat_type="private", workspace=single.parts.config.workspace)
    await single.parts.tools.execute(alone, "exec", {"command": f"touch {tmp_path}/ran"})
    assert (tmp_path / "ran").exists()


async def test_share_with_gives_read_only_labelled_recall_of_the_other_agents_memory_to_the_owner_only(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    config = agents_config(make_config, tmp_path,
                           bindings=[{"agent": "work", "match": {"channel": "fake", "chat": "w"}},
                                     {"agent": "work", "match": {"channel": "fake", "chat": "g"}}])
    document = config.model_dump(mode="json", by_alias=True)
    document["agents"]["list"][1]["shareWith"] = ["home"]
    document["providers"]["openai"]["apiKey"] = "sk-test"
    config = Config.model_validate(document)
    gateway = build_gateway(config)
    channel = FakeChannel(gateway.parts.bus, "fake", owners=("boss",))
    gateway.add_channel("fake", channel)
    search = ToolCalls([("memory_search", {"query": "vault code"})])
    async with gateway:
        fake_llm.queue(Reply("noted"))
        await channel.say(f"remember: my locker number is {LOCKER}", chat_id="h", sender_id="boss")
        await channel.wait_replies(1, timeout=FIRST_REPLY_TIMEOUT)
        fake_llm.queue(ToolCalls([("memory_search", {"query": "vault code"}),
                                  ("memory_search", {"query": "locker number"})]), Reply("owner done"))
        await channel.say("search", chat_id="w", sender_id="boss")
        await channel.wait_replies(2, timeout=FIRST_REPLY_TIMEOUT)
        fake_llm.queue(search, Reply("guest done"))
        await channel.say("search too", chat_id="g", sender_id="visitor", chat_type="group")
        await channel.wait_replies(3, timeout=FIRST_REPLY_TIMEOUT)
    owner = [message_text(m) for m in fake_llm.requests[2]["messages"] if m.get("role") == "tool"]
    assert SECRET in owner[0] and "Shared read-only by agent 'home'" in owner[0], owner[0]
    assert LOCKER not in owner[1]  # home's transcripts are not shared, only its memory files and notes
    guest = [message_text(m) for m in fake_llm.requests[4]["messages"] if m.get("role") == "tool"]
    assert SECRET not in guest[0] and "Shared" not in guest[0], guest[0]
