"""What ``/readyz`` and the error handler know about storage and the model.

A read-only workspace, a permission problem or a full disk must not surface as a plain
500 and a traceback while ``/readyz`` still says 200. Here an ``OSError`` escaping a
route becomes a JSON answer a client can act on (507 for a full disk, 503 for a
workspace that cannot be written) and makes the gateway not-ready for a while, so an
orchestrator or a monitor sees it. The workspace probe writes and fsyncs a byte, which a
full disk refuses (creating an empty file does not need free blocks).
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import Request
from fastapi.responses import JSONResponse, Response

logger = logging.getLogger(__name__)

# After a storage error the gateway reports not-ready for this long (unless it recurs).
STORAGE_ERROR_WINDOW_S = 60.0
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}
NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def describe_os_error(exc: OSError) -> tuple[int, str]:
    """(HTTP status, one sentence for a person) for an error from the filesystem."""
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in DISK_FULL:
        return 507, f"the disk is full{where}: free some space; nothing was accepted"
    if exc.errno in NOT_WRITABLE:
        target = exc.filename or "the workspace"
        return 503, (f"{target} cannot be written ({exc.strerror}): check its owner and permissions, "
                     "and that the filesystem is not read-only")
    return 500, f"a storage error{where}: {exc.strerror or exc}"


class StorageWatch:
    """Remembers the last storage error; readiness fails while it is recent."""

    def __init__(self) -> None:
        self.last: tuple[float, str] | None = None

    def record(self, exc: OSError) -> tuple[int, str]:
        status, text = describe_os_error(exc)
        self.last = (time.monotonic(), text)
        return status, text

    def recent(self) -> str | None:
        if self.last is None or time.monotonic() - self.last[0] > STORAGE_ERROR_WINDOW_S:
            return None
        return self.last[1]

    def handler(self) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def on_os_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, OSError)
            status, text = self.record(exc)
            logger.error("%s %s failed: %s", request.method, request.url.path, text)
            return JSONResponse({"detail": text}, status_code=status)

        return on_os_error


def probe_workspace(workspace: Path) -> tuple[bool, str]:
    """Write, fsync and remove a byte in the workspace (blocking: run it in a thread)."""
    path = None
    try:
        fd, path = tempfile.mkstemp(dir=workspace, prefix=".readyz.")
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return False, describe_os_error(exc)[1]
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
    return True, str(workspace)
