"""Files out on the webhook: what a callback carries when the assistant sends files.

An integration usually runs on another machine, so a workspace path alone would be of no use
to it: each file travels inside the signed callback JSON as base64 (``channels.outfiles``
caps each at 10 MB). The same shape is declared as an OpenAPI callback on ``POST
/v1/messages`` so the schema at ``/docs`` documents it.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from lucidgate.channels import outfiles

__all__ = ["CallbackBody", "CallbackFile", "callback_docs", "encode_files"]


class CallbackFile(BaseModel):
    name: str = Field(description="The file's name.")
    path: str = Field(description="Where it is in the assistant's workspace.")
    size: int = Field(description="Size in bytes (at most 10 MB).")
    content_base64: str = Field(description="The file's bytes, base64.")


class CallbackBody(BaseModel):
    """What the gateway POSTs to ``callback_url`` (signed with ``X-Lucid-Signature``)."""

    type: str = Field(description="`reply` or `error`.")
    delivery_id: str = Field(description="The same on every retry (also in `X-Lucid-Delivery`): dedupe on it.")
    message_id: str | None = Field(description="The request this answers; null for a message the "
                                               "assistant sent on its own (a reminder, a file).")
    session: str
    chat_id: str
    reply: str
    error: bool
    files: list[CallbackFile] = Field([], description="Files the assistant sent with this message "
                                                      "(the key is absent when there are none).")


def encode_files(workspace: Path | outfiles.FileRoots, files: Sequence[str],
                 agent: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """Each sendable file as a callback entry, and one problem line per file that is not
    (named in ``agent``'s workspace). Blocks on the file system: run it with ``asyncio.to_thread``."""
    ready, problems = outfiles.ready(workspace, files, agent)
    return [{"name": f.name, "path": f.rel, "size": f.size,
             "content_base64": base64.b64encode(f.path.read_bytes()).decode("ascii")} for f in ready], problems


def callback_docs() -> list[Any]:
    """The OpenAPI ``callbacks`` entry of ``POST /v1/messages`` (documentation only)."""
    router = APIRouter()

    @router.post("{$request.body#/callback_url}", summary="The answer, POSTed to callback_url")
    def answer(body: CallbackBody) -> None:  # pragma: no cover - never served
        """Answer 2xx; anything else (or a timeout) is retried with backoff."""

    return list(router.routes)
