"""Skills: the catalog that finds built-in and workspace skills, the installer, and the
built-in skills themselves (``builtin/<name>/SKILL.md``, shipped as package data)."""
