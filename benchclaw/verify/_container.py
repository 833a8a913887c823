"""Step 1, the container: the manifest lists exactly the entries present, with their bytes.

The reading stage (``_reading``) has inflated (capped, CRC-checked by ``_zip``) and hashed
every entry; this step compares what it found with the manifest's rows. A missing or
malformed manifest made the input unreadable (exit 2) before any step; an entry that could
not be inflated, or that is listed but missing, unlisted, duplicated, or whose size or
SHA-256 differs, is a failure of this section (exit 1).
"""

from __future__ import annotations

from ._errors import VerificationError
from ._index import Index, ManifestRows
from ._report import Section
from .manifest import MANIFEST, FileEntry

__all__ = ["verify_container"]


def verify_container(ix: Index, sec: Section) -> None:
    if ix.unread:  # (in archive order)
        for name in ix.names:
            if name in ix.unread:
                sec.fail(ix.unread[name])
    if not _all_hold(ix):  # else each row and entry is checked on its own, every defect reported
        seen: set[str] = set()
        for row in ix.manifest.files:
            sec.attempt(_check_row, ix, row, seen)
        for name in ix.names:
            if name != MANIFEST:
                sec.attempt(_check_listed, name, seen)
    sec.count("entries", len(ix.names))
    sec.count("bytes", sum(ix.sizes.values()))


def _all_hold(ix: Index) -> bool:
    """Whether every row is an entry read with its size and SHA-256, listed once, and every
    entry but the manifest listed: the checks below all holding, as in an honest bundle,
    found in one pass by the entries' positions (no name made or looked up: ``ManifestRows``
    found each row's entry as the reading stage read it). False at the first doubt, and for
    rows not so kept: those checks then say what it is."""
    rows = ix.manifest.files
    if not isinstance(rows, ManifestRows):
        return False
    names, sizes, digests = ix.names, ix.sizes.by_position(), ix.digests
    hashed = digests.hashed_to_names(names)  # which object entries' bytes hash to their name
    seen, listed, manifest = bytearray(len(names)), 0, names.find(MANIFEST)
    for at, size, digest in rows.by_position():
        if at < 0 or at == manifest or seen[at] or sizes[at] != size:
            return False
        seen[at] = 1
        listed += 1
        if not (hashed.at(at) if digest is None else digests.get(names[at]) == digest):
            return False
    return listed == len(names) - (manifest >= 0)  # the rows are entries: these are all of them


def _check_row(ix: Index, row: FileEntry, seen: set[str]) -> None:
    if row.path == MANIFEST:
        raise VerificationError(MANIFEST, "the manifest lists itself")
    if row.path in seen:
        raise VerificationError(MANIFEST, f"{row.path} is listed twice")
    seen.add(row.path)
    if row.path not in ix.sizes:
        raise VerificationError(row.path, "listed in the manifest but missing from the bundle")
    if row.path not in ix.digests:
        return  # unreadable entry: already reported
    size = ix.sizes[row.path]  # the read checked the bytes have this length
    if size != row.size:
        raise VerificationError(row.path, f"size is {size} bytes, the manifest says {row.size}")
    if ix.digests[row.path] != row.digest:
        raise VerificationError(row.path, f"SHA-256 is {ix.digests[row.path]}, the manifest says {row.digest}")


def _check_listed(name: str, seen: set[str]) -> None:
    if name not in seen:
        raise VerificationError(name, "in the bundle but not listed in the manifest")
