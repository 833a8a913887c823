"""Write a byte-reproducible zip: same files in, same bytes out (on one zlib build).

Everything that zip tools usually take from the machine is fixed: entry order (the
caller's: ``manifest.json`` first, then every path sorted by its UTF-8 bytes), timestamps
(1980-01-01 00:00:00, the zip epoch), permissions (a regular file, 0644), the "made by"
system (Unix), the compression (deflate, level 6) and no archive comment. The file is
written next to its destination and renamed into place, so a reader never sees half a
bundle. Entries are streamed in chunks, so a bundle of any size is written in
bounded memory.

The bytes are exactly those ``zipfile.ZipFile.writestr`` writes (a test holds them
equal), but the archive is laid out here rather than by ``ZipFile``: ``ZipFile`` keeps a
``ZipInfo`` (about 480 bytes with its name) per entry until it writes the central
directory, which grew the memory of a 200,000-entry export by about 100 MB. Here each
entry's central-directory record is made as soon as the entry is written and spilled to a
temporary file, which is appended at the end, so nothing is held per entry.

Compressed bytes can still differ between zlib builds; that is why a bundle's identity
is its manifest's digest, not the zip's.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zipfile
import zlib
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
        with open(tmp, "wb") as fh, tempfile.TemporaryFile() as central:
            count = 0
            for name, size, chunks in entries:
                central.write(_write_entry(fh, _info(name, size), chunks))
                count += 1
            _write_end(fh, central, count)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out_path.stat().st_size


def _write_entry(fh, zi: zipfile.ZipInfo, chunks: Iterable[bytes]) -> bytes:
    """Write one entry (local header, deflated bytes, then the header again with the CRC
    and sizes, as ``ZipFile.open(zi, "w")`` does on a seekable file); returns its
    central-directory record."""
    zip64 = zi.file_size * 1.05 > zipfile.ZIP64_LIMIT  # decided before writing, as zipfile does
    zi.header_offset, zi.CRC, zi.compress_size = fh.tell(), 0, 0  # known once written
    fh.write(zi.FileHeader(zip64))
    deflate = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)  # zipfile's raw deflate stream
    crc = size = packed = 0
    for chunk in chunks:
        size += len(chunk)
        crc = zlib.crc32(chunk, crc)
        out = deflate.compress(chunk)
        packed += len(out)
        fh.write(out)
    out = deflate.flush()
    packed += len(out)
    fh.write(out)
    zi.CRC, zi.compress_size, zi.file_size = crc, packed, size
    if not zip64 and (size > zipfile.ZIP64_LIMIT or packed > zipfile.ZIP64_LIMIT):
        raise RuntimeError(f"{zi.filename}: larger than its declared size ({size} bytes)")
    end = fh.tell()
    fh.seek(zi.header_offset)
    fh.write(zi.FileHeader(zip64))
    fh.seek(end)
    return _central_record(zi)


def _central_record(zi: zipfile.ZipInfo) -> bytes:
    """The entry's central-directory record, field for field as ``ZipFile`` writes it
    (zip64 extra when a size or the offset passes the 32-bit limit)."""
    limit, extra = zipfile.ZIP64_LIMIT, []
    file_size, compress_size, offset = zi.file_size, zi.compress_size, zi.header_offset
    if file_size > limit or compress_size > limit:
        extra += [file_size, compress_size]
        file_size = compress_size = 0xFFFFFFFF
    if offset > limit:
        extra.append(offset)
        offset = 0xFFFFFFFF
    extra_data, min_version = b"", 0
    if extra:
        extra_data = struct.pack("<HH" + "Q" * len(extra), 1, 8 * len(extra), *extra)
        min_version = zipfile.ZIP64_VERSION
    dt = zi.date_time
    dosdate = (dt[0] - 1980) << 9 | dt[1] << 5 | dt[2]
    dostime = dt[3] << 11 | dt[4] << 5 | (dt[5] // 2)
    filename, flag_bits = _encoded_name(zi)
    return struct.pack(zipfile.structCentralDir, zipfile.stringCentralDir, max(min_version, zi.create_version),
                       zi.create_system, max(min_version, zi.extract_version), zi.reserved, flag_bits,
                       zi.compress_type, dostime, dosdate, zi.CRC, compress_size, file_size, len(filename),
                       len(extra_data), 0, 0, zi.internal_attr, zi.external_attr, offset) + filename + extra_data


def _encoded_name(zi: zipfile.ZipInfo) -> tuple[bytes, int]:
    """The name as stored, and the flags (bit 11 for a UTF-8 name), as ``ZipInfo`` encodes them."""
    try:
        return zi.filename.encode("ascii"), zi.flag_bits
    except UnicodeEncodeError:
        return zi.filename.encode("utf-8"), zi.flag_bits | 0x800


def _write_end(fh, central, count: int) -> None:
    """Append the spilled central directory and the end records (zip64 ones when the
    entry count, the directory's offset or its size needs them), as ``ZipFile.close``."""
    start = fh.tell()
    central.seek(0)
    shutil.copyfileobj(central, fh, 1 << 20)
    pos = fh.tell()
    size, offset = pos - start, start
    if count > zipfile.ZIP_FILECOUNT_LIMIT or offset > zipfile.ZIP64_LIMIT or size > zipfile.ZIP64_LIMIT:
        fh.write(struct.pack(zipfile.structEndArchive64, zipfile.stringEndArchive64, 44, 45, 45, 0, 0,
                             count, count, size, offset))
        fh.write(struct.pack(zipfile.structEndArchive64Locator, zipfile.stringEndArchive64Locator, 0, pos, 1))
        count, size, offset = min(count, 0xFFFF), min(size, 0xFFFFFFFF), min(offset, 0xFFFFFFFF)
    fh.write(struct.pack(zipfile.structEndArchive, zipfile.stringEndArchive, 0, 0, count, count, size, offset, 0))


def in_bundle_order(manifest: bytes, files: dict[str, bytes]) -> Iterator[tuple[str, int, list[bytes]]]:
    """``write_zip``'s entries for files held in memory: ``manifest.json`` first, then every
    path sorted by its UTF-8 bytes (for tests and tools that repack a bundle)."""
    yield MANIFEST, len(manifest), [manifest]
    for name in sorted(files, key=path_order):
        yield name, len(files[name]), [files[name]]
