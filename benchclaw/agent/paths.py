"""Path normalisation and the permission decision: pure, total, and strict.

Every path the model names passes through ``normalise`` before anything else looks at it,
and ``decide`` is the only place that says whether a read or a write may happen. Both are
pure functions of their arguments (no file system, no clock), so the property tests can
throw arbitrary strings at them and an auditor can read the whole rule set on one screen.

Why so strict: a path is text chosen by a model that may have just read a planted
injection. Anything that could mean different things to different readers is refused
rather than repaired: ``..`` segments, absolute paths, backslashes, NUL and other control
characters, ``:`` (drive letters, URL schemes, alternate data streams), and every
non-ASCII character (look-alike Unicode such as a fullwidth solidus or a Cyrillic ``а``
that NFKC would fold, or that a person would misread). Harmless spellings are folded to
one canonical form: ``./a.md`` and ``a//b.md`` become ``a.md`` and ``a/b.md``.

Globs are the task loader's (``benchclaw.checks.tasks.path_allowed``): ``*`` and ``?`` stay inside
one path segment, ``**`` spans segments, everything else is literal.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Collection, Iterable

from ..checks.tasks import path_allowed

__all__ = ["PathDenied", "Decision", "normalise", "glob_match", "decide", "MAX_PATH_BYTES", "OPS"]

MAX_PATH_BYTES = 255
MAX_SEGMENTS = 16
OPS = ("read", "write")


class PathDenied(ValueError):
    """A path the runtime refuses; ``str`` is the reason shown to the model and recorded."""


@dataclass(frozen=True)
class Decision:
    """The outcome of ``decide``: ``path`` is the normalised path (``None`` if unusable)."""

    permitted: bool
    path: str | None
    reason: str | None


def _check_characters(raw: str) -> None:
    if "\x00" in raw:
        raise PathDenied("path contains a NUL byte")
    if "\\" in raw:
        raise PathDenied("path contains a backslash; use '/'")
    if unicodedata.normalize("NFKC", raw) != raw:
        raise PathDenied("path contains look-alike Unicode (changes under NFKC normalisation)")
    bad = next((c for c in raw if ord(c) > 0x7E or ord(c) < 0x20), None)
    if bad is not None:
        kind = "a control character" if ord(bad) < 0x20 or ord(bad) == 0x7F else "a non-ASCII character"
        raise PathDenied(f"path contains {kind} (U+{ord(bad):04X}); paths are plain ASCII")
    if ":" in raw:
        raise PathDenied("path contains ':' (drive letters, schemes and streams are not paths)")


def normalise(raw: object) -> str:
    """The canonical workspace-relative form of ``raw``.

    Raises ``PathDenied`` (with the reason for the model) for anything that is not a plain,
    relative, ASCII path inside the workspace.
    """
    if not isinstance(raw, str):
        raise PathDenied(f"path must be a string, got {type(raw).__name__}")
    if raw.strip() == "":
        raise PathDenied("path is empty")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise PathDenied(f"path is longer than {MAX_PATH_BYTES} bytes")
    _check_characters(raw)
    if raw.startswith("/"):
        raise PathDenied("absolute paths are outside the workspace")
    if raw != raw.strip():
        raise PathDenied("path has leading or trailing white space")
    if raw.endswith("/"):
        raise PathDenied("path names a folder, not a file")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathDenied("'..' leads outside the workspace")
    if not parts:
        raise PathDenied("path names the workspace itself, not a file")
    if len(parts) > MAX_SEGMENTS:
        raise PathDenied(f"path is nested deeper than {MAX_SEGMENTS} folders")
    return "/".join(parts)


def glob_match(path: str, patterns: Iterable[str]) -> bool:
    """True when the normalised ``path`` matches one of ``patterns``: the task loader's own
    matcher (``benchclaw.checks.tasks.path_allowed``), so the loader's validation of a task's
    globs and the runtime's decisions can never disagree."""
    return path_allowed(list(patterns), path)


def decide(op: str, raw: object, *, readable: Collection[str], writable: Collection[str],
           inputs: Collection[str], overwrite_inputs: bool = False) -> Decision:
    """May ``op`` (``read`` or ``write``) touch ``raw``? Never raises for any ``raw``.

    A read is permitted on a path matching a readable glob, or a writable one (the agent
    may read back what it may write). A write is permitted on a path matching a writable
    glob that is not one of the task's input files, unless ``overwrite_inputs``.
    Raises ``ValueError`` only for an unknown ``op`` (a bug, not a model mistake).
    """
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}")
    try:
        path = normalise(raw)
    except PathDenied as e:
        return Decision(False, None, str(e))
    if op == "read":
        if glob_match(path, readable) or glob_match(path, writable):
            return Decision(True, path, None)
        return Decision(False, path, f"'{path}' is not readable in this task")
    if not glob_match(path, writable):
        return Decision(False, path, f"'{path}' is not writable in this task")
    if path in inputs and not overwrite_inputs:
        return Decision(False, path, f"'{path}' is an input file; this task does not allow overwriting inputs")
    return Decision(True, path, None)
