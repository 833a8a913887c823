"""The bundle's zip writer lays the archive out itself (to hold nothing per entry), so its
bytes are held here to exactly what ``zipfile`` writes for the same entries, including the
zip64 records that a bench-sized bundle (more than 65,535 entries) needs."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest

from benchclaw.bundle._zipwrite import FILE_MODE, FIXED_TIME, write_zip


def _entries() -> list[tuple[str, bytes]]:
    noise = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(20_000))  # 640 KB, barely compressible
    return [("manifest.json", b'{"files":[]}'), ("VERSION", b""), ("objects/ab/\u00e9t\u00e9.txt", b"caf\xc3\xa9\n" * 50),
            ("runs/aa/big.jsonl", noise), ("tasks/t/v1/task.toml", b"id = 't'\n" * 3000), ("tasks/t/v1/z", b"z")]


def _by_zipfile(entries) -> bytes:
    """The reference: ``ZipFile.writestr`` with the bundle's fixed fields."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", allowZip64=True) as zf:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            zi.compress_type, zi.create_system, zi.external_attr = zipfile.ZIP_DEFLATED, 3, FILE_MODE << 16
            zf.writestr(zi, data, compresslevel=6)
    return buf.getvalue()


def _by_write_zip(entries, tmp_path, split: int = 7_000) -> bytes:
    out = tmp_path / "w.zip"
    write_zip(out, ((n, len(d), (d[i:i + split] for i in range(0, len(d), split))) for n, d in entries))
    return out.read_bytes()


def test_write_zip_gives_zipfiles_bytes(tmp_path):
    got = _by_write_zip(_entries(), tmp_path)
    assert got == _by_zipfile(_entries())
    with zipfile.ZipFile(io.BytesIO(got)) as zf:
        assert zf.testzip() is None
        assert [(i.filename, zf.read(i)) for i in zf.infolist()] == _entries()


@pytest.mark.parametrize("limits", [{"ZIP_FILECOUNT_LIMIT": 3}, {"ZIP64_LIMIT": 5_000}])
def test_write_zip_gives_zipfiles_zip64_records(tmp_path, monkeypatch, limits):
    """Past the entry-count limit (end records) or the 32-bit size/offset limit (local
    headers and central-directory extras), lowered here so the test stays small."""
    for name, value in limits.items():
        monkeypatch.setattr(zipfile, name, value)
    got = _by_write_zip(_entries(), tmp_path)
    assert got == _by_zipfile(_entries())
    assert b"PK\x06\x06" in got  # the zip64 end record: the path under test was taken


def test_write_zip_leaves_nothing_when_a_chunk_fails(tmp_path):
    def bad():
        yield b"x"
        raise OSError("gone")

    with pytest.raises(OSError):
        write_zip(tmp_path / "x.zip", [("a", 1, [b"a"]), ("b", 2, bad())])
    assert list(tmp_path.iterdir()) == []
