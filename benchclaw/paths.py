"""Where the data that ships with BenchClaw lives.

The repository keeps ``tasks/`` and ``site_templates/`` at the top level (see DESIGN.md);
a wheel installs them as ``benchclaw/_tasks`` and ``benchclaw/_site_templates``. These
helpers return whichever exists, so a source checkout, an editable install and a plain
install all find the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError, UsageError

__all__ = ["builtin_tasks_dir", "site_templates_dir", "package_data_dir", "EVIDENCE_DIRS",
           "refuse_evidence_overlap", "make_output_dir"]

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


# What a project folder holds that outputs must never land in (DESIGN.md: data flows one
# way, from tasks and specs through runs into derived products).
EVIDENCE_DIRS = ("runs", "experiments", "tasks")


def _is_runs_dir(p: Path) -> bool:
    try:
        return (p / "VERSION").read_bytes().startswith(b"benchclaw-runs ")
    except OSError:
        return False


def refuse_evidence_overlap(out: Path | str, what: str, *, evidence: tuple = (),
                            may_contain: bool = False) -> None:
    """Raise UsageError when the output location ``out`` lies inside, is, or (unless
    ``may_contain``) contains evidence: the folders in ``evidence`` (the runs and tasks
    folders a command reads), ``runs/``, ``experiments/`` and ``tasks/`` of the current
    folder, or any runs directory."""
    out_r = Path(out).resolve()
    guarded = {Path(e).resolve() for e in evidence if e is not None}
    guarded |= {(Path.cwd() / name).resolve() for name in EVIDENCE_DIRS}
    for ev in sorted(guarded):
        if not ev.exists():
            continue
        if out_r == ev or ev in out_r.parents:
            raise UsageError(f"{out}: the {what} would be written inside {ev}, which holds evidence "
                             "(never write outputs inside the runs directory, experiments/ or tasks/)")
        if not may_contain and out_r in ev.parents:
            raise UsageError(f"{out}: the {what} folder contains {ev}, which holds evidence; "
                             "choose a folder of its own (e.g. site/)")
    for p in (out_r, *out_r.parents):
        if _is_runs_dir(p):
            raise UsageError(f"{out}: the {what} would be written inside the runs directory {p}")
    if not may_contain and _is_runs_dir(out_r / "runs"):  # (a site's own runs/ holds pages, no VERSION)
        raise UsageError(f"{out}: the {what} folder holds the runs directory {out_r / 'runs'}; "
                         "choose a folder of its own")


def make_output_dir(path: Path | str, what: str) -> Path:
    """Create an output folder (and its parents). Raises InputError with one line naming it
    when that is impossible (a file is in the way, /proc, a read-only place)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{p}: the {what} folder is not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{p}: cannot create the {what} folder ({e.strerror or e})") from None
    if not os.access(p, os.W_OK):
        raise InputError(f"{p}: the {what} folder is not writable")
    return p
