"""The agent: per-session workers, the turn (prompt, tool loop, transcript) and what a turn
leaves behind in memory (flushes, commits)."""
