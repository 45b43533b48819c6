"""The ``channels`` part of the configuration schema (DESIGN §10): one section per channel.

Apart from ``config.schema`` to keep each module to one idea; ``config.schema`` re-exports
every name, so ``from config.schema import WebhookConfig`` keeps working.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from lucidgate.config.section import Section, subsection


class DeliverySection(Section):
    """A channel whose final replies the outbox retries: for how long a reply the platform keeps
    failing (5xx, outage) is retried before it becomes a dead letter."""

    delivery_deadline_h: float = Field(24, gt=0)


class SwitchedSection(Section):
    """A channel the config turns on or off (``cli`` has no switch: its surfaces bring it)."""

    enabled: bool = False


class StreamingSection(Section):
    """A channel that can show a reply while it is written (one message edited as it grows)."""

    streaming: bool = False


class OwnedSection(Section):
    """A channel some of whose senders are the owner; ``owner_ids`` says which (ids as strings).

    The channel's gate reads it when it admits a message and stamps the role on it; the rest
    of the gateway reads the role from the message, and consults this only for stored history
    written before messages carried their role.
    """

    def owner_ids(self) -> frozenset[str]:
        raise NotImplementedError


class ListedOwners(OwnedSection):
    """Owners listed by id in the section's ``owners``."""

    owners: list[str] = Field(default_factory=list)

    def owner_ids(self) -> frozenset[str]:
        return frozenset(s for o in self.owners if (s := str(o).strip()))


class GatedSection(ListedOwners):
    """A platform channel where strangers can write: who may talk, who owns it, what a stranger
    is told (``null``: silence) and whether a stranger may ask for a pairing code."""

    allow_from: list[str] = Field(default_factory=list)
    refusal: str | None = "Sorry, I only talk to people my owner has allowed."
    pairing: bool = False


class TelegramWebhookConfig(Section):
    url: str = ""
    secret_token: SecretStr = SecretStr("")


class TelegramConfig(SwitchedSection, GatedSection, DeliverySection, StreamingSection):
    token: SecretStr = SecretStr("")
    api_base: str | None = None
    webhook: TelegramWebhookConfig | None = None
    poll_timeout_s: int = Field(30, ge=0, le=300)
    watchdog_s: float = Field(180, gt=0)


class SlackConfig(SwitchedSection, GatedSection, DeliverySection, StreamingSection):
    bot_token: SecretStr = SecretStr("")
    app_token: SecretStr = SecretStr("")
    signing_secret: SecretStr = SecretStr("")
    api_base: str | None = None
    mode: str = Field("socket", pattern="^(socket|http)$")
    watchdog_s: float = Field(300, gt=0)
    # Streaming: a placeholder reply edited with chat.update as the answer is written.
    preview_interval_s: float = Field(1.0, ge=0.2)


class DiscordConfig(SwitchedSection, GatedSection, DeliverySection, StreamingSection):
    """A Discord bot: DMs, and guild channels/threads where it is mentioned or replied to."""

    token: SecretStr = SecretStr("")
    # REST root (the adapter adds ``/v10``) and Gateway URL: for proxies and tests. Without
    # ``gatewayUrl`` the Gateway URL is asked from ``GET /gateway/bot`` at the REST root.
    api_base: str | None = None
    gateway_url: str | None = None
    # Streaming: one message edited as the answer is written, at most once per previewIntervalS.
    preview_interval_s: float = Field(1.0, ge=0.2)


class MatrixConfig(SwitchedSection, GatedSection, DeliverySection, StreamingSection):
    """A Matrix bot account: ``accessToken``, or ``password`` (the gateway then logs in once
    and keeps the session in ``state/matrix.json``)."""

    homeserver: str = ""  # the client API's base URL, e.g. https://matrix.example.org
    user_id: str = ""  # @lucid:example.org
    access_token: SecretStr = SecretStr("")
    password: SecretStr = SecretStr("")
    device_name: str = "lucidgate"
    # allowFrom: full Matrix ids, @alice:example.org
    # Replies as m.notice (the convention for bots: other bots do not answer them) or m.text.
    msgtype: str = Field("notice", pattern="^(notice|text)$")
    preview_interval_s: float = Field(1.0, ge=0.2)
    sync_timeout_s: int = Field(30, ge=0, le=300)
    # Said once in an end-to-end encrypted room, where the bot cannot read or answer.
    encrypted_room_notice: str = (
        "This room is end-to-end encrypted, and lucidgate does not support encryption: it cannot "
        "read messages here. Talk to me in an unencrypted room or direct chat instead."
    )


class EmailConfig(SwitchedSection, GatedSection, DeliverySection):
    """A mailbox the assistant reads over IMAP and answers from over SMTP (docs/channels/email.md).

    ``owners`` and ``allowFrom`` are addresses (``allowFrom`` also takes ``@example.com`` for
    a whole domain). An owner's address counts only on mail the receiving server
    authenticated: an ``Authentication-Results`` header from ``authservId`` with DKIM or SPF
    passing for the From domain; otherwise the sender is a guest. Strangers get no answer.
    """

    address: str = ""  # the bot's own address: the From of its replies, never answered itself
    from_name: str = "lucidgate"
    username: str = ""  # the IMAP/SMTP login; empty: the address
    password: SecretStr = SecretStr("")  # an app password, where the provider has them
    imap_host: str = ""
    imap_port: int = Field(993, ge=1, le=65535)
    # "ssl": TLS from the first byte (port 993); "plain": no TLS (a server on this machine only).
    imap_security: str = Field("ssl", pattern="^(ssl|plain)$")
    folder: str = "INBOX"
    smtp_host: str = ""
    smtp_port: int = Field(587, ge=1, le=65535)
    # "starttls" (587), "ssl" (implicit TLS, 465), "plain" (a server on this machine only).
    smtp_security: str = Field("starttls", pattern="^(starttls|ssl|plain)$")
    smtp_username: str = ""  # empty: the IMAP login
    smtp_password: SecretStr = SecretStr("")  # empty: the IMAP password
    # The Authentication-Results issuer to trust (your receiving server's name, e.g. mx.google.com).
    authserv_id: str = ""
    idle: bool = True  # IMAP IDLE when the server offers it; otherwise polling
    poll_interval_s: float = Field(60, ge=0.1)
    # IDLE is ended and restarted this often (servers drop IDLE after 30 minutes).
    idle_refresh_s: float = Field(600, gt=0)
    # Liveness: an IMAP round (fetch, IDLE wait) that takes longer than this is a stuck
    # connection, which is dropped and opened again.
    watchdog_s: float = Field(900, gt=0)
    # After a mail is handled: "seen" (flag it), "move" (to moveTo), "delete", or "none".
    after_handling: str = Field("seen", pattern="^(seen|move|delete|none)$")
    move_to: str = ""
    answer_lists: bool = False  # answer mailing-list and bulk mail (List-Id, Precedence: bulk/list)
    max_attachment_bytes: int = Field(10_485_760, ge=0)
    max_mail_bytes: int = Field(26_214_400, ge=1024)  # larger mails are skipped (logged)
    refusal: str | None = None  # strangers get no mail back (no backscatter)


class DingTalkConfig(SwitchedSection, GatedSection, DeliverySection):
    """A DingTalk robot of an internal app in Stream mode: private chats, and group chats where
    it is @-mentioned. Ids in ``owners``/``allowFrom`` are staff ids (``senderStaffId``)."""

    client_id: str = ""  # the app's Client ID (formerly AppKey)
    client_secret: SecretStr = SecretStr("")  # the app's Client Secret (formerly AppSecret)
    robot_code: str = ""  # the robot's code for OpenAPI sends; empty: the Client ID (the usual case)
    # OpenAPI root (connection open, access token, robot sends): for proxies and tests.
    api_base: str | None = None
    # Shown once when a turn starts (DingTalk has no typing action); null: nothing.
    progress_text: str | None = None
    watchdog_s: float = Field(120, gt=0)  # a stream silent this long (no frame, no pong) is replaced


class WebhookConfig(SwitchedSection, DeliverySection, ListedOwners):
    enabled: bool = True
    token: SecretStr = SecretStr("")  # the integration credential: posts messages, reads its own chats
    admin_token: SecretStr = SecretStr("")  # lists/reads/resets every webhook session; empty: nobody
    # The owner credential: only requests made with it may speak as a sender listed in owners.
    owner_token: SecretStr = SecretStr("")
    callback_secret: SecretStr = SecretStr("")
    wait_timeout_s: float = Field(120, gt=0)
    max_body_bytes: int = Field(1_048_576, ge=1024)
    rate_limit_per_min: int = Field(60, ge=1)  # per sender, inside the credential's limit
    rate_limit_per_credential_per_min: int = Field(120, ge=1)  # per bearer token, all its senders
    rate_limit_global_per_min: int = Field(600, ge=1)  # every request of every credential
    callback_allow_hosts: list[str] = Field(default_factory=list)
    callback_timeout_s: float = Field(10, gt=0)
    callback_max_attempts: int = Field(6, ge=1)
    callback_backoff_s: float = Field(5.0, ge=0)


class OpenAIApiConfig(SwitchedSection, DeliverySection, OwnedSection):
    """``POST /v1/chat/completions``: any OpenAI client talks to the assistant.

    The bearer token is ``token``, or the webhook's integration token when empty; callers are
    guests unless ``owner`` is true (then they get the owner's tools and memory).
    """

    enabled: bool = True
    token: SecretStr = SecretStr("")
    owner: bool = False
    wait_timeout_s: float = Field(300, gt=0)
    max_body_bytes: int = Field(4_194_304, ge=1024)

    def owner_ids(self) -> frozenset[str]:
        """The sender id the endpoint's callers speak as when ``owner`` is true."""
        return frozenset({OPENAI_OWNER_ID}) if self.owner else frozenset()


OPENAI_OWNER_ID = "api-owner"
OPENAI_GUEST_ID = "api-guest"


class CliChannelConfig(DeliverySection, StreamingSection, ListedOwners):
    owners: list[str] = Field(default_factory=lambda: ["local"])
    streaming: bool = True  # `lucid agent` prints the answer as it is written


class WebChannelConfig(SwitchedSection, DeliverySection, StreamingSection, ListedOwners):
    """The browser chat of the web console; its only sender is the logged-in console user."""

    enabled: bool = True
    owners: list[str] = Field(default_factory=lambda: ["console"])
    streaming: bool = True  # replies appear as they are written


class ChannelsConfig(Section):
    telegram: TelegramConfig = subsection()
    slack: SlackConfig = subsection()
    discord: DiscordConfig = subsection()
    matrix: MatrixConfig = subsection()
    email: EmailConfig = subsection()
    dingtalk: DingTalkConfig = subsection()
    webhook: WebhookConfig = subsection()
    cli: CliChannelConfig = subsection()
    web: WebChannelConfig = subsection()
    openai: OpenAIApiConfig = subsection()

    def owners_of(self, channel: str) -> frozenset[str]:
        """The configured owners of ``channel`` (none for an unknown or ownerless channel)."""
        section = dict(self).get(channel)
        return section.owner_ids() if isinstance(section, OwnedSection) else frozenset()
