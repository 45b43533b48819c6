"""The exec tool's deny-list: refuse obviously destructive commands before they run.

A guard rail against accidents (``rm -rf /``, ``mkfs``, ``curl | sh``, fork bombs, power
commands), **not a sandbox**: a determined command can always be phrased past it. The
real boundary is that only the owner may use ``exec``.
"""

from __future__ import annotations

import os
import re
import shlex

_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_PREFIX_WORDS = frozenset({
    "sudo", "doas", "env", "nohup", "time", "command", "builtin", "exec", "nice", "ionice",
    "timeout", "stdbuf", "setsid", "xargs", "then", "do", "else", "if", "while", "until", "{", "!",
})
_OPTIONS_WITH_VALUE = frozenset({"-u", "-g", "-n", "-c", "-s", "-k", "-p", "-C", "-D", "-h", "-U"})
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_SYSTEM_DIRS = re.compile(
    r"/(bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|run|sbin|srv|sys|usr|var|"
    r"Applications|Library|System|Users)"
)
_FORK_BOMB = re.compile(r"([\w:.]+)\s*\(\s*\)\s*\{[^}]*?\1\s*\|\s*&?\s*\1"
                        r"|\bfork\s+while\s+fork\b|\bwhile\s*\(?\s*(?:1|true)\s*\)?\s*[;{]?\s*(?:do\s+)?fork\b")
_SHELL_RE = r"(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?(?:ba|z|da|k|fi)?sh\b"
_PIPE_TO_SHELL = re.compile(
    rf"\b(?:curl|wget)\b[^;\n]*\|\s*{_SHELL_RE}"
    rf"|{_SHELL_RE}\s+(?:-\S+\s+)*<\(\s*(?:curl|wget)\b"
    rf"|(?:\beval|{_SHELL_RE}\s+-c)\s+[\"']?\$\(\s*(?:curl|wget)\b"
)
_BLOCK_DEVICE = re.compile(
    r"(?:>\|?|\btee\s+(?:-\S+\s+)*|\bof=)\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|mapper/|md\d)"
)
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")


def dangerous_reason(command: str, _depth: int = 0) -> str | None:
    """Why ``command`` is refused, or None. Looks into ``$(...)``, backticks and ``sh -c``."""
    if _depth > 3:
        return None
    if _FORK_BOMB.search(command):
        return "it looks like a fork bomb"
    if _PIPE_TO_SHELL.search(command):
        return "it pipes a download straight into a shell; download the script, read it, then run it"
    if _BLOCK_DEVICE.search(command):
        return "it writes to a raw disk device"
    for groups in _SUBSTITUTION.findall(command):
        reason = dangerous_reason(groups[0] or groups[1], _depth + 1)
        if reason:
            return reason
    for argv in _simple_commands(command):
        reason = _argv_reason(argv, _depth)
        if reason:
            return reason
    return None


def _simple_commands(command: str) -> list[list[str]]:
    """Split a command line into its simple commands' argv, leading wrappers removed."""
    text = command.replace("\n", " ; ").replace("`", " ; ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: fall back to a rough split
        tokens = [t for t in re.split(r"\s+|([;&|()<>])", text) if t]
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token and all(c in ";&|()<>" for c in token):
            segments.append([])
        else:
            segments[-1].append(token)
    return [argv for seg in segments if (argv := _strip_wrappers(seg))]


def _strip_wrappers(seg: list[str]) -> list[str]:
    i = 0
    while i < len(seg):
        word = seg[i]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", word) or word == "$":
            i += 1
            continue
        if _base(word) not in _PREFIX_WORDS:
            break
        i += 1
        while i < len(seg) and (seg[i].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", seg[i])):
            i += 2 if seg[i] in _OPTIONS_WITH_VALUE else 1
    return seg[i:]


def _base(word: str) -> str:
    return os.path.basename(word.lstrip("\\"))


def _argv_reason(argv: list[str], depth: int) -> str | None:
    name, args = _base(argv[0]), argv[1:]
    options = [a for a in args if a.startswith("-")]
    targets = [a for a in args if not a.startswith("-")]
    recursive = any(o in ("--recursive",) or (not o.startswith("--") and ("r" in o or "R" in o))
                    for o in options)
    if name == "rm":
        if "--no-preserve-root" in options:
            return "rm --no-preserve-root is never run"
        if recursive:
            for target in targets:
                if what := _critical_path(target):
                    return f"rm -r would delete {what}; delete specific paths instead"
    # chmod's "-r" is a mode (remove read), so only "R" means recursive here.
    if name in ("chmod", "chown", "chgrp") and any(
        o == "--recursive" or (not o.startswith("--") and "R" in o) for o in options
    ):
        for target in targets:
            if (what := _critical_path(target)) and "workspace" not in what:
                return f"{name} -R on {what} is refused"
    if name.startswith("mkfs") or name in ("mke2fs", "mkswap", "wipefs"):
        return f"{name} formats or wipes a disk"
    if name == "dd" and any(re.fullmatch(r"of=/dev/(?!null$|zero$|stdout$|stderr$).*", a) for a in args):
        return "dd onto a device overwrites it"
    if name in _POWER or (name == "systemctl" and set(args) & {"poweroff", "reboot", "halt", "kexec"}):
        return "it would shut down or reboot the machine"
    if name in ("init", "telinit") and set(args) & {"0", "6"}:
        return "it would shut down or reboot the machine"
    if name in _SHELLS:
        # -c, alone or among other short flags (-lc, -ic, -xec): the next word is a script.
        for i, arg in enumerate(args[:-1]):
            if re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", arg):
                return dangerous_reason(args[i + 1], depth + 1)
    if name in ("kill", "pkill") and "-1" in args[1:]:
        return "kill -1 signals every process this user runs"
    if name in ("killall5",):
        return f"{name} signals every process on the machine"
    if name == "find" and targets:
        deletes = "-delete" in args or any(
            args[i] in ("-exec", "-execdir", "-ok") and i + 1 < len(args) and _base(args[i + 1]) in ("rm", "shred")
            for i in range(len(args)))
        what = _critical_path(targets[0])
        if deletes and what and "workspace" not in what:
            return f"find … -delete on {what} is refused; name specific paths"
    if name == "eval" and args:
        return dangerous_reason(" ".join(args), depth + 1)
    return None


def _critical_path(target: str) -> str | None:
    """Describe ``target`` if deleting it recursively would be a disaster."""
    path = re.sub(r"/+", "/", target.replace("${HOME}", "~").replace("$HOME", "~"))
    while len(path) > 1 and path.endswith(("/", "/*", "/.")):
        path = path[:-1] if path.endswith("/") else path[:-2]
    if path in ("", "/", "/*"):
        return "the root filesystem"
    if path == "~":
        return "the home directory"
    if path in ("*", "."):
        return "the whole workspace (memory, sessions, skills)"
    if path == "..":
        return "the folder that holds the workspace"
    if _SYSTEM_DIRS.fullmatch(path):
        return f"the system directory {path}"
    return None
