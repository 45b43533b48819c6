"""lucidgate's daemon, agent and command line.

The version is written here once: the package metadata reads it (pyproject's dynamic
version), and ``lucid --version`` prints it without loading ``importlib.metadata``.
"""

__version__ = "0.1.0"
