"""Packaging that pyproject.toml cannot say: the repository's top-level folders install as one
namespace, ``lucidgate.config``, ``lucidgate.memory``, ... so site-packages gains only
``lucidgate`` and nothing collides with another distribution's ``config`` or ``gateway``.
Everything else (metadata, dependencies, package data) lives in pyproject.toml."""

from setuptools import find_namespace_packages, setup

LAYERS = ("config", "memory", "channels", "scheduler", "gateway")
NAMESPACE = "lucidgate"

setup(
    package_dir={f"{NAMESPACE}.{layer}": layer for layer in LAYERS},
    # Namespace discovery, so data folders (templates, static, builtin skills) count as packages too.
    packages=[f"{NAMESPACE}.{name}" for name in find_namespace_packages(
        include=[f"{layer}*" for layer in LAYERS], exclude=["*__pycache__*"])],
)
