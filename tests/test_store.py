"""The evidence store: chains, blobs, sealing, journals and crash recovery."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchclaw.evidence.check import UNBORN_GRACE_S, check_store, recover_store
from benchclaw.errors import FormatError, InputError, IntegrityError
from benchclaw.formats.records import GENESIS, split_lines, verify_chain
from decimal import Decimal

from benchclaw.evidence.packs import PACK_MAGIC, entry_bytes, list_packs, scan_pack
from benchclaw.evidence.store import Store


def write_run(store: Store, n_calls: int = 3, status: str = "passed") -> str:
    w = store.open_run()
    w.append("run.start", {"task": {"id": "t", "version": 1}, "tier": "ultra", "seed": 1})
    for i in range(n_calls):
        w.append("call", {"turn": i, "reply": store.put_blob(f"reply {i}".encode()),
                          "cost": {"known": True, "low": "0.001", "high": "0.001"}})
    w.append("run.end", {"status": status})
    return w.seal()


def sealed_lines(store: Store, run_id: str) -> list[bytes]:
    lines, torn = split_lines(store.run_path(run_id).read_bytes())
    assert torn == b""
    return lines


def test_sealed_run_is_named_by_its_bytes_and_reads_back(tmp_path):
    store = Store(tmp_path / "runs")
    run_id = write_run(store)
    path = store.run_path(run_id)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == run_id
    run = store.read_run(run_id)
    assert [r.kind for r in run.records] == ["run.start", "call", "call", "call", "run.end"]
    assert run.records[0].prev == GENESIS
    assert run.end == {"status": "passed"}
    assert not list((tmp_path / "runs" / "open").iterdir())


def test_a_sealed_run_is_never_written_again(tmp_path):
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {})
    w.append("run.end", {"status": "failed"})
    first = w.seal()
    assert w.seal() == first  # idempotent
    with pytest.raises(IntegrityError, match="sealed"):
        w.append("call", {})


def test_sealing_needs_run_end(tmp_path):
    w = Store(tmp_path / "runs").open_run()
    w.append("run.start", {})
    with pytest.raises(IntegrityError, match="run.end"):
        w.seal()


@pytest.mark.parametrize("tamper", ["change", "insert", "delete", "reorder"])
@pytest.mark.parametrize("where", [0, 2, 4])
def test_chain_tampering_is_detected(tmp_path, tamper, where):
    store = Store(tmp_path / "runs")
    lines = sealed_lines(store, write_run(store))
    bad = list(lines)
    if tamper == "change":
        bad[where] = bad[where].replace(b'"seq"', b'"seq" ', 1)
    elif tamper == "insert":
        bad.insert(where, lines[1])
    elif tamper == "delete":
        del bad[where]
    else:
        j = where + 1 if where + 1 < len(bad) else where - 1
        bad[where], bad[j] = bad[j], bad[where]
    data = b"".join(line + b"\n" for line in bad)
    run_id = hashlib.sha256(b"".join(line + b"\n" for line in lines)).hexdigest()
    # Either the chain breaks or (for the last line) the file no longer hashes to its id.
    chain_broken = True
    try:
        verify_chain(bad, "x")
        chain_broken = False
    except (IntegrityError, FormatError):
        pass
    assert chain_broken or hashlib.sha256(data).hexdigest() != run_id


def test_blobs_are_stored_once_atomically(tmp_path):
    store = Store(tmp_path / "runs")
    d1 = store.put_blob(b"same bytes")
    d2 = store.put_blob(b"same bytes")
    assert d1 == d2 == "sha256:" + hashlib.sha256(b"same bytes").hexdigest()
    files = [p for p in (tmp_path / "runs" / "objects").rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].parent.name == "packs"  # one pack, one entry
    assert len(scan_pack(str(files[0])).entries) == 1
    assert store.get_blob(d1) == b"same bytes"


def test_altered_and_missing_blobs_are_errors(tmp_path):
    store = Store(tmp_path / "runs")
    d = store.put_blob(b"payload")
    loc = store.find_blob(d)
    with open(loc.path, "r+b") as f:
        f.seek(loc.offset + 1)
        f.write(b"A")
    with pytest.raises(IntegrityError, match=r"\.pack \(bytes \d+-\d+\): bytes do not match"):
        store.get_blob(d)
    with pytest.raises(InputError, match="missing"):
        store.get_blob("sha256:" + "0" * 64)


def test_check_names_file_and_line_of_a_flipped_byte(tmp_path):
    store = Store(tmp_path / "runs")
    run_id = write_run(store)
    write_run(store, n_calls=1)
    path = store.run_path(run_id)
    data = bytearray(path.read_bytes())
    second_line_start = data.index(b"\n") + 1
    pos = data.index(b"turn", second_line_start)
    data[pos] ^= 0x20  # 't' -> 'T' on line 2
    path.write_bytes(bytes(data))
    report = check_store(store)
    assert len(report.damages) == 1
    damage = report.damages[0]
    assert damage.path == str(path)
    assert damage.line == 2  # the altered line, not merely where the chain broke
    assert "line 2 was altered" in damage.message


def test_check_reports_missing_blob_and_unknown_kinds_are_kept(tmp_path):
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {})
    w.append("telemetry.v9", {"note": "from a newer BenchClaw"})
    w.append("call", {"reply": "sha256:" + "ab" * 32})
    w.append("run.end", {"status": "failed"})
    run_id = w.seal()
    report = check_store(store)
    assert report.unknown_kinds == {"telemetry.v9": 1}
    assert [str(d) for d in report.damages] == [
        f"{store.run_path(run_id)}:3: blob sha256:{'ab' * 32} is missing"]


def test_not_json_record_is_a_format_error_naming_the_line(tmp_path):
    with pytest.raises(FormatError, match=r"f.jsonl:2: not JSON"):
        verify_chain([b'{"v":1,"seq":0,"prev":"' + GENESIS.encode() + b'","at":"x","kind":"k","body":{}}',
                      b"not json"], "f.jsonl")


def test_existing_store_must_exist(tmp_path):
    with pytest.raises(InputError, match="no such runs directory"):
        Store.existing(tmp_path / "nope")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(bodies=st.lists(st.dictionaries(st.text(), json_values, max_size=5), min_size=1, max_size=5))
def test_arbitrary_record_bodies_round_trip(tmp_path_factory, bodies):
    store = Store(tmp_path_factory.mktemp("s") / "runs", fsync=False)
    w = store.open_run()
    w.append("run.start", {})
    for body in bodies:
        w.append("x.body", body)
    w.append("run.end", {})
    run = store.read_run(w.seal())
    assert [r.body for r in run.records[1:-1]] == bodies


# -- crash recovery -----------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    from benchclaw.evidence.store import Store
    store = Store(sys.argv[1])
    w = store.open_run()
    w.append("run.start", {"task": {"id": "t", "version": 1}})
    i = 0
    while True:
        w.append("call", {"turn": i, "cost": {"known": True, "low": "0.5", "high": "0.5"},
                          "pad": "x" * 2000})
        i += 1
        print(i, flush=True)
""")


def test_sigkill_while_appending_then_recovery_keeps_every_complete_record(tmp_path):
    root = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, text=True)
    acknowledged = 0
    deadline = time.monotonic() + 20
    while acknowledged < 25 and time.monotonic() < deadline:
        acknowledged = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = Store(root)
    [result] = recover_store(store)
    run = store.read_run(result.run_id)
    calls = run.of_kind("call")
    assert len(calls) >= acknowledged  # every acknowledged (fsynced) record survived
    assert [c.body["turn"] for c in calls] == list(range(len(calls)))
    assert run.end["status"] == "aborted" and run.end["recovered"] is True
    assert run.end["calls"] == len(calls)
    assert check_store(store).ok
    assert recover_store(store) == []  # nothing left open


STAGED_CHILD = textwrap.dedent("""
    import os, signal, sys
    from benchclaw.evidence.store import Store
    store = Store(sys.argv[1])
    w = store.open_run()
    w.awaits_commits = True  # as the agent: records written before the commit that moves their blobs
    w.append("run.start", {})
    for i in range(3):
        w.append("call", {"turn": i, "reply": store.stage_blob(b"reply %d" % i)})
    os.kill(os.getpid(), signal.SIGKILL)  # before any commit: the blobs are in the pack, not fsynced
""")


def test_recovery_keeps_the_packed_blobs_a_killed_run_names(tmp_path):
    root = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-c", STAGED_CHILD, str(root)], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    store = Store(root)
    [pack] = list_packs(str(root / "objects"))
    assert not list((root / "objects").glob("??/*")) and len(scan_pack(pack).entries) == 3
    [result] = recover_store(store)
    run = store.read_run(result.run_id)
    assert [r.kind for r in run.records] == ["run.start", "call", "call", "call", "run.end"]
    assert [store.get_blob(c.body["reply"]) for c in run.of_kind("call")] == [b"reply 0", b"reply 1", b"reply 2"]
    assert check_store(store).ok


def test_recovery_cuts_a_run_before_a_record_whose_blob_was_lost(tmp_path):
    """A power cut can keep a record and lose the staged blob it names (both are made durable
    by one commit): the run is sealed without that record and the ones after it, which are
    set aside; a blob whose pack entry the cut tore counts as lost (the tail is set aside)."""
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.awaits_commits = True
    w.append("run.start", {})
    kept = store.put_blob(b"durable")
    w.append("call", {"turn": 0, "reply": kept})
    # What a power cut leaves: records on disk naming staged blobs that are not (one entry
    # gone, one torn in a dead writer's pack).
    lost = ["sha256:" + hashlib.sha256(b"lost %d" % i).hexdigest() for i in range(2)]
    dead = tmp_path / "runs" / "objects" / "packs" / ("d" * 32 + ".pack")
    dead.write_bytes(PACK_MAGIC + entry_bytes(lost[1].removeprefix("sha256:"), b"lost 1")[:-3])
    w.append("call", {"turn": 1, "reply": lost[0]})
    w.append("call", {"turn": 2, "reply": lost[1]})
    w.close_unsealed()
    [torn, result] = recover_store(store)
    assert torn.open_path == str(dead) and dead.read_bytes() == PACK_MAGIC
    run = store.read_run(result.run_id)
    assert [r.kind for r in run.records] == ["run.start", "call", "run.end"]
    assert run.end["status"] == "aborted" and "lost in the crash" in run.end["reason"]
    aside = (tmp_path / "runs" / "quarantine" / f"{w.path.stem}.unstored").read_bytes().splitlines()
    assert [json.loads(line)["body"]["turn"] for line in aside] == [1, 2]
    assert check_store(store).ok


def test_torn_last_line_is_set_aside_not_dropped(tmp_path):
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {})
    w.append("call", {"turn": 0})
    w.close_unsealed()
    with open(w.path, "ab") as f:
        f.write(b'{"v":1,"seq":2,"prev":"tor')
    [result] = recover_store(store)
    assert result.torn_bytes == len(b'{"v":1,"seq":2,"prev":"tor')
    assert (tmp_path / "runs" / "quarantine").glob("*.torn")
    torn_file = next((tmp_path / "runs" / "quarantine").glob("*.torn"))
    assert torn_file.read_bytes() == b'{"v":1,"seq":2,"prev":"tor'
    run = store.read_run(result.run_id)
    assert [r.kind for r in run.records] == ["run.start", "call", "run.end"]
    assert "torn" in run.end["reason"]


# -- journals -----------------------------------------------------------------------------

JOURNAL_CHILD = textwrap.dedent("""
    import sys
    from benchclaw.evidence.store import Store
    j = Store(sys.argv[1]).journal("E01", writer="shared")
    for i in range(int(sys.argv[2])):
        j.append("run", {"writer_pid": sys.argv[3], "i": i})
""")


def test_concurrent_journal_writers_are_serialised(tmp_path):
    root = tmp_path / "runs"
    procs = [subprocess.Popen([sys.executable, "-c", JOURNAL_CHILD, str(root), "40", str(k)])
             for k in range(3)]
    for p in procs:
        assert p.wait() == 0
    entries = Store(root).read_journal("E01")  # verifies the chain
    assert len(entries) == 120
    assert [e.record.seq for e in sorted(entries, key=lambda e: e.record.seq)] == list(range(120))


def test_writers_get_their_own_journal_files(tmp_path):
    store = Store(tmp_path / "runs")
    store.journal("E01", writer="machine-a").append("prereg", {})
    store.journal("E01", writer="machine-b").append("run", {})
    assert [p.name for p in store.journal_paths("E01")] == ["machine-a.jsonl", "machine-b.jsonl"]
    assert {e.writer for e in store.read_journal("E01")} == {"machine-a", "machine-b"}


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".hidden", "E 01"])
def test_unsafe_experiment_ids_are_rejected(tmp_path, bad):
    with pytest.raises(InputError, match="experiment id"):
        Store(tmp_path).journal(bad)


def test_torn_tail_of_a_journal_is_set_aside_and_appends_go_on(tmp_path):
    store = Store(tmp_path / "runs")
    j = store.journal("E01", writer="w")
    j.append("prereg", {"n": 1})
    path = store.journal_paths("E01")[0]
    with open(path, "ab") as f:
        f.write(b'{"v":1,"seq":1,"pre')
    [result] = recover_store(store)
    assert result.torn_bytes == len(b'{"v":1,"seq":1,"pre') and result.kept_records == 1
    assert open(result.quarantined, "rb").read() == b'{"v":1,"seq":1,"pre'
    Store(tmp_path / "runs").journal("E01", writer="w").append("run", {"n": 2})
    assert [e.kind for e in store.read_journal("E01")] == ["prereg", "run"]


def test_a_failed_append_leaves_no_torn_line_and_says_why(tmp_path, monkeypatch):
    from benchclaw.errors import StorageError

    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {})
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match=r"open/.*\.jsonl: cannot append record 1: No space left on device"):
        w.append("call", {"turn": 0})
    monkeypatch.setattr(os, "fsync", real_fsync)
    with pytest.raises(StorageError, match="No space left on device.*stopped being writable"):
        w.append("call", {"turn": 1})
    lines, torn = split_lines(w.path.read_bytes())
    assert len(lines) == 1 and torn == b""  # the failed line was cut back off
    [result] = recover_store(store)
    assert [r.kind for r in store.read_run(result.run_id).records] == ["run.start", "run.end"]


# --------------------------------------------------------------- one chain writer, one lock protocol

def test_refresh_refuses_a_shrunk_file(tmp_path):
    from benchclaw.evidence.store import ChainFile

    path = tmp_path / "j.jsonl"
    chain = ChainFile(path, fsync=False)
    for i in range(3):
        chain.append("note", {"i": i})
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b"\n") + 1])  # truncated in place to its first line
    with pytest.raises(IntegrityError, match="shrank"):
        chain.append("note", {"i": 3})


@pytest.mark.parametrize("how", ["replaced", "removed", "replaced_after_reopen"])
def test_refresh_refuses_a_file_replaced_or_removed_underneath(tmp_path, how):
    # The refresh stats the path once and compares it with the (device, inode) kept when
    # the descriptor was opened: a copy renamed over the file, or the file gone, is refused.
    from benchclaw.evidence.store import ChainFile

    path = tmp_path / "j.jsonl"
    chain = ChainFile(path, fsync=False)
    chain.append("note", {"i": 1})
    if how == "replaced_after_reopen":  # the kept identity is the reopened descriptor's
        chain.release()
        chain.append("note", {"i": 2})
    if how == "removed":
        path.unlink()
    else:
        copy = tmp_path / "copy.jsonl"
        copy.write_bytes(path.read_bytes())  # same bytes, another inode
        os.replace(copy, path)
    with pytest.raises(IntegrityError, match="removed or replaced underneath"):
        chain.append("note", {"i": 3})


def test_refresh_refuses_a_rewritten_file_of_the_same_length(tmp_path):
    from benchclaw.evidence.store import ChainFile

    path = tmp_path / "j.jsonl"
    chain = ChainFile(path, fsync=False)
    chain.append("note", {"i": 1})
    chain.append("note", {"i": 2})
    with open(path, "r+b") as f:  # same inode, same size, last line changed
        data = f.read()
        f.seek(0)
        f.write(data.replace(b'{"i":2}', b'{"i":7}'))
    with pytest.raises(IntegrityError, match="rewritten"):
        chain.append("note", {"i": 3})


@pytest.mark.parametrize("fsync", [False, True])
def test_a_run_file_changed_underneath_its_writer_is_refused_by_its_next_append_or_its_seal(tmp_path, fsync):
    """A run writer checks only the size per append (it alone appends); the rest at sealing."""
    store = Store(tmp_path / "runs", fsync=fsync)
    w = store.open_run()
    w.append("run.start", {"i": 1})
    with open(w.path, "ab") as f:
        f.write(b"{}\n")
    with pytest.raises(IntegrityError, match="grew underneath"):
        w.append("run.end", {"i": 2})
    w = store.open_run()
    w.append("run.start", {"i": 1})
    w.append("run.end", {"i": 2})
    with open(w.path, "r+b") as f:  # same inode, same size, last line changed
        data = f.read()
        f.seek(0)
        f.write(data.replace(b'{"i":2}', b'{"i":7}'))
    with pytest.raises(IntegrityError, match="rewritten"):
        w.seal()
    w = store.open_run()
    w.append("run.start", {"i": 1})
    w.append("run.end", {"i": 2})
    fresh = tmp_path / "other.jsonl"
    fresh.write_bytes(w.path.read_bytes())
    os.replace(fresh, w.path)
    with pytest.raises(IntegrityError, match="replaced"):
        w.seal()
    assert store.run_ids() == []


def test_refresh_refuses_a_replaced_file_and_a_line_that_does_not_chain(tmp_path):
    from benchclaw.formats.records import GENESIS, Record, encode
    from benchclaw.evidence.store import ChainFile

    path = tmp_path / "j.jsonl"
    chain = ChainFile(path, fsync=False)
    chain.append("note", {"i": 1})
    fresh = tmp_path / "other.jsonl"
    fresh.write_bytes(path.read_bytes())
    os.replace(fresh, path)
    with pytest.raises(IntegrityError, match="replaced"):
        chain.append("note", {"i": 2})
    # Another writer's line that does not follow the tail (a second genesis) is refused too.
    other = ChainFile(tmp_path / "k.jsonl", fsync=False)
    other.append("note", {"i": 1})
    with open(tmp_path / "k.jsonl", "ab") as f:
        f.write(encode(Record(0, GENESIS, "2026-01-01T00:00:00.000000Z", "note", {})) + b"\n")
    with pytest.raises(IntegrityError, match="hash chain broken"):
        other.append("note", {"i": 2})


def _hammer(root: str, tag: str, threads: int, n: int) -> None:
    import threading
    from decimal import Decimal

    from benchclaw.experiments.ledger import Ledger

    store = Store(root, fsync=False)
    led = Ledger.open(store, "L")

    def work(t: int) -> None:
        journal = store.journal("X", writer="shared")
        for i in range(n):
            journal.append("note", {"w": tag, "t": t, "i": i})
            res = led.reserve(run=f"{tag}{t}", key=str(i), tokens=1, usd=Decimal("0.001"))
            led.settle(res, tokens=1, usd=Decimal("0.001"))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_two_processes_with_many_threads_share_one_journal_and_one_ledger(tmp_path):
    """Two machines' worth of writers: two processes x 4 threads append to one journal file
    and one ledger; every record lands once, in one unbroken chain."""
    from pathlib import Path

    from benchclaw.experiments.ledger import Ledger, Limits, read_ledger

    store = Store(tmp_path / "runs", fsync=False)
    Ledger.create(store, "L", Limits(usd=Decimal("100")))
    repo = str(Path(__file__).resolve().parents[1])
    # Plain subprocesses (not multiprocessing, whose helper process would outlive the test).
    procs = [subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {repo!r}); "
                               f"from tests.test_store import _hammer; _hammer({str(store.root)!r}, {tag!r}, 4, 40)"])
             for tag in "ab"]
    for p in procs:
        assert p.wait(120) == 0
    entries = store.read_journal("X")
    assert len(entries) == 2 * 4 * 40
    assert len({(e.body["w"], e.body["t"], e.body["i"]) for e in entries}) == 320
    st = read_ledger(store, "L")
    assert st.spent_usd == Decimal("0.320") and not st.open
    assert check_store(store).ok


def test_recovery_leaves_a_live_run_alone_and_seals_it_once_its_writer_is_gone(tmp_path):
    store = Store(tmp_path / "runs", fsync=False)
    w = store.open_run()
    w.append("run.start", {"task": {}})
    results = recover_store(Store(store.root))
    assert [r.live for r in results] == [True] and w.path.exists()
    w.append("call", {"n": 1})  # the writer goes on, undisturbed
    w.close_unsealed()  # its writer is gone: the lock is released
    (done,) = recover_store(Store(store.root))
    assert not done.live and done.run_id and done.kept_records == 2
    assert store.read_run(done.run_id).end["status"] == "aborted"


def test_a_sealed_runs_open_name_brought_back_by_a_power_cut_is_dropped_by_recovery(tmp_path):
    """A seal does not fsync ``open/`` after its rename (FORMAT.md "Durability"): a power cut
    may keep the old name beside the sealed run. Recovery seals those bytes to the same id
    and drops the old name; nothing is sealed twice or changed."""
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {"task": {}})
    w.append("run.end", {"status": "failed"})
    open_path = w.path
    run_id = w.seal()
    sealed = store.run_path(run_id).read_bytes()
    open_path.write_bytes(sealed)  # the old name, as the disk may show it after the cut
    (done,) = recover_store(Store(store.root))
    assert done.run_id == run_id and not open_path.exists()
    assert store.run_path(run_id).read_bytes() == sealed
    report = check_store(Store(store.root))
    assert report.ok and report.open_runs == 0


def test_a_run_file_whose_writer_died_before_naming_it_is_dropped(tmp_path):
    store = Store(tmp_path / "runs", fsync=False)
    store.ensure()
    unborn = store.root / "open" / ".new-0123.jsonl"
    unborn.write_bytes(b"")  # created, never locked by a live writer, never renamed
    old = time.time() - UNBORN_GRACE_S - 1
    os.utime(unborn, (old, old))
    assert store.open_run_paths() == [] and check_store(store).open_runs == 0
    assert recover_store(store) == [] and not unborn.exists()


@pytest.mark.parametrize("where", ["open/.new-0123.jsonl", "objects/packs/.new-0123.pack"])
def test_a_file_a_live_writer_has_created_but_not_yet_locked_is_left_alone(tmp_path, where):
    # A writer opens .new-* (O_EXCL) and locks it a moment later; recovery in another process
    # between the two must not take it for a dead writer's (a grid died of that: "No such
    # file or directory" when the writer renamed it).
    store = Store(tmp_path / "runs", fsync=False)
    store.ensure()
    unborn = store.root / where
    unborn.parent.mkdir(parents=True, exist_ok=True)
    unborn.write_bytes(b"")
    assert recover_store(store) == [] and unborn.exists()
    check_store(store)
    assert unborn.exists()


def test_a_pack_written_by_a_writer_that_died_before_naming_it_is_dropped_at_once(tmp_path):
    store = Store(tmp_path / "runs", fsync=False)
    store.ensure()
    unborn = store.root / "objects" / "packs" / ".new-0123.pack"
    unborn.parent.mkdir(parents=True, exist_ok=True)
    unborn.write_bytes(b"BCPK")  # written, so it was locked once; unlocked now: its writer is dead
    assert recover_store(store) == [] and not unborn.exists()
