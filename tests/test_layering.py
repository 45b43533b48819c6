"""The package layering of DESIGN §1, enforced on the source: config ← memory ← (scheduler,
channels) ← gateway, and no import cycles between modules. The five folders install as one
namespace (``lucidgate.config``, ...): an absolute import of ours always names it.

Every ``import`` in every .py of our five packages counts — module level, inside functions
and under ``TYPE_CHECKING`` alike — because a function-level import is a dependency that
merely runs later, and a type-only one still means the lower layer knows the upper one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "memory", "channels", "scheduler", "gateway")
NAMESPACE = "lucidgate"

# What each package may import from ours (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "config": frozenset(),
    "memory": frozenset({"config"}),
    "channels": frozenset({"config"}),
    "scheduler": frozenset({"config", "memory", "channels"}),
    "gateway": frozenset({"config", "memory", "channels", "scheduler"}),
}
# scheduler sees channels only through the bus interface and the message types.
SCHEDULER_CHANNELS = frozenset({"channels.bus", "channels.messages"})

# Inside gateway, each part (a sub-package or a loose module) may import only parts on its own
# tier or below: observability and errors at the bottom, then the model client and the skill
# catalog, the tools, MCP, the agent's turn machinery, the runtime that holds the parts, the
# surfaces that act on a running gateway, the composition root (with its workspace-store factory),
# the HTTP daemon, operations, and the CLI on top.
GATEWAY_TIERS: tuple[frozenset[str], ...] = tuple(frozenset(tier) for tier in (
    {"errors", "_offline", "metrics", "logs"},
    {"model", "skills"},
    {"tools"},
    {"mcp", "approvals"},
    {"agent"},
    {"runtime", "lifecycle", "components"},
    {"commands", "console", "migrate"},
    {"app", "stores", "agent_stack"},
    {"daemon"},
    {"ops"},
    {"cli"},
))
# At most this many modules stay loose at gateway's root; everything else lives in a room.
MAX_LOOSE_GATEWAY_MODULES = 10


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module of ours) for every import statement in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _ours(_unprefixed(alias.name))
                if target:
                    yield node.lineno, target
        elif isinstance(node, ast.ImportFrom):
            base = _unprefixed(node.module or "")
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule when there is one.
                target = _ours(f"{base}.{alias.name}") or _ours(base)
                if target:
                    yield node.lineno, target


def _unprefixed(dotted: str) -> str:
    """``lucidgate.gateway.app`` -> ``gateway.app``; anything else unchanged."""
    return dotted.removeprefix(f"{NAMESPACE}.")


def _bare_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, name) for each absolute import of one of our packages without the namespace."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield node.lineno, name


def _ours(dotted: str) -> str | None:
    """The module of ours that ``dotted`` names (the longest known prefix), or None."""
    if dotted.split(".")[0] not in PACKAGES:
        return None
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _graph() -> dict[str, set[str]]:
    return {name: {t for _, t in _imports(name, path) if t != name} for name, path in MODULES.items()}


def test_the_walk_sees_every_package() -> None:
    for package in PACKAGES:
        assert package in MODULES, f"{package}/__init__.py not found"
    assert len(MODULES) > 60
    # The parser really resolves imports, relative ones included.
    assert "config.schema" in _graph()["gateway.app"]


def test_every_import_of_ours_names_the_namespace() -> None:
    """Installed, only ``lucidgate`` exists: ``import config`` works in the repository alone."""
    sources = [*MODULES.values(), *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "bench").rglob("*.py"))]
    bare = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in sources
            for line, name in _bare_imports(path)]
    assert not bare, f"imports without the {NAMESPACE}. namespace:\n" + "\n".join(bare)


def test_packages_import_only_lower_layers() -> None:
    problems: list[str] = []
    for name, path in MODULES.items():
        package = name.split(".")[0]
        for line, target in _imports(name, path):
            target_package = target.split(".")[0]
            if target_package == package:
                continue
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if target_package not in ALLOWED[package]:
                problems.append(f"{where} ({package} may import only "
                                f"{sorted(ALLOWED[package]) or 'nothing of ours'})")
            elif package == "scheduler" and target_package == "channels" and target not in SCHEDULER_CHANNELS:
                problems.append(f"{where} (scheduler may use only {sorted(SCHEDULER_CHANNELS)})")
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_no_import_cycles_between_modules() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other in a cycle:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The detector itself works: a planted two-module and three-module cycle are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def _gateway_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "gateway" and len(parts) > 1 else None


def test_gateway_parts_import_only_their_tier_or_below() -> None:
    tier_of = {part: i for i, tier in enumerate(GATEWAY_TIERS) for part in tier}
    problems: list[str] = []
    for name, path in MODULES.items():
        source = _gateway_part(name)
        if source is None:
            continue
        if source not in tier_of:
            problems.append(f"{path.relative_to(ROOT)}: gateway part {source!r} has no tier in GATEWAY_TIERS")
            continue
        for line, target in _imports(name, path):
            dest = _gateway_part(target)
            if dest is None or dest == source:
                continue
            if tier_of.get(dest, len(GATEWAY_TIERS)) > tier_of[source]:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {target} "
                                f"({source} sits below {dest})")
    assert not problems, "gateway layering violations:\n" + "\n".join(problems)


def test_gateway_root_holds_few_loose_modules() -> None:
    loose = sorted(p.stem for p in (ROOT / "gateway").glob("*.py") if p.stem != "__init__")
    assert len(loose) <= MAX_LOOSE_GATEWAY_MODULES, f"loose modules at gateway/: {loose}"
    packages = {p.name for p in (ROOT / "gateway").iterdir() if (p / "__init__.py").exists()}
    tiered = set().union(*GATEWAY_TIERS)
    assert packages | set(loose) <= tiered, f"parts without a tier: {sorted((packages | set(loose)) - tiered)}"
