"""Write a byte-reproducible zip: same files in, same bytes out (on one zlib build).

Everything that zip tools usually take from the machine is fixed: entry order
(``manifest.json`` first, then every path sorted by its UTF-8 bytes), timestamps
(1980-01-01 00:00:00, the zip epoch), permissions (a regular file, 0644), the "made by"
system (Unix), the compression (deflate, level 6) and no archive comment. The file is
written next to its destination and renamed into place, so a reader never sees half a
bundle.

Compressed bytes can still differ between zlib builds; that is why a bundle's identity
is its manifest's digest, not the zip's.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ..verify.manifest import MANIFEST, path_order

__all__ = ["write_zip", "FIXED_TIME", "FILE_MODE"]

FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644
_LEVEL = 6


def _info(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    zi.compress_type = zipfile.ZIP_DEFLATED
    zi.create_system = 3
    zi.external_attr = FILE_MODE << 16
    return zi


def write_zip(out_path: Path, manifest: bytes, files: dict[str, bytes]) -> int:
    """Write ``manifest`` then ``files`` (path -> bytes) to ``out_path``; returns its size.

    Raises OSError when the destination cannot be written.
    """
    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh, zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
            zf.writestr(_info(MANIFEST), manifest, compresslevel=_LEVEL)
            for name in sorted(files, key=path_order):
                zf.writestr(_info(name), files[name], compresslevel=_LEVEL)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out_path.stat().st_size
