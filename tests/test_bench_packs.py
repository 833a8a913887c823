"""bench/packs.py's replay: the pack format it measures keeps content addressing (a scan
rebuilds the index and re-hashes every entry) and finds a torn tail, and both replays
count what they wrote. The bench's figures themselves are not timed here."""

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import packs  # noqa: E402


def _groups():
    blobs = [bytes([i]) * (100 + 50 * i) for i in range(7)]
    items = [(hashlib.sha256(b).hexdigest(), b) for b in blobs]
    return [items[:3], items[3:4], items[4:]]


def test_pack_replay_round_trips_and_counts(tmp_path):
    groups = _groups()
    got = packs.replay_packs(tmp_path / "p", groups, lambda h: "invocation")
    assert got["files"] == 2 and got["fsyncs"] == len(groups) + 1  # one a group, one for the new pack's entry
    assert packs.check_packs(tmp_path / "p") == 7
    pack = (tmp_path / "p" / "invocation.pack").read_bytes()
    for hexd, (off, length) in packs.scan_pack(tmp_path / "p" / "invocation.pack").items():
        assert hashlib.sha256(pack[off:off + length]).hexdigest() == hexd


def test_scan_finds_a_torn_tail_and_a_flipped_byte(tmp_path):
    packs.replay_packs(tmp_path / "p", _groups(), lambda h: "invocation")
    pack = tmp_path / "p" / "invocation.pack"
    data = pack.read_bytes()
    pack.write_bytes(data[:-1])
    with pytest.raises(ValueError, match="torn"):
        packs.scan_pack(pack)
    pack.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="does not hash"):
        packs.scan_pack(pack)


def test_loose_replay_one_file_and_fsync_per_blob(tmp_path):
    groups = _groups()
    got = packs.replay_loose(tmp_path / "l", groups)
    assert got["files"] == 7 and got["fsyncs"] == 7 + len(groups)
    got = packs.replay_loose(tmp_path / "m", groups, dirsync=False)
    assert got["fsyncs"] == 7
