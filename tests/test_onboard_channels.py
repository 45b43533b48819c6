"""``lucid onboard --channel NAME``: the prompts (and ``--set``) put exactly the answered keys
into ``channels.NAME``, keep the rest of the file and its 0600 mode, and the channel's own
preflight says whether it is ready; bad input is refused with nothing written."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from lucidgate.config import load_config
from lucidgate.gateway.cli import build_app

# A config as a person has it after a while: their own keys beside the channel's.
BEFORE: dict[str, Any] = {
    "agents": {"defaults": {"model": "openai/gpt-4o-mini", "workspace": "ws"}},
    "providers": {"openai": {"apiKey": "sk-keep-me", "apiBase": None}},
    "channels": {"webhook": {"token": "hook-token"}, "telegram": {"enabled": False, "token": "tg-keep"}},
}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BEFORE, indent=2))
    path.chmod(0o644)  # the rewrite must tighten it: the file holds secrets
    return path


def lucid(path: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(build_app(), ["onboard", "-c", str(path), *args], input=input)


def document(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def without(data: dict[str, Any], channel: str) -> dict[str, Any]:
    rest = json.loads(json.dumps(data))
    rest["channels"].pop(channel, None)
    return rest


def answers(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


# The email prompts in order: address, imapHost, imapPort, imapSecurity, smtpHost, smtpPort,
# smtpSecurity, password, authservId, owners.
EMAIL_ANSWERS = answers("bot@example.org", "imap.example.org", "", "", "smtp.example.org", "465", "ssl",
                        "app-secret-1", "mx.example.org", "me@example.org, wife@example.org")


def test_email_prompts_write_exactly_the_answered_keys_and_keep_the_rest(config_file: Path) -> None:
    result = lucid(config_file, "--channel", "email", input=EMAIL_ANSWERS)
    assert result.exit_code == 0, result.output
    after = document(config_file)
    assert after["channels"]["email"] == {
        "address": "bot@example.org", "imapHost": "imap.example.org", "smtpHost": "smtp.example.org",
        "smtpPort": 465, "smtpSecurity": "ssl", "password": "app-secret-1", "authservId": "mx.example.org",
        "owners": ["me@example.org", "wife@example.org"], "enabled": True}
    assert without(after, "email") == BEFORE  # imapPort/imapSecurity kept at their defaults: not written
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    section = load_config(config_file).channels.email
    assert section.enabled and section.password.get_secret_value() == "app-secret-1"
    assert "ready: restart the gateway" in result.stdout
    assert "docs/channels/email.md" in result.stdout and "lucid doctor" in result.stdout
    assert "app-secret-1" not in result.output  # hidden prompt, never printed back


def test_a_rerun_shows_the_current_values_and_enter_keeps_them(config_file: Path) -> None:
    assert lucid(config_file, "--channel", "email", input=EMAIL_ANSWERS).exit_code == 0
    first = document(config_file)
    # Enter everywhere but the owners: every value stays, the secret included.
    result = lucid(config_file, "--channel", "email", input=answers(*[""] * 9, "boss@example.org"))
    assert result.exit_code == 0, result.output
    assert "[bot@example.org]" in result.stdout and "[465]" in result.stdout
    assert "[me@example.org, wife@example.org]" in result.stdout
    assert "app-secret-1" not in result.output  # a secret's current value is never the shown default
    after = document(config_file)
    assert after["channels"]["email"] == {**first["channels"]["email"], "owners": ["boss@example.org"]}
    assert without(after, "email") == without(first, "email")


def test_a_bad_answer_is_asked_again(config_file: Path) -> None:
    result = lucid(config_file, "--channel", "email",
                   input=answers("bot@example.org", "imap.example.org", "not-a-port", "143", "tls", "plain",
                                 *[""] * 3, "pw", "", ""))
    assert result.exit_code == 0, result.output
    assert "channels.email.imapPort" in result.output and "channels.email.imapSecurity" in result.output
    email = document(config_file)["channels"]["email"]
    assert email["imapPort"] == 143 and email["imapSecurity"] == "plain"


def test_dingtalk_with_set_reports_the_preflight_reason_until_ready(config_file: Path) -> None:
    result = lucid(config_file, "--channel", "dingtalk", "--set", "clientId=dingabc", "--set", "owners=staff1,staff2")
    assert result.exit_code == 1, result.output
    assert "not ready: no clientSecret (set channels.dingtalk.clientSecret" in result.stdout
    assert "ready: restart the gateway" not in result.stdout
    assert document(config_file)["channels"]["dingtalk"] == {
        "clientId": "dingabc", "owners": ["staff1", "staff2"], "enabled": True}

    result = lucid(config_file, "--channel", "dingtalk", "--set", "clientSecret=ding-secret-9")
    assert result.exit_code == 0, result.output
    assert "ready: restart the gateway" in result.stdout and "access token" in result.stdout
    assert "ding-secret-9" not in result.output
    after = document(config_file)
    assert after["channels"]["dingtalk"] == {
        "clientId": "dingabc", "owners": ["staff1", "staff2"], "enabled": True, "clientSecret": "ding-secret-9"}
    assert without(after, "dingtalk") == BEFORE
    assert load_config(config_file).channels.dingtalk.client_secret.get_secret_value() == "ding-secret-9"


def test_dingtalk_prompts_hide_the_secret(config_file: Path) -> None:
    result = lucid(config_file, "--channel", "dingtalk", input=answers("dingxyz", "s3cret-value", "staff7"))
    assert result.exit_code == 0, result.output
    assert "s3cret-value" not in result.output
    assert document(config_file)["channels"]["dingtalk"] == {
        "clientId": "dingxyz", "clientSecret": "s3cret-value", "owners": ["staff7"], "enabled": True}


@pytest.mark.parametrize(("channel", "sets", "missing"), [
    ("telegram", ["owners=42"], None),  # its token was already in the file
    ("slack", ["botToken=xoxb-1"], "socket mode needs an appToken"),
    ("discord", ["owners=1"], "no token (set channels.discord.token)"),
    ("matrix", ["homeserver=https://matrix.example.org", "accessToken=syt_1"], None),
])
def test_the_other_channels_are_one_line_each(config_file: Path, channel: str, sets: list[str],
                                              missing: str | None) -> None:
    result = lucid(config_file, "--channel", channel, *[arg for s in sets for arg in ("--set", s)])
    assert result.exit_code == (1 if missing else 0), result.output
    assert (f"not ready: {missing}" if missing else "ready: restart the gateway") in result.stdout
    assert getattr(load_config(config_file).channels, channel).enabled


@pytest.mark.parametrize(("args", "says"), [
    (["--channel", "fax"], "unknown channel 'fax'; lucid onboard --channel takes one of: email, dingtalk"),
    (["--channel", "webhook"], "unknown channel 'webhook'"),
    (["--channel", "email", "--set", "imapHostname=x"], "channels.email has no key 'imapHostname'; valid keys:"),
    (["--channel", "email", "--set", "imapPort=abc"], "channels.email.imapPort"),
    (["--channel", "email", "--set", "smtpSecurity=tls"], "channels.email.smtpSecurity"),
    (["--channel", "email", "--set", "address"], "expected KEY=VALUE"),
    (["--set", "address=a@b.org"], "--set needs --channel NAME"),
])
def test_bad_input_is_refused_and_nothing_is_written(config_file: Path, args: list[str], says: str) -> None:
    before = config_file.read_bytes()
    result = lucid(config_file, *args)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert config_file.read_bytes() == before
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o644


def test_an_unknown_key_error_lists_the_valid_keys(config_file: Path) -> None:
    result = lucid(config_file, "--channel", "dingtalk", "--set", "appKey=x")
    assert result.exit_code == 2
    assert "clientId" in result.output and "clientSecret" in result.output and "allowFrom" in result.output


def test_a_broken_config_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"channels": {"email": {"imapPort": 0}}}')
    result = lucid(path, "--channel", "email", "--set", "address=a@b.org")
    assert result.exit_code == 2 and "imapPort" in result.output
    assert path.read_text() == '{"channels": {"email": {"imapPort": 0}}}'


def test_without_a_config_one_is_written_first(tmp_path: Path) -> None:
    path = tmp_path / "new" / "config.json"
    result = lucid(path, "--channel", "telegram", "--set", "token=123:abc")
    assert result.exit_code == 0, result.output
    data = document(path)
    assert data["channels"]["telegram"] == {"token": "123:abc", "enabled": True}
    assert data["channels"]["webhook"]["token"]  # the usual new config around it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
