"""The docs cannot drift from the code: every config snippet in README.md and docs/ validates
against the schema, every config key they name in code (``agents.defaults.model``) exists, the
configuration reference's defaults are the schema's, every ``lucid`` command they show (with
its options) exists, every relative link leads to a file and heading, and the README lists
every skip line the suite can print with the command that installs what is missing.

A ```json block that is a config (it has one of the config's top-level keys) must be a whole
config file: it is validated with ``Config.model_validate`` as printed. The docs' placeholders
(``"sk-..."``, ``"<your id>"``, ``"…"``) are ordinary strings, so they validate unchanged; no
block is skipped. Other ```json blocks (request or reply bodies) must still parse.

Commands are read from code only — inline code spans and fenced blocks — so prose such as
"one lucid process" is not a command. The command tree is walked in-process (typer's click
group), which is much faster than one ``--help`` subprocess per command.
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command

from lucidgate.config import Config
from lucidgate.gateway.cli import build_app

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^[ \t]*```(\S*)[^\n]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|(?<=[\s/(]))lucid ([a-z][a-z-]*)(?: ([a-z][a-z-]*)(?=$|[\s`'\")|;]))?([^\n|;&#]*)")
OPTION = re.compile(r"(?:^|\s)(--?[a-zA-Z][a-zA-Z-]*)")
TOP_KEYS = frozenset(Config.model_fields) | {f.alias for f in Config.model_fields.values() if f.alias}

KEY_PATH = re.compile(r"^(?:%s)(?:\.[\w<>]+)+" % "|".join(sorted(TOP_KEYS)))
NOT_KEYS = {"gateway.lock"}  # the workspace's lock file, named like a key
# Developer docs name modules (``channels.bus``) as often as keys: their keys are not checked.
MODULE_DOCS = {"DESIGN.md", "ARCHITECTURE.md"}

def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def json_blocks(text: str) -> Iterator[tuple[int, str]]:
    for match in FENCE.finditer(text):
        if match[1] == "json":
            yield _line(text, match.start()), match[2]


def snippet_errors(text: str, where: str) -> list[str]:
    """One line per ```json block that does not parse, or is a config the schema refuses."""
    errors = []
    for line, body in json_blocks(text):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}:{line}: not JSON ({exc.msg}); a config snippet must be a whole file")
            continue
        if isinstance(data, dict) and TOP_KEYS & set(data):
            try:
                Config.model_validate(data)
            except ValueError as exc:
                errors.append(f"{where}:{line}: the schema refuses this config:\n{exc}")
    return errors


def code_texts(text: str) -> Iterator[tuple[int, str]]:
    """Every piece of code in a markdown text: fenced blocks (not JSON) and inline spans."""
    prose = text
    for match in FENCE.finditer(text):
        if match[1] != "json":
            yield _line(text, match.start()) + 1, match[2]
        prose = prose.replace(match[0], "\n" * match[0].count("\n"), 1)
    for match in INLINE.finditer(prose):
        yield _line(prose, match.start()), match[1]


def lucid_commands(text: str) -> Iterator[tuple[int, str, str | None, list[str]]]:
    """(line, command, next word, options) for every ``lucid …`` shown in code."""
    for line, code in code_texts(text):
        for match in COMMAND.finditer(code):
            options = OPTION.findall(match[3]) if match[3] else []
            yield line + code.count("\n", 0, match.start()), match[1], match[2], options


def _options(command: TyperCommand | TyperGroup) -> set[str]:
    found = {"--help"}
    for param in command.params:
        found.update(param.opts)
        found.update(param.secondary_opts)
    return found


def command_errors(text: str, where: str, root: TyperGroup) -> list[str]:
    """One line per ``lucid`` command (or option of one) the CLI does not have."""
    errors = []
    for line, name, word, options in lucid_commands(text):
        shown = f"lucid {name}" + (f" {word}" if word else "")
        command = root.commands.get(name)
        if command is None:
            errors.append(f"{where}:{line}: `{shown}`: no such command")
            continue
        if isinstance(command, TyperGroup) and word is not None:
            sub = command.commands.get(word)
            if sub is None:
                errors.append(f"{where}:{line}: `{shown}`: `lucid {name}` has no command {word!r}")
                continue
            command = sub
        unknown = [o for o in options if o not in _options(command)]
        if unknown:
            errors.append(f"{where}:{line}: `{shown}`: no option {', '.join(unknown)}")
    return errors


def key_exists(annotation: Any, segments: list[str]) -> bool:
    """Whether ``segments`` lead from a field of type ``annotation`` to a setting. A segment in
    angle brackets (``channels.<name>.deliveryDeadlineH``) stands for any key there; a section
    that allows extra keys (``providers``) takes any name for an entry of its one typed field."""
    if not segments:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return key_exists(get_args(annotation)[0], segments)
    if origin in (Union, types.UnionType):
        return any(key_exists(arg, segments) for arg in get_args(annotation) if arg is not type(None))
    if origin is dict:
        return key_exists(get_args(annotation)[1], segments[1:])
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return False  # a value: nothing below it
    head, rest = segments[0], segments[1:]
    fields = annotation.model_fields
    if head.startswith("<"):
        return any(key_exists(field.annotation, rest) for field in fields.values())
    for name, field in fields.items():
        if head in (name, field.alias):
            return key_exists(field.annotation, rest)
    if annotation.model_config.get("extra") == "allow" and fields:
        return key_exists(next(iter(fields.values())).annotation, rest)
    return False


def key_errors(text: str, where: str) -> list[str]:
    """One line per dotted config key shown in code that the schema does not have."""
    errors = []
    for line, code in code_texts(text):
        match = KEY_PATH.match(code.strip())
        if match and match[0] not in NOT_KEYS and not key_exists(Config, match[0].split(".")):
            errors.append(f"{where}:{line}: `{match[0]}`: no such config key")
    return errors


@pytest.fixture(scope="module")
def cli() -> TyperGroup:
    group = get_command(build_app())
    assert isinstance(group, TyperGroup)
    return group


def test_every_config_snippet_in_the_docs_validates() -> None:
    errors: list[str] = []
    configs = 0
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        configs += sum(1 for _, body in json_blocks(text) if TOP_KEYS & set(_keys(body)))
        errors += snippet_errors(text, str(path.relative_to(ROOT)))
    assert configs >= 10  # the scan really finds the README's and the guides' configs
    assert not errors, "\n".join(errors)


def _keys(body: str) -> list[str]:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return []
    return list(data) if isinstance(data, dict) else []


def test_every_lucid_command_in_the_docs_exists(cli: TyperGroup) -> None:
    errors: list[str] = []
    shown = 0
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        shown += sum(1 for _ in lucid_commands(text))
        errors += command_errors(text, str(path.relative_to(ROOT)), cli)
    assert shown >= 40  # the scan really finds the commands
    assert not errors, "\n".join(errors)


def test_every_config_key_in_the_docs_exists() -> None:
    errors: list[str] = []
    shown = 0
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        if path.name in MODULE_DOCS:
            continue
        shown += sum(1 for _, code in code_texts(text) if KEY_PATH.match(code.strip()))
        errors += key_errors(text, str(path.relative_to(ROOT)))
    assert shown >= 60  # the scan really finds the keys
    assert not errors, "\n".join(errors)


def test_a_made_up_key_is_caught() -> None:
    text = ("`agents.defaults.model`, `channels.<name>.deliveryDeadlineH`, `providers.anthropic.apiKey`,\n"
            "`tools.exec.sandbox: auto`, `agents.defaults.modle`, `channels.<name>.nope`, `gateway.port.x`\n")
    errors = "\n".join(key_errors(text, "t.md"))
    assert errors.count("\n") == 2, errors
    for wrong in ("agents.defaults.modle", "channels.<name>.nope", "gateway.port.x"):
        assert f"`{wrong}`: no such config key" in errors


ROW = re.compile(r"^\| ((?:`[\w.]+`(?: / )?)+) \| ([^|]+) \|", re.MULTILINE)


def documented_defaults(text: str) -> Iterator[tuple[str, str]]:
    """(key, default as printed) from a ``| key | default | meaning |`` table; ``a.b.c`` /
    ``d`` / ``e`` with ``1 / 2 / 3`` gives ``a.b.c``, ``a.b.d``, ``a.b.e`` with 1, 2 and 3."""
    for keys_cell, default_cell in ROW.findall(text):
        keys = re.findall(r"`([\w.]+)`", keys_cell)
        values = [v.strip() for v in default_cell.split(" / ")]
        if len(keys) != len(values):
            continue
        parent = keys[0].rpartition(".")[0]
        for key, value in zip(keys, values):
            yield (key if "." in key else f"{parent}.{key}"), value


def default_errors(text: str, where: str) -> list[str]:
    """One line per documented default that differs from the schema's (numbers, true/false,
    none and `code` values are compared; prose such as "generated by ..." is not)."""
    effective: Any = Config().model_dump(mode="json", by_alias=True)
    errors = []
    for key, printed in documented_defaults(text):
        node = effective
        for segment in key.split("."):
            node = node[segment] if isinstance(node, dict) and segment in node else KeyError
        if node is KeyError:
            errors.append(f"{where}: `{key}`: no such config key")
            continue
        literal = printed.strip("`").replace(",", "")
        expected = {"true": True, "false": False, "none": None}.get(literal, literal)
        if re.fullmatch(r"-?\d+(\.\d+)?", literal):
            expected = float(literal)
        elif literal.startswith("["):
            expected = json.loads(literal)
        elif not printed.startswith("`") and literal not in ("true", "false", "none"):
            continue  # prose
        actual = float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else node
        if actual != expected:
            errors.append(f"{where}: `{key}` is documented as {printed}, but its default is {node!r}")
    return errors


def test_the_documented_defaults_are_the_defaults() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert len(list(documented_defaults(text))) >= 25
    assert default_errors(text, "docs/configuration.md") == []


def test_a_wrong_default_is_caught() -> None:
    table = ("| key | default | meaning |\n| --- | --- | --- |\n"
             "| `gateway.host` / `port` | 127.0.0.1 / 8080 | the server |\n"
             "| `agents.defaults.timezone` | `UTC` | zone |\n"
             "| `console.token` | generated by `lucid onboard` | login |\n")
    assert default_errors(table, "t.md") == ["t.md: `gateway.port` is documented as 8080, but its default is 18790"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def link_errors(path: Path) -> list[str]:
    """One line per relative link of a markdown file whose file or heading does not exist."""
    errors = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.is_file():
            errors.append(f"{path.relative_to(ROOT)}: {target}: no such file")
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.MULTILINE)
            if anchor not in {_slug(h) for h in headings}:
                errors.append(f"{path.relative_to(ROOT)}: {target}: no such heading")
    return errors


def test_every_link_in_the_docs_leads_somewhere() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(re.findall(r"\]\(docs/", readme)) >= 15
    assert [error for path in doc_files() for error in link_errors(path)] == []


def test_a_broken_link_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n## The exec tool\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#the-exec-tool) [x](gone.md) [y](a.md#nope) [z](https://example.org/x)\n")
    assert link_errors(page) == ["b.md: gone.md: no such file", "b.md: a.md#nope: no such heading"]


def test_a_bad_snippet_is_caught() -> None:
    typo = '```json\n{"agents": {"defaults": {"modle": "openai/x"}}}\n```\n'
    fragment = '```json\n"channels": {"telegram": {"enabled": true}}\n```\n'
    wrong_type = '```json\n{"gateway": {"port": "eighty"}}\n```\n'
    request_body = '```json\n{"chat_id": "demo", "text": "hello"}\n```\n'
    assert "modle" in "".join(snippet_errors(typo, "t.md"))
    assert "not JSON" in "".join(snippet_errors(fragment, "t.md"))
    assert snippet_errors(wrong_type, "t.md")
    assert snippet_errors(request_body, "t.md") == []  # not a config: parsed, not validated


def test_a_made_up_command_or_option_is_caught(cli: TyperGroup) -> None:
    text = ("Run `lucid frobnicate` or\n```bash\nlucid memory frob\n.venv/bin/lucid agent --bogus -m hi\n```\n"
            "and `lucid doctor --json`, `lucid import lucid assistant.tar.gz`.\n"
            "One lucid process per workspace.\n")
    errors = "\n".join(command_errors(text, "t.md", cli))
    assert errors.count("\n") == 2, errors  # three errors, nothing about the real ones or the prose
    assert "t.md:1: `lucid frobnicate`: no such command" in errors
    assert "t.md:3: `lucid memory frob`: `lucid memory` has no command 'frob'" in errors
    assert "`lucid agent`: no option --bogus" in errors


def _skip_line(monkeypatch: pytest.MonkeyPatch, call: Any) -> str:
    monkeypatch.delenv("LUCID_REQUIRE_REAL", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        call()
    return str(skipped.value.msg)


def test_the_readme_lists_every_skip_line_and_its_install_command(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.matrix_kit import require_synapse
    from tests.real_model.llama_server import INSTALL_HINT
    from tests.real_tools import APT_PACKAGE, need_tool

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    monkeypatch.setenv("PATH", str(tmp_path))  # no system program is found
    monkeypatch.setenv("LUCID_SYNAPSE_VENV", str(tmp_path / "no-venv"))
    lines = [_skip_line(monkeypatch, lambda name=name: need_tool(name)) for name in APT_PACKAGE]
    lines.append(_skip_line(monkeypatch, require_synapse))
    for line in lines:  # the line up to its parenthesis is what the README quotes
        assert line.split(" (")[0] in readme, line
    for name, package in APT_PACKAGE.items():
        assert f"apt-get install {package}" in readme, name
    assert "bubblewrap is not installed" in readme  # tests/security/test_exec_secrets.py's skipif
    assert "real-model suite skipped: llama-cpp-python[server] is not installed" in readme
    assert INSTALL_HINT.split(";")[0] in readme  # the command the real-model skip line prints
