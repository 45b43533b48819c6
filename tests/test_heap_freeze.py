"""A full garbage collection must not stall the event loop (issue 16, item 3).

After start-up the gateway freezes what is alive (``gc.freeze``), so the cyclic collector
no longer walks litellm's ~300,000 start-up objects at a random turn. Checked in a fresh
interpreter: the test process has started gateways already, and freezing happens once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import asyncio, gc, json, os, sys
from lucidgate.config.loader import load_config
from lucidgate.gateway.app import build_gateway

async def main():
    report = {}
    gw = build_gateway(load_config(sys.argv[1]), "agent")
    report["before"] = gc.get_freeze_count()
    await gw.start()
    report["litellm_loaded"] = "litellm" in sys.modules
    report["after_start"] = gc.get_freeze_count()
    report["tracked_after_start"] = len(gc.get_objects())
    await gw.stop()
    again = build_gateway(load_config(sys.argv[1]), "agent")
    await again.start()
    report["after_second_start"] = gc.get_freeze_count()
    await again.stop()
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump(report, out)

asyncio.run(main())
"""


def test_start_up_objects_are_frozen_once(tmp_path: Path) -> None:
    config, out = tmp_path / "config.json", tmp_path / "report.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model",
                                "memory": {"search": {"enabled": False}}}},
        "providers": {"openai": {"apiKey": "sk-probe", "apiBase": "http://127.0.0.1:9/v1"}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUCIDGATE_")}
    env.update(HOME=str(tmp_path), LITELLM_LOCAL_MODEL_COST_MAP="True", PROBE_OUT=str(out))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True,
                          env=env, timeout=180, cwd=Path(__file__).resolve().parents[1])
    assert out.exists(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["litellm_loaded"]
    assert report["before"] == 0
    # litellm alone leaves ~300,000 objects: all of them are out of the collector's walk.
    assert report["after_start"] > 100_000, report
    assert report["tracked_after_start"] < 1_000, report
    # A second gateway in the same process does not freeze again (its garbage would stay).
    # (Frozen objects freed since leave the count, so it can only have shrunk.)
    assert report["after_second_start"] <= report["after_start"], report
