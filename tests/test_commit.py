"""Group commit (FORMAT.md §1 "Durability"): what is promised about the order things reach
the disk, checked by watching every fsync, rename and write the store makes.

A test cannot pull the power, so these assert the order a power cut would expose: a blob's
pack entry is fsynced by the commit its writer waits for, a run's records before its seal,
the blobs a record names are durable by the commit that makes the record durable, a known settlement only once its call
record is durable, a reservation is durable before its call; and an interrupted waiter
never stops later commits.
"""

import asyncio
import os
from decimal import Decimal

import pytest

from benchclaw.agent import load_profile, run_agent
from benchclaw.agent.testing import GOOD_ANSWER, FakeClock, ScriptedProvider, act, make_task
from benchclaw.errors import StorageError
from benchclaw.experiments.ledger import Ledger, Limits
from benchclaw.providers.catalog import load_catalog
from benchclaw.formats.records import blob_refs
from benchclaw.evidence.packs import list_packs, scan_pack
from benchclaw.evidence.store import Store


class DiskLog:
    """Every fsync (by path) and rename, in order, as the kernel would see them."""

    def __init__(self, monkeypatch):
        self.events: list[tuple[str, str]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd):
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            return real_fsync(fd)

        def replace(src, dst):
            self.events.append(("rename", f"{src} -> {dst}"))
            return real_replace(src, dst)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def index(self, kind: str, fragment: str) -> int:
        return next(i for i, (k, what) in enumerate(self.events) if k == kind and fragment in what)


def test_a_staged_blob_is_readable_at_once_and_durable_by_the_next_commit(tmp_path, monkeypatch):
    disk = DiskLog(monkeypatch)
    store = Store(tmp_path / "runs")
    digest = store.stage_blob(b"evidence")
    loc = store.find_blob(digest)
    assert loc.path.endswith(".pack") and not store.blob_path(digest).exists()
    assert store.has_blob(digest) and store.get_blob(digest) == b"evidence"
    assert not any(k == "fsync" and loc.path.endswith(what) for k, what in disk.events)
    store.commit_sync()
    assert any(k == "fsync" and what.endswith(loc.path.rsplit("/", 1)[1]) for k, what in disk.events)


def test_a_failed_fsync_leaves_no_blob_in_place_and_says_which_file(tmp_path, monkeypatch):
    store = Store(tmp_path / "runs")

    def full(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match=r"objects/packs/[0-9a-f]{32}\.pack: cannot make durable \(fsync\): "
                       "Input/output error"):
        store.put_blob(b"never half there")
    assert not list((tmp_path / "runs" / "objects").glob("??/*"))
    monkeypatch.undo()  # the disk is back: the blob goes to a new pack (the failed one may lie)
    digest = store.put_blob(b"never half there")
    assert len(list_packs(str(tmp_path / "runs" / "objects"))) == 2 and store.find_blob(digest).offset > 0


@pytest.mark.parametrize("how", ["seal_async", "seal"])
def test_a_run_is_renamed_only_after_its_records_are_fsynced(tmp_path, monkeypatch, how):
    disk = DiskLog(monkeypatch)
    store = Store(tmp_path / "runs")
    writer = store.open_run()
    writer.awaits_commits = True  # appends not waited for, as the agent's are
    writer.append("run.start", {})
    writer.append("run.end", {"status": "failed"})
    run_id = asyncio.run(writer.seal_async()) if how == "seal_async" else writer.seal()
    assert store.read_run(run_id).end == {"status": "failed"}
    assert disk.index("fsync", f"open/{writer.path.name}") < disk.index("rename", f"{run_id}.jsonl")


def test_a_new_run_files_name_is_durable_with_its_first_records_and_a_sealed_runs_name_before_seal_returns(
        tmp_path, monkeypatch):
    """``open/`` is fsynced by the first commit after a run file is created (its records are
    durable by the next commit: so must its name be); the sealed run's directory is fsynced
    after its rename. ``open/`` is not fsynced again for the rename (no promise needs the old
    name gone: recovery drops it, test_store.py)."""
    disk = DiskLog(monkeypatch)
    store = Store(tmp_path / "runs")
    writer = store.open_run()
    writer.awaits_commits = True
    writer.append("run.start", {})
    store.commit_sync()
    assert ("fsync", str(store.root / "open")) in disk.events
    assert ("fsync", str(writer.path)) in disk.events
    writer.append("run.end", {"status": "failed"})
    run_id = writer.seal()
    sealed = store.run_path(run_id)
    after = disk.events[disk.index("rename", f"{run_id}.jsonl"):]
    assert ("fsync", str(sealed.parent)) in after and ("fsync", str(store.root / "open")) not in after


def test_a_cancelled_waiter_does_not_stop_later_commits(tmp_path):
    store = Store(tmp_path / "runs")

    async def main():
        store.stage_blob(b"one")
        waiter = asyncio.ensure_future(store.commit())
        await asyncio.sleep(0)
        waiter.cancel()
        digest = store.stage_blob(b"two")
        await asyncio.wait_for(store.commit(), 10)
        return digest
    digest = asyncio.run(main())
    assert store.get_blob(digest) == b"two"


def test_the_agent_writes_in_reference_order_and_reserves_durably(tmp_path, monkeypatch):
    """Every blob a written record names is in place by the commit that makes the record
    durable (checked at each settle and each call, which come after such a commit); each
    known settle only once the call record it settles was fsynced; each call only once its
    reservation was."""
    store = Store(tmp_path / "runs")
    ledger = Ledger.create(store, "L", Limits(Decimal("10"), None, None))
    log: list[tuple] = []
    real_fsync = os.fsync

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)

    def in_place(digest: str) -> bool:
        """Its pack was fsynced at a size that covers its entry (so far)."""
        loc = store.find_blob(digest)
        return loc is not None and any(e[0] == "fsync" and e[1] == loc.path and e[2] >= loc.offset + loc.size
                                       for e in list(log))

    class Watched:
        def __init__(self):
            self.id = ledger.id

        def reserve(self, **kw):
            res = ledger.reserve(**kw, durable=False)
            log.append(("reserve", ledger.path.stat().st_size))
            return res

        def settle(self, res, **kw):
            run_file = writer_path[0]
            missing.extend(r for r in named_by_calls if not in_place(r))
            log.append(("settle", kw["usd"] is not None, call_ends[-1] if run_file.exists() else None))
            ledger.settle(res, **kw)

    writer_path: list = []
    real_open_run = store.open_run

    def open_run(**kw):
        def on_append(rec):
            named.extend(blob_refs(rec.body))
            if rec.kind == "call":
                named_by_calls.extend(blob_refs(rec.body))
                call_ends.append(writer_path[0].stat().st_size)  # where the call record ends
        w = real_open_run(on_append=on_append, **kw)
        writer_path.append(w.path)
        return w
    named: list[str] = []    # every blob a record written so far names
    named_by_calls: list[str] = []  # by a call record (a settle follows the commit of its call's)
    call_ends: list[int] = []
    missing: list[str] = []  # those not in place at a settle or a call
    monkeypatch.setattr(store, "open_run", open_run)

    clock = FakeClock()
    replies = [act("write", path="out/answer.json", content=GOOD_ANSWER), act("finish", summary="done")]
    prov = ScriptedProvider(replies, clock=clock)
    real_complete = prov.complete

    async def complete(req):
        log.append(("call", ledger.path.stat().st_size))
        missing.extend(r for r in named if not in_place(r))
        return await real_complete(req)
    prov.complete = complete
    result = asyncio.run(run_agent(store=store, task=make_task(), tier="lightning", catalog=load_catalog("sim"),
                                   profile=load_profile("direct"), seed=1, provider=prov, ledger=Watched(),
                                   max_tokens=256, clock=clock))
    assert result.status == "passed" and not missing
    assert named and all(in_place(r) for r in named)

    def synced(path_end: str, size: int, before: int) -> bool:
        return any(e[0] == "fsync" and e[1].endswith(path_end) and e[2] >= size for e in log[:before])

    calls = [i for i, e in enumerate(log) if e[0] == "call"]
    reserves = [e for e in log if e[0] == "reserve"]
    assert len(calls) == len(reserves) == 2
    for i, res in zip(calls, reserves):
        assert synced(ledger.path.name, res[1], i)  # the reservation was on disk before its call
    known = [(i, e) for i, e in enumerate(log) if e[0] == "settle" and e[1]]
    assert len(known) == 2
    for i, (_, _, size) in known:
        assert size is None or synced(writer_path[0].name, size, i)  # its call record was on disk


def test_what_is_still_staged_at_exit_is_put_in_place(tmp_path):
    """A process that stages blobs and appends without waiting, then exits, leaves them in
    its pack, whole, and its records fsynced (the committer's exit pass)."""
    import subprocess
    import sys

    code = (f"from benchclaw.evidence.store import Store; s = Store({str(tmp_path / 'runs')!r}); "
            "j = s.journal('E', writer='w'); j.append('note', {}, durable=False); "
            "[s.stage_blob(str(i).encode()) for i in range(5)]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    [pack] = list_packs(str(tmp_path / "runs" / "objects"))
    scan = scan_pack(pack)
    assert len(scan.entries) == 5 and scan.problem is None


def test_a_writer_finalised_inside_the_committers_lock_does_not_deadlock_it(tmp_path):
    """A writer's ``__del__`` can run inside any allocation, also on a thread that holds the
    committer's lock (a grid hung in ``seal``: a collected ChainFile released its file from
    within ``rename_after_sync``). Its release waits for the lock's holder, who carries it
    out when letting go: our descriptor is closed, so the writer's ``flock`` goes with it."""
    import fcntl
    import threading

    from benchclaw.evidence._commit import Committer

    c = Committer()
    path = tmp_path / "run.jsonl"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    c.wait(c.mark_file(fd, path))  # the committer now holds a duplicate of fd (and its lock)
    done = threading.Event()

    def finalised_inside_the_lock():
        with c._held:
            c.release(path, fd)  # as ChainFile.__del__ would, from inside a locked section
        done.set()

    threading.Thread(target=finalised_inside_the_lock, daemon=True).start()
    assert done.wait(10), "release from inside the committer's lock deadlocked"
    os.close(fd)
    probe = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no descriptor of ours holds it
    finally:
        os.close(probe)
    assert str(path) not in c._synced
