"""Names that become file or folder names (experiment ids, ledger ids, journal writers),
and text that reaches a terminal (``terminal_safe``).

Its own tiny module because both sides need it: the store (which writes under those
names) and the pure parsers the offline verifier imports (a spec's ``id`` is checked the
same way), and the store is not pure. Standard library only.
"""

from __future__ import annotations

import re
import unicodedata

from ..errors import InputError

__all__ = ["safe_name", "SAFE_NAME_CHARS", "terminal_safe", "json_terminal_safe", "entry_name_problem",
           "entry_name_fold", "ENTRY_NAME_BYTES"]

SAFE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def safe_name(name: str, what: str) -> str:
    """Reject names that could escape their folder (experiment ids, writer ids). Raises
    ``InputError`` naming ``what``."""
    if not name or name.startswith(".") or any(c not in SAFE_NAME_CHARS for c in name) or len(name) > 128:
        raise InputError(f"{what} {name!r}: use letters, digits, '-', '_' and '.' only")
    return name


# Bidirectional overrides and isolates reorder what a terminal shows ("Trojan source").
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def terminal_safe(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every character a terminal would obey escaped (``\\x1b``, ``\\x9b``,
    ``\\u202e``): C0 and C1 controls, DEL and bidirectional overrides. Models, providers,
    tasks and bundles supply text that is printed; none of it may move the cursor, retitle
    the window, clear the screen or overwrite a line. ``\\n`` and ``\\t`` stay unless
    ``keep_newlines`` is false (one-line fields: a newline there could fake a status line)."""
    if text.isprintable() and (keep_newlines or "\n" not in text):
        return text
    keep = "\n\t" if keep_newlines else "\t"
    return "".join(_escape(c) if c not in keep and _obeyed(c) else c for c in text)


def _obeyed(c: str) -> bool:
    return (ord(c) < 0xA0 and not c.isprintable()) or c in _BIDI


def json_terminal_safe(text: str) -> str:
    """JSON text with the characters ``terminal_safe`` escapes written as ``\\uXXXX``
    escapes, so the JSON stays valid and means the same (they can only occur in strings;
    JSON already escapes C0 controls itself)."""
    if text.isprintable() or all(c in "\n\t" or not _obeyed(c) for c in text):
        return text
    return "".join(f"\\u{ord(c):04x}" if c not in "\n\t" and _obeyed(c) else c for c in text)


# The bundle's file-name rules (the verifier's reader refuses any other name): a task file
# becomes the entry ``tasks/<id>/v<N>/<path>``, so the task loader applies them too and a
# bad name fails when the task is loaded, not when an auditor opens the bundle.
ENTRY_NAME_BYTES = 512
_FORBIDDEN_IN_ENTRY = re.compile(r"[\x00-\x1f\x7f\\:]")


def entry_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a bundle entry name, or None."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > ENTRY_NAME_BYTES:
        return f"empty or longer than {ENTRY_NAME_BYTES} bytes"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if name.startswith("/") or any(p in ("", ".", "..") for p in name.split("/")):
        return "absolute path, '..', '.' or an empty part (path traversal)"
    if _FORBIDDEN_IN_ENTRY.search(name):
        return "backslash, colon or control character in the name"
    return None


def entry_name_fold(name: str) -> str:
    """Names equal after this (case folding, Unicode NFKC) collide in a bundle."""
    return unicodedata.normalize("NFKC", name).casefold()
