"""``lucid skills list`` and ``lucid skills add PATH``: the skills the assistant can use.

``list`` shows every skill the prompt would list (workspace ones overriding built-ins),
where it comes from and whether this machine has what it needs. ``add`` installs a skill
folder or a local archive into the workspace (``gateway/skills/install.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lucidgate.gateway.cli._common import AgentOption, ConfigOption, console, err_console, load_agent, new_table


def register(app: typer.Typer) -> None:
    skills_app = typer.Typer(help="List and install skills (skills/<name>/SKILL.md).",
                             no_args_is_help=True)
    skills_app.command("list")(list_skills)
    skills_app.command("add")(add_skill)
    app.add_typer(skills_app, name="skills")


def list_skills(config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """List skills: name, source (built-in or workspace), available or what is missing."""
    from lucidgate.gateway.skills.catalog import SkillsLoader, config_checker

    config = load_agent(config_path, agent)
    skills = SkillsLoader(config.workspace, config_check=config_checker(config)).load()
    table = new_table("name", "source", "status", "path", "description", title="skills")
    for skill in skills:
        status = ("always on" if skill.always else "available") if skill.available else skill.status
        table.add_row(skill.name, skill.source, status, skill.virtual_path, skill.description)
    console.print(table)


def add_skill(
    path: Annotated[Path, typer.Argument(help="A skill folder, or a local .zip/.tar.gz archive of one.")],
    force: Annotated[bool, typer.Option("--force", help="Replace an installed skill of the same name.")] = False,
    config_path: ConfigOption = None,
    agent: AgentOption = None,
) -> None:
    """Install a skill into the workspace (validated; never overwrites without --force)."""
    from lucidgate.gateway.skills.install import SkillInstallError, install

    config = load_agent(config_path, agent)
    try:
        done = install(path.expanduser(), config.workspace, force=force)
    except (SkillInstallError, OSError) as exc:
        err_console.print(f"not installed: {exc}")
        raise typer.Exit(1) from None
    skill = done.skill
    verb = "replaced" if done.replaced else "installed"
    console.print(f"{verb} skill {skill.name!r} at {config.workspace / 'skills' / skill.name}")
    if not skill.available:
        console.print(f"note: it is unavailable on this machine: needs {', '.join(skill.missing)}")
