"""The one atomic-write helper of every package (config is the bottom floor).

A temp file in the target's folder (``os.replace`` is only atomic within one filesystem),
created ``0600`` from the first byte — transcripts, inbox journals and pairing state are
private, so there is never a moment where the content sits under umask permissions —
written, fsynced, renamed over the target, and then the folder is fsynced so the rename
itself survives a power cut. A crash leaves the old file or the new one, never a mix; a
failure before the rename removes the temp file.

``mode`` sets the final permissions; ``keep_mode=True`` keeps an existing file's mode
instead (a script the model edits stays executable). Without either the result is ``0600``.

These helpers block: call them from ``asyncio.to_thread`` on the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "read_int_file",
    "read_text_or_empty",
]

logger = logging.getLogger(__name__)

PRIVATE = 0o600


@contextlib.contextmanager
def atomic_write(path: Path, *, durable: bool = True, mode: int | None = None,
                 keep_mode: bool = False) -> Iterator[BinaryIO]:
    """Stream the new content into a binary file object; it replaces ``path`` on exit.

    ``durable=False`` skips both fsyncs, for files that can be rebuilt (``.cursor``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if keep_mode:
        with contextlib.suppress(FileNotFoundError):
            mode = path.stat().st_mode & 0o7777
    tmp = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), PRIVATE)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
            if mode is not None and mode != PRIVATE:
                os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True, mode: int | None = None,
                       keep_mode: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    with atomic_write(path, durable=durable, mode=mode, keep_mode=keep_mode) as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str, *, durable: bool = True, mode: int | None = None,
                      keep_mode: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8, newlines as given) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable, mode=mode, keep_mode=keep_mode)


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable; some filesystems refuse to open or sync a folder — then best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        logger.debug("fsync of folder %s not supported", folder)
    finally:
        os.close(fd)


def read_int_file(path: Path) -> int | None:
    """The non-negative integer stored in ``path``; None when missing, empty or corrupt."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("%s is unreadable (%s); treating it as missing", path, exc)
        return None
    if not text.isdigit():
        if text:
            logger.warning("%s does not hold a cursor (%r); treating it as missing", path, text[:40])
        return None
    return int(text)


def read_text_or_empty(path: Path) -> str:
    """The file's text, or "" when it does not exist (a fresh workspace)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
