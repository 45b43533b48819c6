"""``lucid doctor`` on memory versioning: did the last memory commit work?

A commit that fails is logged and the turn answers anyway, so without this check a
broken history (a read-only ``.git``, a full disk, damaged objects) could go unseen for
weeks. The outcome is what the last commit recorded (``memory.commit_health``); a later
successful commit clears a failure.
"""

from __future__ import annotations

from lucidgate.config.schema import Config
from lucidgate.gateway.ops.checks import Result, fail, ok, warn
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.memory.commit_health import CommitHealth

NAME = "memory commits"
MAX_NAMES_SHOWN = 5


def memory_commit_check(config: Config) -> Result:
    state = CommitHealth(WorkspaceParts(config).commit_state_path).read()
    if state.error is not None:
        when = f" at {state.failed_at}" if state.failed_at else ""
        return fail(NAME, f"last commit failed{when}: {state.error}",
                    f"fix what git says (e.g. `chmod -R u+w {config.workspace / '.git'}`); the next "
                    "memory change or `lucid memory log` commits what is waiting and clears this")
    if state.skipped:
        shown = ", ".join(state.skipped[:MAX_NAMES_SHOWN])
        more = f" (+{len(state.skipped) - MAX_NAMES_SHOWN} more)" if len(state.skipped) > MAX_NAMES_SHOWN else ""
        return warn(NAME, f"not versioned, their names cannot be stored: {shown}{more}",
                    "rename these files (a name spelled like .git, or bytes from another encoding)")
    return ok(NAME, "the last memory commit worked")
