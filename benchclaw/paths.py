"""Where the data that ships with BenchClaw lives.

The repository keeps ``tasks/`` and ``site_templates/`` at the top level (see DESIGN.md);
a wheel installs them as ``benchclaw/_tasks`` and ``benchclaw/_site_templates``. These
helpers return whichever exists, so a source checkout, an editable install and a plain
install all find the same files.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_tasks_dir", "site_templates_dir", "package_data_dir"]

_PKG = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[0]


def builtin_tasks_dir() -> Path:
    """The folder of built-in task fixtures (``tasks/`` in a checkout)."""
    return _first_existing(_PKG / "_tasks", _PKG.parent / "tasks")


def site_templates_dir() -> Path:
    """The folder of jinja2 templates and static files of the replay site."""
    return _first_existing(_PKG / "_site_templates", _PKG.parent / "site_templates")


def package_data_dir() -> Path:
    """``benchclaw/data``: catalogs, agent profiles and other small shipped files."""
    return _PKG / "data"
