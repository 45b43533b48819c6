"""bench/_fake_llm_server.py in a process of its own, for a bench that starts a real daemon:
the model's work then never counts in the daemon's CPU or memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "_fake_llm_server.py"


class FakeModel:
    """The fake OpenAI server answering in ``mode`` (see _fake_llm_server.py); ``base_url``
    is where the daemon's provider points."""

    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "0", mode], stdout=subprocess.PIPE, text=True)
        self.base_url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.base_url:
            raise RuntimeError("the fake model server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
