"""Step 1, the container: the manifest lists exactly the entries present, with their bytes.

Every entry is inflated (capped, CRC-checked by ``_zip``) and hashed once here; the
digests and bytes are kept for the later steps. A missing or malformed manifest makes the
input unreadable (exit 2); a listed entry that is missing, unlisted, duplicated, or whose
size or SHA-256 differs is a failure of this section (exit 1).
"""

from __future__ import annotations

import hashlib

from ._context import Bundle
from ._errors import UnreadableBundle, VerificationError
from ._report import Section
from .manifest import MANIFEST, FileEntry, parse_manifest

__all__ = ["verify_container"]

_MANIFEST_LIMIT = 512 << 20


def verify_container(b: Bundle, sec: Section) -> None:
    """Raises UnreadableBundle when there is no readable manifest; records the rest in ``sec``."""
    _load_manifest(b)
    for name in b.view.names:
        sec.attempt(_hash_entry, b, name)
    seen: set[str] = set()
    for row in b.manifest.files:
        sec.attempt(_check_row, b, row, seen)
    for name in b.view.names:
        if name != MANIFEST:
            sec.attempt(_check_listed, name, seen)
    sec.count("entries", len(b.view.names))
    sec.count("bytes", sum(e.usize for e in b.view.entries.values()))


def _load_manifest(b: Bundle) -> None:
    if MANIFEST not in b.view.entries:
        raise UnreadableBundle("", f"not a BenchClaw bundle: no {MANIFEST}")
    if b.view.entries[MANIFEST].usize > _MANIFEST_LIMIT:
        raise UnreadableBundle(MANIFEST, f"larger than {_MANIFEST_LIMIT} bytes")
    try:
        data = b.view.read(MANIFEST)
    except VerificationError as e:
        raise UnreadableBundle(MANIFEST, e.message) from None
    b.content[MANIFEST] = data
    b.manifest = parse_manifest(data)


def _hash_entry(b: Bundle, name: str) -> None:
    data = b.content.get(name)
    if data is None:
        data = b.view.read(name)  # raises VerificationError for a corrupt entry
        if not name.startswith("objects/"):
            b.content[name] = data  # objects are most of the bytes and read at most once more
    b.digests[name] = "sha256:" + hashlib.sha256(data).hexdigest()


def _check_row(b: Bundle, row: FileEntry, seen: set[str]) -> None:
    if row.path == MANIFEST:
        raise VerificationError(MANIFEST, "the manifest lists itself")
    if row.path in seen:
        raise VerificationError(MANIFEST, f"{row.path} is listed twice")
    seen.add(row.path)
    if row.path not in b.view.entries:
        raise VerificationError(row.path, "listed in the manifest but missing from the bundle")
    if row.path not in b.digests:
        return  # unreadable entry: already reported
    size = b.view.entries[row.path].usize  # the read checked the bytes have this length
    if size != row.size:
        raise VerificationError(row.path, f"size is {size} bytes, the manifest says {row.size}")
    if b.digests[row.path] != row.digest:
        raise VerificationError(row.path, f"SHA-256 is {b.digests[row.path]}, the manifest says {row.digest}")


def _check_listed(name: str, seen: set[str]) -> None:
    if name not in seen:
        raise VerificationError(name, "in the bundle but not listed in the manifest")
