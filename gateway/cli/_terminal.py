"""The interactive terminal chat of ``lucid agent``: prompt, answers, Ctrl-C.

- The prompt has line editing and a history kept across runs (prompt_toolkit) when stdin
  is a terminal; piped input is read line by line, so scripts still work.
- Ctrl-C while an answer is being written stops that turn (what ``/stop`` does) and comes
  back to the prompt; Ctrl-C or Ctrl-D at the prompt leaves at once.
- Answers are labelled and rendered as chat markdown (``ChatMarkdown``): a line break is a
  line break and ``<sha>`` is text, as on every chat platform — command replies are lists of
  lines. Failures are red. A one-shot ``-m`` prints the plain text only, for scripts.
- While a turn runs, one live line says what it does ("thinking…", "running grep…") and,
  once the model writes, the answer appears as it arrives; the live view is transient, so
  the finished answer is then printed once, rendered as markdown.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from pathlib import Path

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from lucidgate.gateway.cli._common import console, err_console, printable

Ask = Callable[[str], Coroutine[Any, Any, tuple[bool, str]]]
Stop = Callable[[], Awaitable[object]]
Local = Callable[[str], Awaitable[str | None]]

EXIT_WORDS = ("exit", "quit", ":q")
STOPPED_NOTE = "(stopped — send another message, or /help)"


async def one_shot(ask: Ask, message: str) -> int:
    """Print the answer as written (no markup, no emoji codes; control characters dropped, see
    ``printable``), errors to stderr."""
    ok, text = await ask(message)
    typer.echo(printable(text), err=not ok)
    return 0 if ok else 1


LABEL = "lucid ›"


class LiveAnswer:
    """The transient view of a running turn: the step it is on, then the answer so far.

    ``progress`` is the terminal channel's hook (called on the event loop); outside a turn
    it only remembers, so a late preview never draws over the prompt.
    """

    def __init__(self) -> None:
        self._live: Live | None = None
        self._text = ""
        self._activity = "thinking…"

    def __enter__(self) -> LiveAnswer:
        self._text, self._activity = "", "thinking…"
        self._live = Live(self._render(), console=console.real, transient=True, refresh_per_second=10)
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def progress(self, text: str, activity: str | None) -> None:
        if activity:
            self._activity = activity
        elif text:
            self._activity = "writing…"  # past the tool step the line named
        if text:
            self._text = text
        if self._live is not None:
            self._live.update(self._render(), refresh=True)  # a quick tool step still shows

    def _render(self) -> RenderableType:
        line = Spinner("dots", text=Text(self._activity, style="dim"))
        if not self._text:
            return line
        return Group(Text(LABEL, style="bold cyan"), Text(printable(self._text)), line)


async def converse(ask: Ask, stop: Stop, banner: str, history_file: Path,
                   view: LiveAnswer | None = None, local: Local | None = None) -> int:
    """A prompt loop until 'exit', Ctrl-D or Ctrl-C at the prompt; exit code 0. ``local``
    answers the lines the terminal handles itself (``/sessions``, ``/switch``)."""
    view = view or LiveAnswer()
    read = _prompt_reader(history_file) if sys.stdin.isatty() else _line_reader()
    console.print(Text(f"{banner} — type a message; Ctrl-C stops an answer, Ctrl-D or 'exit' leaves.",
                       style="dim"))
    while True:
        try:
            line = await read()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if line.strip().lower() in EXIT_WORDS:
            return 0
        if not line.strip():
            continue
        handled = await local(line) if local is not None else None
        if handled is not None:
            console.print(Text(handled, style="dim"))
            continue
        answer = await _answer_or_interrupt(ask, stop, line, view)
        if answer is None:
            console.print(Text(STOPPED_NOTE, style="yellow"))
            continue
        show_answer(*answer)
        if local is not None and line.strip().lower() == "/help":
            from lucidgate.gateway.cli._switch import TERMINAL_HELP

            console.print(Text(TERMINAL_HELP, style="dim"))


def show_answer(ok: bool, text: str) -> None:
    if not ok:
        err_console.print(Text(printable(text), style="red"))
        return
    from lucidgate.gateway.cli._chat_markdown import ChatMarkdown  # markdown-it: ~0.2 s, chat only

    console.print(Text(LABEL, style="bold cyan"))
    console.print(ChatMarkdown(printable(text)))


async def _answer_or_interrupt(ask: Ask, stop: Stop, line: str, view: LiveAnswer) -> tuple[bool, str] | None:
    """The answer, or None when Ctrl-C stopped the turn (the session gets ``/stop``)."""
    loop = asyncio.get_running_loop()
    task: asyncio.Task[tuple[bool, str]] = asyncio.create_task(ask(line), name="terminal-ask")
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    waiter = asyncio.create_task(interrupted.wait(), name="terminal-ctrl-c")
    try:
        with view:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        waiter.cancel()
    if task.done():
        return task.result()
    # /stop goes around the session's queue and cancels the running turn; the answer that
    # was being waited for will not come, so stop waiting for it too.
    await stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


def _prompt_reader(history_file: Path) -> Callable[[], Awaitable[str]]:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import HTML
    from prompt_toolkit.history import FileHistory

    history_file.parent.mkdir(parents=True, exist_ok=True)
    session: PromptSession[str] = PromptSession(history=FileHistory(str(history_file)))

    async def read() -> str:
        return await session.prompt_async(HTML("<ansigreen><b>you ›</b></ansigreen> "))

    return read


def _line_reader() -> Callable[[], Awaitable[str]]:
    async def read() -> str:
        return await asyncio.to_thread(input, "you> ")

    return read
