"""The container recipe, checked by reading it (no Docker engine runs here): a health check
without curl, the volume created and owned in the image, dependencies before source, a
minimal build context, pinned apt packages, a numeric user, and a hardened compose file."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def test_the_image_installs_dependencies_before_the_source_with_the_ci_lock():
    steps = instructions()
    copies = [(i, args) for i, (word, args) in enumerate(steps) if word == "COPY"]
    runs = [(i, args) for i, (word, args) in enumerate(steps) if word == "RUN"]
    deps = next(i for i, args in runs if "-r /tmp/requirements.txt" in args)
    first_code = next(i for i, args in copies if re.search(r"\b(gateway|config|channels|memory|scheduler)\b", args)
                      and "requirements.lock" not in args)
    assert deps < first_code, "dependencies must be installed before the code is copied"
    assert "-c requirements.lock" in dict(runs)[deps]
    assert "-c requirements.lock" in (REPO / ".ci" / "run").read_text()  # the same pins as CI
    assert not any(re.search(r"\b(tests|bench)\b", args) for _, args in copies)
    assert not any(re.search(r"\b(gcc|g\+\+|build-essential|clang|make)\b", args) for _, args in runs)


def test_apt_packages_are_pinned_and_the_user_is_numeric():
    steps = instructions()
    for word, args in steps:
        if word == "RUN" and "apt-get install" in args:
            packages = args.split("apt-get install", 1)[1].split("&&", 1)[0].split()
            names = [p for p in packages if not p.startswith("-")]
            assert names and all("=" in p for p in names), names  # hadolint DL3008
            assert "--no-install-recommends" in packages
            assert "rm -rf /var/lib/apt/lists/*" in args
    users = [args for word, args in steps if word == "USER"]
    assert users and all(re.fullmatch(r"\d+(:\d+)?", u) for u in users), users  # hadolint DL3066


def test_the_volume_exists_in_the_image_owned_by_the_runtime_user():
    steps = instructions()
    volume = next(args for word, args in steps if word == "VOLUME")
    path = re.search(r'"([^"]+)"', volume).group(1)  # type: ignore[union-attr]
    uid = next(args for word, args in steps if word == "USER").split(":")[0]
    creates = [args for word, args in steps if word == "RUN" and path in args]
    assert any(re.search(rf"install -d -o {uid} -g {uid} -m 0?700 {re.escape(path)}", a) for a in creates), creates
    env = " ".join(args for word, args in steps if word == "ENV")
    assert f"LUCIDGATE_CONFIG={path}/config.json" in env  # config and workspace both in the volume


def test_the_health_check_needs_no_curl_and_the_command_exists():
    steps = instructions()
    health = next(args for word, args in steps if word == "HEALTHCHECK")
    assert '"lucid", "healthcheck"' in health and "curl" not in health and "wget" not in health
    done = subprocess.run([sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "healthcheck", "--help"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "/healthz" in done.stdout


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes."""
    verdict = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.replace("**/", "")) or
               fnmatch.fnmatchcase(p, pat.replace("**/", "*/")) for p in prefixes):
            verdict = not negate
    return verdict


def test_the_build_context_leaves_out_venv_git_tests_and_bench():
    patterns = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines()
                if l.strip() and not l.startswith("#")]
    for path in (".venv/lib/site.py", ".git/HEAD", "tests/test_cli.py", "bench/bench_turn.py",
                 "gateway/__pycache__/cli.cpython-311.pyc", ".ci/run"):
        assert _ignored(path, patterns), path
    for path in ("gateway/daemon/server.py", "gateway/static/console.html", "config/templates/SOUL.md",
                 "pyproject.toml", "setup.py", "requirements.lock", "README.md", "memory/store.py"):
        assert not _ignored(path, patterns), path


def test_compose_runs_it_hardened_with_a_health_check():
    doc = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    svc = doc["services"]["lucidgate"]
    assert svc["restart"] in ("unless-stopped", "always", "on-failure")
    assert svc["read_only"] is True
    assert any(str(t).startswith("/tmp") for t in svc["tmpfs"])
    assert svc["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in svc["security_opt"]
    assert svc["healthcheck"]["test"] == ["CMD", "lucid", "healthcheck"]
    assert all(p.startswith("127.0.0.1:") for p in svc["ports"])  # not on every interface by default
    volume = next(args for word, args in instructions() if word == "VOLUME")
    assert any(v.endswith(":" + re.search(r'"([^"]+)"', volume).group(1)) for v in svc["volumes"])  # type: ignore[union-attr]


def test_the_env_example_has_no_live_placeholder_and_reaches_a_host_model_server(tmp_path: Path):
    from lucidgate.config import load_config

    lines = (REPO / "deploy" / "lucidgate.env.example").read_text().splitlines()
    live = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert live == []  # nothing is set until the user chooses: no "sk-..." sent as a key
    settings = dict(line.lstrip("# ").split("=", 1) for line in lines
                    if re.match(r"^#\s*LUCIDGATE_\w+=", line))
    assert settings["LUCIDGATE_PROVIDERS__OPENAI__API_BASE"].startswith("http://host.docker.internal:")
    settings = {k: v for k, v in settings.items() if v}  # every example names a real setting
    config = load_config(tmp_path / "none.json", settings)
    assert config.channels.telegram.allow_from == ["123456789"]
    svc = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())["services"]["lucidgate"]
    assert "host.docker.internal:host-gateway" in svc["extra_hosts"]
