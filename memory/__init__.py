"""Layered, file-first memory: sessions, history.jsonl, long-term files, Dream, GitStore."""
