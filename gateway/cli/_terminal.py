"""The interactive terminal chat of ``lucid agent``: prompt, answers, Ctrl-C.

- The prompt has line editing and a history kept across runs (prompt_toolkit) when stdin
  is a terminal; piped input is read line by line, so scripts still work.
- Ctrl-C while an answer is being written stops that turn (what ``/stop`` does) and comes
  back to the prompt; Ctrl-C or Ctrl-D at the prompt leaves at once.
- Answers are labelled and rendered as markdown; failures are red. A one-shot ``-m``
  prints the plain text only, for scripts.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from pathlib import Path

from rich.markdown import Markdown
from rich.text import Text

from gateway.cli._common import console, err_console

Ask = Callable[[str], Coroutine[Any, Any, tuple[bool, str]]]
Stop = Callable[[], Awaitable[object]]

EXIT_WORDS = ("exit", "quit", ":q")
STOPPED_NOTE = "(stopped — send another message, or /help)"


async def one_shot(ask: Ask, message: str) -> int:
    ok, text = await ask(message)
    (console if ok else err_console).print(text, markup=False, highlight=False)
    return 0 if ok else 1


async def converse(ask: Ask, stop: Stop, banner: str, history_file: Path) -> int:
    """A prompt loop until 'exit', Ctrl-D or Ctrl-C at the prompt; exit code 0."""
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
        answer = await _answer_or_interrupt(ask, stop, line)
        if answer is None:
            console.print(Text(STOPPED_NOTE, style="yellow"))
            continue
        show_answer(*answer)


def show_answer(ok: bool, text: str) -> None:
    if not ok:
        err_console.print(Text(text, style="red"))
        return
    console.print(Text("lucid ›", style="bold cyan"))
    console.print(Markdown(text))


async def _answer_or_interrupt(ask: Ask, stop: Stop, line: str) -> tuple[bool, str] | None:
    """The answer, or None when Ctrl-C stopped the turn (the session gets ``/stop``)."""
    loop = asyncio.get_running_loop()
    task: asyncio.Task[tuple[bool, str]] = asyncio.create_task(ask(line), name="terminal-ask")
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    waiter = asyncio.create_task(interrupted.wait(), name="terminal-ctrl-c")
    try:
        with console.status("thinking…", spinner="dots"):
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
