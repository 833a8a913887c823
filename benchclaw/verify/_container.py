"""Step 1, the container: the manifest lists exactly the entries present, with their bytes.

Every entry is inflated (capped, CRC-checked by ``_zip``) and hashed once; the digests and
the bytes of everything but the objects are kept for the later steps. The objects (most of
a bundle's bytes, and read by step 2 only through their digests) and the run logs are
hashed in a forked worker (``start_object_hashing``) while this process parses the logs; the
section is the same, entry for entry and in archive order, as if one process did it all. A missing or malformed manifest makes the
input unreadable (exit 2); a listed entry that is missing, unlisted, duplicated, or whose
size or SHA-256 differs is a failure of this section (exit 1).
"""

from __future__ import annotations

import dataclasses
import hashlib

from ._context import Bundle
from ._errors import UnreadableBundle, VerificationError
from ._report import Section
from ._workers import start
from .manifest import MANIFEST, FileEntry, parse_manifest

__all__ = ["verify_container", "start_object_hashing", "cancel_object_hashing", "hash_entry"]

_MANIFEST_LIMIT = 512 << 20


def start_object_hashing(b: Bundle) -> None:
    """Load the manifest, then start hashing every object and run log in a forked worker
    (joined by ``verify_container``; this process parses the run logs meanwhile). Raises UnreadableBundle when there is no readable manifest."""
    _load_manifest(b)
    names = [n for n in b.view.names if n.startswith(("objects/", "runs/"))]
    b.object_hashing = (names, start(_hash_objects, b, names, timeout=b.limits.worker_seconds))


def _hash_objects(b: Bundle, names: list[str]) -> dict:
    """In the worker: each object's SHA-256 hex (None when unreadable), its read error, and
    what step 4 derives from it (``_costs.derive``), so no object is inflated twice."""
    from ._costs import derive

    digests, errors, derived = [], {}, []
    for name in names:
        try:
            data = b.view.read(name)
        except VerificationError as e:
            digests.append(_UNREAD)
            derived.append(None)
            errors[name] = e.to_dict()
            continue
        digests.append(hashlib.sha256(data).hexdigest())
        derived.append(derive(data) if name.startswith("objects/") else None)
    # one string of 64-character digests, not a list of strings: a fraction of the memory
    return {"digests": "".join(digests), "errors": errors, "derived": derived}


_UNREAD = "-" * 64


def _join_object_hashing(b: Bundle) -> dict[str, VerificationError]:
    """The worker's digests into ``b.digests``; its read errors by entry. Raises
    UnreadableBundle when the worker crashed or overran ``Limits.worker_seconds``."""
    names, pending = b.object_hashing
    b.object_hashing = None
    got = pending.result()
    hexes = got["digests"]
    if len(hexes) != 64 * len(names):
        raise UnreadableBundle("", "a verification worker returned a malformed result")
    for i, (name, derived) in enumerate(zip(names, got["derived"])):
        hexd = hexes[64 * i:64 * i + 64]
        if hexd != _UNREAD:
            b.digests[name] = "sha256:" + hexd
        if derived is not None:
            b.derived[name] = derived
    return {n: VerificationError(e["path"], e["message"], e["record"]) for n, e in got["errors"].items()}


def cancel_object_hashing(b: Bundle) -> None:
    """Stop a hashing worker that was not joined (safe to call when there is none)."""
    if b.object_hashing is not None:
        b.object_hashing[1].cancel()
        b.object_hashing = None


def verify_container(b: Bundle, sec: Section) -> None:
    """Raises UnreadableBundle when there is no readable manifest (or the object hashing
    worker failed); records the rest in ``sec``."""
    if b.manifest is None:
        _load_manifest(b)
    hashed = _join_object_hashing(b) if b.object_hashing is not None else {}
    for name in b.view.names:
        if name in hashed:
            sec.fail(hashed[name])
        else:
            sec.attempt(_hash_entry, b, name)
    seen: set[str] = set()
    for row in b.manifest.files:
        sec.attempt(_check_row, b, row, seen)
    for name in b.view.names:
        if name != MANIFEST:
            sec.attempt(_check_listed, name, seen)
    sec.count("entries", len(b.view.names))
    # the rows are checked; later steps read only the experiments, the digest and the label
    b.manifest = dataclasses.replace(b.manifest, files=())
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
    b.manifest = parse_manifest(data)
    b.digests[MANIFEST] = b.manifest.digest  # the SHA-256 of these bytes; they are not kept


def _hash_entry(b: Bundle, name: str) -> None:
    if name in b.digests:
        return  # hashed by the worker, or while step 2 parsed it
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


def hash_entry(b: Bundle, name: str) -> None:
    """Hash (and keep) one non-object entry ahead of step 1; a read error is left for step 1
    to report in its place."""
    try:
        _hash_entry(b, name)
    except VerificationError:
        pass
