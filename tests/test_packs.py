"""Packs (FORMAT.md §1 "Packs"): what a crash, a flipped byte or a second writer does to them."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from benchclaw.errors import IntegrityError
from benchclaw.evidence.check import check_store, recover_store
from benchclaw.evidence.merge import merge_store
from benchclaw.evidence.packs import PACK_MAGIC, entry_bytes, list_packs, read_index, scan_pack, write_index
from benchclaw.evidence import packs as packs_module
from benchclaw.evidence.store import Store


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def packs(store: Store) -> list[str]:
    return list_packs(str(store.root / "objects"))


TORN_CHILD = textwrap.dedent("""
    import os, signal, sys
    from benchclaw.evidence.store import Store
    store = Store(sys.argv[1])
    for i in range(3):
        store.put_blob(b"whole %d" % i)
    [pack] = [p for p in os.listdir(sys.argv[1] + "/objects/packs") if p.endswith(".pack")]
    with open(sys.argv[1] + "/objects/packs/" + pack, "ab") as f:  # a crash mid-append
        f.write(b"%s 100\\nonly part of the bytes" % (b"a" * 64))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_dead_writers_torn_tail_is_ignored_reported_and_set_aside(tmp_path):
    root = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-c", TORN_CHILD, str(root)], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    store = Store(root)
    [pack] = packs(store)
    assert [store.get_blob(digest(b"whole %d" % i)) for i in range(3)] == [b"whole 0", b"whole 1", b"whole 2"]
    report = check_store(store)
    [damage] = report.damages
    assert damage.path == pack and damage.line == 4
    assert "past the end" in damage.message and "benchclaw runs recover" in damage.message
    [result] = recover_store(store)
    kept = (root / "quarantine").glob("packs--*.torn")
    assert result.open_path == pack and [p.read_bytes() for p in kept] == [b"a" * 64 + b" 100\nonly part of the bytes"]
    assert scan_pack(pack).problem is None and len(scan_pack(pack).entries) == 3
    assert check_store(store).ok and recover_store(store) == []


def test_a_live_writers_unfinished_entry_is_not_torn(tmp_path):
    """The tail of a pack whose writer holds its lock may be an append under way: recovery
    and check leave it alone (this process is the live writer here)."""
    store = Store(tmp_path / "runs")
    store.put_blob(b"one")
    [pack] = packs(store)
    with open(pack, "ab") as f:
        f.write(b"b" * 64 + b" 9\nhalf")
    assert recover_store(store) == [] and check_store(store).ok
    assert os.path.getsize(pack) == len(PACK_MAGIC) + len(entry_bytes("0" * 64, b"one")) + 64 + 3 + 4


def test_a_flipped_byte_in_a_packed_blob_is_found_by_rehashing(tmp_path):
    store = Store(tmp_path / "runs")
    good, bad = store.put_blob(b"good bytes"), store.put_blob(b"bad bytes")
    loc = store.find_blob(bad)
    with open(loc.path, "r+b") as f:
        f.seek(loc.offset)
        f.write(b"B")
    with pytest.raises(IntegrityError, match=r"\.pack \(bytes \d+-\d+\): bytes do not match"):
        Store(tmp_path / "runs").get_blob(bad)  # another reader: through the scanned index
    assert store.get_blob(good) == b"good bytes"
    [damage] = check_store(store).damages
    assert damage.path == loc.path and damage.line == 2 and bad in damage.message
    assert recover_store(store) == []  # damage, not a torn tail: nothing is cut


def test_a_changed_header_mid_pack_is_damage_not_a_torn_tail(tmp_path):
    pack = tmp_path / "runs" / "objects" / "packs" / ("c" * 32 + ".pack")
    pack.parent.mkdir(parents=True)
    first, second, third = (entry_bytes(digest(b)[7:], b) for b in (b"x", b"y", b"z"))
    pack.write_bytes(PACK_MAGIC + first + second.replace(b" 1\n", b" 7\n") + third)
    store = Store(tmp_path / "runs")
    assert store.get_blob(digest(b"x")) == b"x" and not store.has_blob(digest(b"y"))
    [damage] = check_store(store).damages
    assert damage.line == 2 and "not followed by a newline" in damage.message
    assert recover_store(store) == [] and pack.read_bytes().endswith(third)


WRITER = textwrap.dedent("""
    import sys
    from benchclaw.evidence.store import Store
    store = Store(sys.argv[1])
    for i in range(200):
        store.stage_blob(b"shared %d" % (i % 50))
        store.stage_blob(b"%s %d" % (sys.argv[2].encode(), i))
    store.commit_sync()
""")


def test_two_writer_processes_each_append_to_their_own_pack(tmp_path):
    root = tmp_path / "runs"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), name]) for name in ("left", "right")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = Store(root)
    found = [scan_pack(p) for p in packs(store)]
    assert len(found) == 2 and all(s.problem is None and len(s.entries) == 250 for s in found)
    for name in (b"left", b"right"):
        assert all(store.get_blob(digest(b"%s %d" % (name, i))) == b"%s %d" % (name, i) for i in range(200))
    assert sum(1 for _ in store.iter_blobs()) == 450 and check_store(store).ok


def test_a_forked_child_writes_its_own_pack(tmp_path):
    store = Store(tmp_path / "runs")
    store.put_blob(b"parent")
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        try:
            Store(tmp_path / "runs").put_blob(b"child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert len(packs(store)) == 2 and [len(scan_pack(p).entries) for p in packs(store)] == [1, 1]
    assert store.get_blob(digest(b"child")) == b"child" and check_store(store).ok


def test_merging_takes_the_union_of_packs_and_the_longer_of_one_pack(tmp_path):
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    a.put_blob(b"only in a")
    b.put_blob(b"only in b")
    [pack_b] = packs(b)
    merge_store(a, b)
    assert a.get_blob(digest(b"only in b")) == b"only in b" and len(packs(a)) == 2
    with open(pack_b, "ab") as f:  # b's writer went on appending: its pack grew
        f.write(entry_bytes(digest(b"later")[7:], b"later"))
    report = merge_store(a, b)
    assert report.extended == {"packs": 1} and Store(tmp_path / "a").get_blob(digest(b"later")) == b"later"
    mine = tmp_path / "a" / "objects" / "packs" / os.path.basename(pack_b)
    with open(mine, "ab") as f:  # the same pack name grown otherwise on this side: refused
        f.write(entry_bytes(digest(b"other")[7:], b"other"))
    with open(pack_b, "ab") as f:
        f.write(entry_bytes(digest(b"another")[7:], b"another"))
    with pytest.raises(IntegrityError, match="diverged"):
        merge_store(a, b)


FINISHED = textwrap.dedent("""
    import sys
    from benchclaw.evidence.store import Store
    store = Store(sys.argv[1])
    for i in range(20):
        store.put_blob(b"blob %d" % i)
""")


def test_a_finished_packs_index_is_derived_checked_and_never_trusted_for_bytes(tmp_path):
    root = tmp_path / "runs"
    subprocess.run([sys.executable, "-c", FINISHED, str(root)], check=True, timeout=60)
    store = Store(root)
    [pack] = packs(store)
    idx = root / "objects" / "packs" / (os.path.basename(pack)[:-5] + ".idx")
    assert read_index(pack).entries == scan_pack(pack).entries and len(scan_pack(pack).entries) == 20
    assert check_store(store).ok and recover_store(store) == []
    idx.unlink()  # derived: without it readers scan, and find the same
    assert all(Store(root).get_blob(digest(b"blob %d" % i)) == b"blob %d" % i for i in range(20))
    write_index(pack, [(h, o + 1, n) for h, o, n in scan_pack(pack).entries], os.path.getsize(pack))
    [damage] = check_store(Store(root)).damages  # an index that lies about offsets is damage...
    assert damage.path == str(idx) and "does not match its pack" in damage.message
    with pytest.raises(IntegrityError, match="bytes do not match"):
        Store(root).get_blob(digest(b"blob 3"))  # ...and what it points at is re-hashed, never trusted
    write_index(pack, scan_pack(pack).entries, os.path.getsize(pack) - 1)  # stale: ignored
    assert read_index(pack) is None and Store(root).get_blob(digest(b"blob 3")) == b"blob 3"


def test_a_writer_finishes_a_full_pack_and_starts_another(tmp_path, monkeypatch):
    monkeypatch.setattr(packs_module, "_PACK_ENTRIES", 3)
    store = Store(tmp_path / "runs")
    ds = [store.put_blob(b"n%d" % i) for i in range(7)]
    assert len(packs(store)) == 3
    assert sorted(len(scan_pack(p).entries) for p in packs(store)) == [1, 3, 3]
    assert sum(read_index(p) is not None for p in packs(store)) == 2  # the two finished ones
    assert [store.get_blob(d) for d in ds] == [b"n%d" % i for i in range(7)] and check_store(store).ok


def test_stores_named_by_one_relative_path_in_two_folders_write_each_to_its_own(tmp_path, monkeypatch):
    """``Store("runs")`` in one folder, then in another (a ``chdir`` between, as a CLI run
    in-process twice would): each blob goes to, and is read from, its own directory's pack;
    the process's writer for the first folder is not handed to the second."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        store = Store("runs")
        d = store.put_blob(b"blob of " + name.encode())
        assert store.get_blob(d) == b"blob of " + name.encode()
        assert Store("runs").get_blob(d) == b"blob of " + name.encode()
        [pack] = packs(Store(tmp_path / name / "runs"))
        assert pack.startswith(str(tmp_path / name / "runs" / "objects" / "packs"))
    monkeypatch.chdir(tmp_path / "a")
    assert not Store("runs").has_blob(digest(b"blob of b"))
    packs_module.finish_packs("runs/objects")  # a relative name finds the absolute key
    assert not packs_module.own_writers(str(tmp_path / "a" / "runs" / "objects"))


def test_the_pack_index_finds_every_blob_as_packs_grow_and_keeps_the_first_copy(tmp_path):
    """``PackIndex`` is an open-addressing table over arrays: lookups across refreshes of a
    growing pack (the table regrown many times), a blob in two packs found in the first
    pack indexed, and a .idx whose digests are not hex ignored (the pack is scanned)."""
    from benchclaw.evidence.packs import PackIndex

    objects = tmp_path / "runs" / "objects"
    (objects / "packs").mkdir(parents=True)
    first, second = objects / "packs" / ("1" * 32 + ".pack"), objects / "packs" / ("2" * 32 + ".pack")
    first.write_bytes(PACK_MAGIC)
    second.write_bytes(PACK_MAGIC + entry_bytes(digest(b"both")[7:], b"both"))
    index = PackIndex(str(objects))
    for batch in range(5):  # each batch a lookup misses, then finds the pack's new entries
        with open(first, "ab") as f:
            for i in range(batch * 40, (batch + 1) * 40):
                f.write(entry_bytes(digest(b"blob %d" % i)[7:], b"blob %d" % i))
        assert all(index.find(digest(b"blob %d" % i)[7:]).read() == b"blob %d" % i for i in range((batch + 1) * 40))
    with open(first, "ab") as f:
        f.write(entry_bytes(digest(b"both")[7:], b"both"))
    assert index.find(digest(b"both")[7:]).path == str(second)  # indexed before the first pack grew
    assert index.find("ab" * 32) is None and len(index) == 201
    assert sorted(h for h, _ in index) == sorted({digest(b"blob %d" % i)[7:] for i in range(200)} | {digest(b"both")[7:]})
    fresh = PackIndex(str(objects))  # both scanned in name order: the first pack's copy
    assert fresh.find(digest(b"both")[7:]).path == str(first)
    entries = scan_pack(str(first)).entries
    write_index(str(first), [("zz" * 32, o, n) for _, o, n in entries], first.stat().st_size)
    assert read_index(str(first)) is not None  # read_index does not check the digests' hex...
    assert PackIndex(str(objects)).find(entries[7][0]).read() == b"blob 7"  # ...the index falls back to a scan


def test_a_records_blobs_go_into_the_pack_in_one_write_each_once(tmp_path, monkeypatch):
    """``Store.stage_blobs`` (a call record's reply, usage and request): the new ones are one
    append, in order, a repeat and a blob the pack holds already are not written again, and
    the pack reads as if they had been appended one by one."""
    store = Store(tmp_path / "runs")
    old = store.put_blob(b"held already")
    writes = []
    real = packs_module.append_whole
    monkeypatch.setattr(packs_module, "append_whole", lambda *a: (writes.append(a[3]), real(*a))[1])
    got = store.stage_blobs([b"reply", b"held already", b"request", b"reply"])
    assert got == [digest(b"reply"), old, digest(b"request"), digest(b"reply")]
    assert writes == [entry_bytes(digest(b"reply")[7:], b"reply") + entry_bytes(digest(b"request")[7:], b"request")]
    assert store.stage_blobs([b"request"]) == [digest(b"request")] and len(writes) == 1
    store.commit_sync()
    [pack] = packs(store)
    assert [e[0] for e in scan_pack(pack).entries] == [h[7:] for h in (old, digest(b"reply"), digest(b"request"))]
    assert Store(store.root).get_blob(digest(b"request")) == b"request" and check_store(store).ok
