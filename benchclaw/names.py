"""Names that become file or folder names (experiment ids, ledger ids, journal writers).

Its own tiny module because both sides need it: the store (which writes under those
names) and the pure parsers the offline verifier imports (a spec's ``id`` is checked the
same way), and the store is not pure. Standard library only.
"""

from __future__ import annotations

from .errors import InputError

__all__ = ["safe_name", "SAFE_NAME_CHARS"]

SAFE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def safe_name(name: str, what: str) -> str:
    """Reject names that could escape their folder (experiment ids, writer ids). Raises
    ``InputError`` naming ``what``."""
    if not name or name.startswith(".") or any(c not in SAFE_NAME_CHARS for c in name) or len(name) > 128:
        raise InputError(f"{what} {name!r}: use letters, digits, '-', '_' and '.' only")
    return name
