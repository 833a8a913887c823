"""Write a byte-reproducible zip: same files in, same bytes out (on one zlib build).

Everything that zip tools usually take from the machine is fixed: entry order (the
caller's: ``manifest.json`` first, then every path sorted by its UTF-8 bytes), timestamps
(1980-01-01 00:00:00, the zip epoch), permissions (a regular file, 0644), the "made by"
system (Unix), the compression (deflate, level 6) and no archive comment. The file is
written next to its destination and renamed into place, so a reader never sees half a
bundle. Entries are streamed in chunks, so a bundle of any size is written in
bounded memory.

Compressed bytes can still differ between zlib builds; that is why a bundle's identity
is its manifest's digest, not the zip's.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Iterable, Iterator

from ..verify.manifest import MANIFEST, path_order

__all__ = ["write_zip", "in_bundle_order", "FIXED_TIME", "FILE_MODE"]

FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644
_LEVEL = 6


def _info(name: str, size: int) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    zi.compress_type = zipfile.ZIP_DEFLATED
    zi.create_system = 3
    zi.external_attr = FILE_MODE << 16
    zi.file_size = size  # what ``writestr`` sets before writing: decides the zip64 header
    zi._compresslevel = _LEVEL  # as ``writestr(..., compresslevel=)`` does
    return zi


def write_zip(out_path: Path, entries: Iterable[tuple[str, int, Iterable[bytes]]]) -> int:
    """Write ``entries`` (name, size, chunks of its bytes), in the order given, to
    ``out_path``, one chunk in memory at a time; returns the zip's size. Each entry's bytes
    are exactly those ``writestr`` would have packed at once (deflate's output does not
    depend on how its input is split).

    Raises OSError when the destination cannot be written, and whatever reading a
    chunk raises (then nothing is left at ``out_path``).
    """
    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh, zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
            for name, size, chunks in entries:
                with zf.open(_info(name, size), "w") as dest:
                    for chunk in chunks:
                        dest.write(chunk)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out_path.stat().st_size


def in_bundle_order(manifest: bytes, files: dict[str, bytes]) -> Iterator[tuple[str, int, list[bytes]]]:
    """``write_zip``'s entries for files held in memory: ``manifest.json`` first, then every
    path sorted by its UTF-8 bytes (for tests and tools that repack a bundle)."""
    yield MANIFEST, len(manifest), [manifest]
    for name in sorted(files, key=path_order):
        yield name, len(files[name]), [files[name]]
