"""The individual checks ``lucid doctor`` runs; each says what is wrong and how to fix it.

Every check is a small function of the loaded config returning ``Result`` values. They
touch the outside world only harmlessly: one tiny completion, Telegram ``getMe``, Slack
``auth.test``, a bind on the configured port that is released at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx

from lucidgate.config.schema import Config
from lucidgate.gateway.daemon.health import probe_workspace

State = Literal["ok", "fail", "warn"]
MIN_FREE_BYTES = 200 * 1024 * 1024
MIN_TOKEN_CHARS = 24
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Result:
    name: str
    state: State
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.state != "fail"


def ok(name: str, detail: str) -> Result:
    return Result(name, "ok", detail)


def fail(name: str, detail: str, fix: str) -> Result:
    return Result(name, "fail", detail, fix)


def warn(name: str, detail: str, fix: str) -> Result:
    return Result(name, "warn", detail, fix)


def _has_secrets(config: Config) -> bool:
    from lucidgate.gateway.logs import secrets_from_config

    return bool(secrets_from_config(config))


def workspace_checks(config: Config, config_path: Path, config_flag: str = "") -> list[Result]:
    """Writable, private (0700), and the config file with secrets readable by us only (0600).
    ``config_flag`` (" -c PATH" or "") goes into the commands a fix suggests. When the
    workspace is missing, that is the one finding."""
    found = workspace_check(config, config_flag)
    if not config.workspace.exists():
        return [found]
    secrets = secrets_check(config, config_path)
    return [found] if secrets is None else [found, secrets]


def workspace_check(config: Config, config_flag: str = "") -> Result:
    """The workspace exists, is writable, and is private (0700): one agent's, per agent."""
    ws = config.workspace
    if not ws.exists():
        return fail("workspace", f"{ws} does not exist",
                    f"run `lucid onboard{config_flag}` (it creates the workspace)")
    writable, detail = probe_workspace(ws)
    if not writable:
        return fail("workspace", detail,
                    f"make {ws} writable by user {_whoami()} (e.g. `chown -R {_whoami()} {ws}`), "
                    "on a filesystem that is mounted read-write with free space")
    mode = stat.S_IMODE(ws.stat().st_mode)
    if mode & 0o077:
        return fail("workspace", f"{ws} is readable by others (mode {mode:03o})", f"chmod 700 {ws}")
    return ok("workspace", f"{ws} (writable, mode {mode:03o})")


def secrets_check(config: Config, config_path: Path) -> Result | None:
    """The config file, when it holds secrets, is readable by us only (0600); None without a file."""
    if not config_path.exists():
        return None
    mode = stat.S_IMODE(config_path.stat().st_mode)
    if mode & 0o077 and _has_secrets(config):
        return fail("secrets", f"{config_path} holds secrets and has mode {mode:03o}", f"chmod 600 {config_path}")
    return ok("secrets", f"{config_path} mode {mode:03o}")


def _whoami() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, ImportError):
        return str(os.geteuid())


def git_check() -> Result:
    path = shutil.which("git")
    if path is None:
        return fail("git", "git is not installed (memory history needs it)", "install git (apt-get install git)")
    return ok("git", path)


def context_window_check(config: Config) -> Result:
    agent = config.agent
    if "context_window_tokens" in agent.model_fields_set:
        return ok("context window", f"{agent.context_window_tokens} tokens (agents.defaults.contextWindowTokens)")
    from lucidgate.gateway.model.client import import_litellm

    try:
        info = import_litellm().get_model_info(agent.model)
        known = info.get("max_input_tokens") or info.get("max_tokens")
    except Exception:
        known = None
    if known:
        return ok("context window", f"{known} tokens (litellm knows {agent.model})")
    return fail("context window", f"litellm does not know {agent.model}'s context window; "
                f"the default {agent.context_window_tokens} is a guess",
                "set agents.defaults.contextWindowTokens to the model's real window")


async def model_check(config: Config) -> Result:
    """One tiny completion with a short timeout and no retries."""
    from lucidgate.gateway.model.client import LiteLLMChatModel
    from lucidgate.gateway.model.errors import without_reprs

    probe = config.model_copy(deep=True)
    ok_cfg, why = LiteLLMChatModel(probe).configured()
    if not ok_cfg:
        return fail("model", why, "see `lucid onboard` for the provider settings")
    probe.agents.defaults.llm_retries = 0
    probe.agents.defaults.llm_timeout_s = min(probe.agent.llm_timeout_s, 20)
    model = LiteLLMChatModel(probe)
    # litellm's import and its first-call set-up take seconds; they are not the model's time.
    setup_started = time.monotonic()
    await model.start()
    await model.warm_up()
    setup_s = time.monotonic() - setup_started
    started = time.monotonic()
    try:
        await model.complete([{"role": "user", "content": "Reply with OK."}], job="doctor", max_tokens=5)
    except Exception as exc:
        name, provider = config.provider_for(config.agent.model)
        where = provider.api_base if provider and provider.api_base else name
        return fail("model", f"{config.agent.model} via {where}: {without_reprs(str(exc))}",
                    "check that the model server runs and providers." + name + ".apiBase/apiKey are right")
    finally:
        model.close()
    return ok("model", f"{config.agent.model} answered in {time.monotonic() - started:.2f}s "
              f"(litellm's own set-up, {setup_s:.1f}s, not counted)")


def telegram_check(config: Config) -> Result | None:
    tg = config.channels.telegram
    if not tg.enabled:
        return None
    from lucidgate.channels.telegram.settings import DEFAULT_API_BASE

    base = (tg.api_base or DEFAULT_API_BASE).rstrip("/")
    token = tg.token.get_secret_value()
    if not token:
        return fail("telegram", "no bot token", "set channels.telegram.token (from @BotFather)")
    try:
        response = httpx.post(f"{base}/bot{token}/getMe", timeout=HTTP_TIMEOUT_S)
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return fail("telegram", f"{base} unreachable ({type(exc).__name__})", "check the network / channels.telegram.apiBase")
    if response.status_code == 200 and data.get("ok"):
        return ok("telegram", f"bot @{data['result'].get('username')} (getMe)")
    return fail("telegram", f"getMe refused the token: {data.get('description') or response.status_code}",
                "put the token @BotFather gave you in channels.telegram.token")


def slack_check(config: Config) -> Result | None:
    sl = config.channels.slack
    if not sl.enabled:
        return None
    from lucidgate.channels.slack.settings import DEFAULT_API_BASE

    base = sl.api_base or DEFAULT_API_BASE
    token = sl.bot_token.get_secret_value()
    if not token:
        return fail("slack", "no bot token", "set channels.slack.botToken (xoxb-...)")
    try:
        response = httpx.post(base.rstrip("/") + "/auth.test", headers={"Authorization": f"Bearer {token}"},
                              timeout=HTTP_TIMEOUT_S)
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return fail("slack", f"{base} unreachable ({type(exc).__name__})", "check the network / channels.slack.apiBase")
    if data.get("ok"):
        return ok("slack", f"{data.get('team')} as {data.get('user')} (auth.test)")
    return fail("slack", f"auth.test: {data.get('error')}", "check channels.slack.botToken")


def discord_check(config: Config) -> Result | None:
    dc = config.channels.discord
    if not dc.enabled:
        return None
    from lucidgate.channels.discord.check import check

    good, detail, hint = check(dc.token.get_secret_value(), dc.api_base, timeout_s=HTTP_TIMEOUT_S)
    return ok("discord", detail) if good else fail("discord", detail, hint)


def dingtalk_check(config: Config) -> Result | None:
    dt = config.channels.dingtalk
    if not dt.enabled:
        return None
    from lucidgate.channels.dingtalk.check import check

    good, detail, hint = check(dt.client_id, dt.client_secret.get_secret_value(), dt.api_base,
                               timeout_s=HTTP_TIMEOUT_S)
    return ok("dingtalk", detail) if good else fail("dingtalk", detail, hint)


def webhook_token_check(config: Config) -> Result | None:
    hook = config.channels.webhook
    if not hook.enabled:
        return None
    token = hook.token.get_secret_value()
    if len(token) < MIN_TOKEN_CHARS or len(set(token)) < 10:
        why = "empty" if not token else f"weak ({len(token)} characters)"
        return fail("webhook token", f"channels.webhook.token is {why}",
                    "run `lucid onboard --webhook-token` to generate a strong one")
    return ok("webhook token", f"{len(token)} characters")


def port_check(config: Config) -> Result:
    host, port = config.gateway.host, config.gateway.port
    if port == 0:
        return ok("port", "0 (any free port)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return ok("port", f"{host}:{port} is free")
        except OSError as exc:
            busy = exc
    from lucidgate.gateway.daemon.local_client import find_running

    running = find_running(config.workspace)
    if running is not None and running[0].rsplit(":", 1)[-1] == str(port):
        return ok("port", f"{host}:{port} is held by this workspace's running gateway")
    return fail("port", f"{host}:{port} is in use by another program ({busy.strerror})",
                "stop that program or set gateway.port (LUCIDGATE_GATEWAY__PORT) to a free port")


def disk_check(config: Config) -> Result:
    where = config.workspace
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return fail("disk", f"cannot read free space of {where}: {exc.strerror}", "check the path")
    if free < MIN_FREE_BYTES:
        return fail("disk", f"{free // 2**20} MiB free on {where}", "free some disk space (at least 200 MiB)")
    return ok("disk", f"{free // 2**30} GiB free")


def stores_check(config: Config, daemon: bool = True) -> list[Result]:
    """Outbox, reminders (scheduler) and any index: SQLite integrity, JSON readable. The
    daemon's own stores (outbox, webhook requests) only when ``daemon``: the default agent's."""
    state = config.workspace / "state"
    results: list[Result] = []
    daemon_stores = (("outbox.sqlite", "outbox"), ("webhook.sqlite", "webhook requests")) if daemon else ()
    for name, label in (*daemon_stores, ("reminders.sqlite", "scheduler store")):
        path = state / name
        if not path.exists():
            results.append(ok(label, f"{path.name} not created yet"))
            continue
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
                verdict = db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.Error as exc:
            verdict = str(exc)
        if verdict == "ok":
            results.append(ok(label, f"{path} (integrity ok)"))
        else:
            results.append(fail(label, f"{path}: {verdict}",
                                f"stop the gateway, move {path.name} aside and restore it from `lucid backup`"))
    scheduler = state / "scheduler.json"
    if scheduler.exists():
        try:
            json.loads(scheduler.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            results.append(fail("scheduler store", f"{scheduler}: {exc}", f"remove {scheduler}; it is rebuilt"))
    history = config.workspace / "memory" / "history.jsonl"
    if history.exists():
        bad = _bad_jsonl_lines(history)
        if bad:
            results.append(fail("history", f"{history}: {bad} unreadable line(s)",
                                "stop the gateway and run `lucid memory` commands to inspect; restore from a backup"))
        else:
            results.append(ok("history", f"{history.name} readable"))
    results.append(_index_check(config.workspace / "memory" / "index.sqlite"))
    return results


def _index_check(path: Path) -> Result:
    """The recall index is a cache: a damaged one is a warning (it is rebuilt), never a failure."""
    if not path.exists():
        return ok("recall index", f"{path.name} not built yet (the gateway builds it in the background)")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]
            chunks = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.Error as exc:
        verdict, chunks = str(exc), 0
    if verdict != "ok":
        return warn("recall index", f"{path}: {verdict}",
                    "run `lucid memory reindex` (or delete the file; the gateway rebuilds it)")
    return ok("recall index", f"{path} (integrity ok, {chunks} tables)")


async def mcp_checks(config: Config) -> list[Result]:
    """Each enabled MCP server, connected once (the same client the gateway uses)."""
    servers = {name: server for name, server in config.tools.mcp_servers.items() if server.enabled}
    if not servers:
        return []
    from lucidgate.gateway.mcp.manager import probe

    results = []
    for status in await probe(servers):
        if status.state == "connected":
            results.append(ok(f"mcp {status.name}", f"{status.transport}, {len(status.tools)} tool(s)"))
        else:
            results.append(fail(f"mcp {status.name}", f"{status.transport}: {status.error or status.state}",
                                f"check tools.mcpServers.{status.name} (command/url) and that the server runs"))
    return results


def _bad_jsonl_lines(path: Path) -> int:
    bad = 0
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    json.loads(line)
                except ValueError:
                    bad += 1
    return bad


def sandbox_check(config: Config) -> Result:
    """Whether exec commands run in bubblewrap (one real probe run, as the exec tool does)."""
    from lucidgate.gateway.tools._sandbox import describe, unsandboxed_reach

    mode = config.tools.exec.sandbox
    active, line = describe(mode, config.tools.exec.network)
    if active:
        return ok("exec sandbox", line)
    if mode == "off":
        return warn("exec sandbox", line, "set tools.exec.sandbox to auto and install bubblewrap")
    fix = ("install bubblewrap (apt-get install bubblewrap); in a container or a unit, user "
           "namespaces must be allowed")
    if mode == "bwrap":  # required, and it cannot run: exec commands will fail
        return fail("exec sandbox", line, fix)
    return warn("exec sandbox", f"commands run WITHOUT a sandbox ({line}): {unsandboxed_reach()}", fix)


def owner_token_check(config: Config) -> Result:
    """Owners listed for an HTTP channel need that channel's owner credential."""
    missing = []
    hook = config.channels.webhook
    if hook.enabled and hook.owners and not hook.owner_token.get_secret_value():
        missing.append(f"channels.webhook.owners lists {', '.join(hook.owners)} but channels.webhook.ownerToken "
                       "is empty (their messages are refused)")
    api = config.channels.openai
    if api.enabled and api.owner and not api.token.get_secret_value():
        missing.append("channels.openai.owner is true but channels.openai.token is empty (the endpoint answers 503)")
    if missing:
        return warn("owner tokens", "; ".join(missing),
                    "lucid onboard --webhook-owner-token (and set channels.openai.token for an owner endpoint)")
    return ok("owner tokens", "every channel that lists owners has its owner credential")


def clock_check(config: Config) -> Result:
    tz = config.agent.timezone
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return fail("clock", f"unknown timezone {tz!r}", "set agents.defaults.timezone to an IANA name, e.g. Europe/Paris")
    year = time.gmtime().tm_year
    if year < 2024:
        return fail("clock", f"the system clock says {year}", "enable time sync (systemd-timesyncd or chrony)")
    return ok("clock", f"{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())}, timezone {tz}")
