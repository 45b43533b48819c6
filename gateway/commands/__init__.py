"""Slash commands: the registry the agent loop dispatches to, and the built-in commands
(each acts on the running gateway's parts, never through a model turn of its own)."""
