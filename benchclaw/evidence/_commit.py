"""Group commit: one fsync pass, on worker threads, covers everything written since the last.

Why it is built this way (FORMAT.md §1, "Durability"):

- **Writes stay where they are; only fsync moves.** A chain file's line is still written by
  its appender (under its lock, a short write cut back, a full disk raised to the appender),
  and a blob is appended to its writer's pack by whoever stores it. What is left is
  making it durable: the writer *marks* the file (``mark_file``) or hands over a rename
  (``rename_after_sync``) and gets a ticket. A caller that needs its write on disk before its
  next step waits for the ticket (``wait`` blocks a thread; ``await commit`` does not block
  the event loop). Everything else rides on the next commit anyone asks for.
- **One pass covers every file.** A pass takes everything marked so far and, in parallel on a
  small thread pool (concurrent fsyncs on one file system share journal commits, so 100
  files cost about what 10 do one after the other): (1) fsyncs every marked file and
  directory and every file waiting to be renamed; (2) renames those into place, never before
  their bytes are durable (loose blobs were; since blobs are packed no caller hands over a
  rename, and a seal renames itself and marks the directories);
  (3) fsyncs the directories a rename asked for. A ticket is done when the pass that took it
  has finished all three. Passes run one at a time; the marks made during one go to the next.
- **One committer per process**, shared by every ``Store`` and chain file of it, so a run's
  records, its blobs, the ledger and the journal share passes. A forked child starts its own.
- **Few thread hand-offs per pass.** The event loop's thread is busy while a grid runs, and
  each time a worker thread needs the GIL back (after each fsync, close, wake-up) it waits
  for that thread to let go; those hand-offs, not the fsyncs, were most of a commit's CPU.
  So the committer keeps its duplicate of a written file's descriptor from one pass to the
  next (closed once its writer ``release``s the file and no pass needs it), runs a small
  pass's fsyncs itself and a large one's on a few threads (its own one of them) that each
  take the next file, and wakes each event loop once per pass for all of its waiters.
- **A pass waited for only on event loops starts once those loops are idle**: the other
  runs in flight reach their own reservations meanwhile and share it. A loop that asks for
  a commit, or whose waiters a pass wakes, runs a probe (``_probe``) that reports when it has
  nothing ready to run (every run on it waits: for a commit, a model call, a timer), and not
  before ``_GATHER`` (2 ms) after the ask; the pass starts when every such loop reported, or
  ``_GATHER_MAX`` (10 ms) after the oldest ask at the latest. So the runs a pass wakes finish
  their turns and share the next pass, instead of two groups taking turns on alternate
  passes. A thread that blocks (``wait``) gets its pass at once.

Ordering is the callers' part, and it is one rule: *write what refers to a file only after
the commit covering that file* (a settlement after its call record, a journal ``run``
record after its sealed run; the agent and runner do so), with one exception: a run record
may name blobs not yet durable in its writer's pack, because one pass covers both (it
fsyncs the pack with the run file), and recovery fsyncs the packs an open run names (or cuts
the run at a blob a power cut lost) (FORMAT.md §5). Within one file, a later line is never durable without the earlier
ones (it is appended).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures as cf
import concurrent.futures.thread  # noqa: F401  (imported now: the pool cannot be imported at exit)
import fcntl
import os
import threading
import time
from pathlib import Path

from ..errors import StorageError

__all__ = ["Committer", "committer", "storage_error", "append_whole", "held_exclusively"]

_THREADS = 8     # fsyncs in flight at once; more only contend for the GIL on their way back
_INLINE = 4      # a phase this small runs on the committer's own thread (a hop costs more)
_CHUNK = 3       # a larger one takes a thread (this one included) per this many items, up to _THREADS
_GATHER = 0.002  # seconds a pass only event loops wait for waits, at least, for more to join it
_GATHER_MAX = 0.010  # and at most, for every such loop to be idle (``_probe``)
_PROBE_EVERY = 0.001  # how often a probe looks again at a busy loop (not each iteration: it costs)


class _Synced:
    """Our duplicate of a writer's descriptor, kept across passes (``Committer.mark_file``).
    ``closing``: its writer let the file go; closed once no pass is syncing it."""

    __slots__ = ("fd", "of", "marked", "busy", "closing")

    def __init__(self, fd: int, of: int):
        self.fd, self.of = fd, of   # ours, and the writer's it duplicates
        self.marked = self.busy = self.closing = False


class _Held:
    """``with committer._held:``: the committer's lock, with the releases that could not take
    it (``Committer.release``) carried out on entry and after letting go."""

    __slots__ = ("_c",)

    def __init__(self, c: "Committer"):
        self._c = c

    def __enter__(self) -> None:
        self._c._lock.acquire()
        if self._c._gone:
            self._c._let_gone()

    def __exit__(self, *exc) -> None:
        self._c._lock.release()
        if self._c._gone:
            self._c._try_let_gone()  # one queued while the lock was ours


class Committer:
    """Marks, tickets and passes (module docstring). Thread-safe; the pass runs on its own
    thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = _Held(self)
        # (path, writer's fd) of releases that found the lock taken: a finaliser (a writer's
        # ``__del__``) can run inside any allocation, on a thread that holds the lock already
        self._gone: collections.deque[tuple[str, int]] = collections.deque()
        self._synced: dict[str, _Synced] = {}               # path -> our dup of its writer's fd
        self._files: dict[str, _Synced] = {}                # path -> marked since the last pass
        self._dirs: set[str] = set()
        self._renames: list[tuple[int, Path, Path, tuple]] = []  # (fd we own, src, dst, dirs to sync)
        self._staged: dict[str, Path] = {}                   # dst -> src of a rename not yet done
        self._marked = 0       # the last ticket handed out
        self._done = 0         # every ticket up to this one is durable
        self._asked = 0        # the highest ticket someone waits for
        self._waiters: list[tuple[int, cf.Future]] = []
        self._loop_waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._wake = threading.Condition(self._lock)
        # loop -> when it asked for a commit (or had waiters woken) while its probe is pending:
        # the next pass waits for it to be idle (module docstring, ``_probe``)
        self._settling: dict[asyncio.AbstractEventLoop, float] = {}
        self._thread: threading.Thread | None = None
        self._pool: cf.ThreadPoolExecutor | None = None

    # -- marking (any thread) --------------------------------------------------------
    def mark_file(self, fd: int, path: Path | str) -> int:
        """``fd`` was written; it is durable once the returned ticket is. The committer keeps
        a duplicate of ``fd`` until the writer ``release``s ``path`` (which it must do before
        closing ``fd``); a different ``fd`` for the same path replaces it."""
        key = str(path)
        # ``with self._held:`` spelt out (this runs for every appended line): two method
        # calls fewer, the same steps in the same order
        self._lock.acquire()
        try:
            if self._gone:
                self._let_gone()
            got = self._synced.get(key)
            if got is None or got.of != fd:
                if got is not None:
                    self._let_go(key)
                got = self._synced[key] = _Synced(os.dup(fd), fd)
            got.marked = True
            self._files[key] = got
            self._marked += 1
            return self._marked
        finally:
            self._lock.release()
            if self._gone:
                self._try_let_gone()  # one queued while the lock was ours

    def release(self, path: Path | str, fd: int) -> None:
        """The writer of ``path`` is closing its descriptor ``fd``: close ours once no pass
        needs it (what was marked is still made durable by the next pass). Never blocks, so a
        finaliser may call it: when the lock is taken (by another thread, or by this one, the
        finaliser having run inside a locked section) the release waits in ``_gone`` for
        whoever holds it, who carries it out before letting go."""
        self._gone.append((str(path), fd))
        self._try_let_gone()

    def _try_let_gone(self) -> None:
        # Appended before trying: either the lock is free now, or its holder sees the entry
        # when it lets go (``_Held.__exit__`` looks after releasing), so none is left behind.
        while self._gone and self._lock.acquire(blocking=False):
            try:
                self._let_gone()
            finally:
                self._lock.release()

    def _let_gone(self) -> None:
        """Carry out the waiting releases (the lock held). One whose writer's descriptor is no
        longer the one we duplicate (the path was opened and marked again since) is void."""
        while self._gone:
            key, fd = self._gone.popleft()
            got = self._synced.get(key)
            if got is not None and got.of == fd:
                self._let_go(key)

    def _let_go(self, key: str) -> None:
        got = self._synced.pop(key, None)
        if got is None:
            return
        if got.marked or got.busy:
            got.closing = True  # the pass that syncs it closes it
        else:
            os.close(got.fd)

    def mark_dir(self, path: Path | str) -> int:
        """An entry of directory ``path`` changed (a file created or renamed)."""
        with self._held:
            self._dirs.add(str(path))
            self._marked += 1
            return self._marked

    def rename_after_sync(self, fd: int, src: Path, dst: Path, *, dirs: tuple = (), owned: bool = False) -> int:
        """Rename ``src`` onto ``dst`` once ``fd`` (``src``'s bytes) is durable, then fsync
        ``dirs``; when ``dst`` exists already (the same bytes: content addressed), ``src`` is
        removed instead. ``owned``: the committer closes ``fd`` (else it takes a dup, which
        keeps any ``flock`` on the file held until the rename is done)."""
        mine = fd if owned else os.dup(fd)
        with self._held:
            self._renames.append((mine, src, dst, tuple(str(d) for d in dirs)))
            self._staged[str(dst)] = src
            self._marked += 1
            return self._marked

    def forget(self, path: Path | str) -> None:
        """Drop the mark of ``path`` without syncing it and close our descriptor (a run file
        closed unsealed: its lock must go now, and recovery syncs what it keeps); a pass
        syncing it at that moment closes it when done."""
        key = str(path)
        with self._held:
            got = self._files.pop(key, None)
            if got is not None:
                got.marked = False
            self._let_go(key)

    def staged(self, dst: Path | str) -> Path | None:
        """Where the bytes of ``dst`` are while its rename waits for a pass (None: not staged)."""
        return self._staged.get(str(dst))

    @property
    def ticket(self) -> int:
        """The ticket of the last mark: waiting for it waits for everything marked so far."""
        return self._marked

    def durable(self, ticket: int) -> bool:
        return ticket <= self._done

    # -- waiting ---------------------------------------------------------------------
    def request(self, ticket: int | None = None) -> cf.Future | None:
        """A future done when ``ticket`` (default: everything marked so far) is durable; None
        when it already is. Its exception is the StorageError of the pass that failed it."""
        with self._held:
            t = self._marked if ticket is None else ticket
            if t <= self._done:
                return None
            fut: cf.Future = cf.Future()
            self._waiters.append((t, fut))
            self._asked = max(self._asked, t)
            self._start()
            self._wake.notify()
            return fut

    def wait(self, ticket: int | None = None) -> None:
        """Block this thread until ``ticket`` is durable (the sync path: CLI, studio threads)."""
        fut = self.request(ticket)
        if fut is not None:
            fut.result()

    async def commit(self, ticket: int | None = None) -> None:
        """Wait, without blocking the event loop, until ``ticket`` is durable. The pass wakes
        the loop once for every waiter of it it covers (``_wake_loops``)."""
        loop = asyncio.get_running_loop()
        with self._held:
            t = self._marked if ticket is None else ticket
            if t <= self._done:
                return
            fut = loop.create_future()
            self._loop_waiters.append((t, loop, fut))
            self._asked = max(self._asked, t)
            self._start()
            if loop not in self._settling:  # else its probe is under way and reports
                self._settling[loop] = time.monotonic()
                loop.call_soon(self._probe, loop)
        await fut

    def _probe(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: once it has nothing else ready to run, and ``_GATHER`` after its ask,
        report it idle (the next pass need not wait for it). Until then it looks again
        ``_PROBE_EVERY`` later (busy) or when ``_GATHER`` is up. ``_ready`` is asyncio's queue of
        callbacks to run; a loop without one is taken as idle at once."""
        since = self._settling.get(loop)
        if since is None:
            return
        waited = time.monotonic() - since
        if waited < _GATHER_MAX:
            if getattr(loop, "_ready", None):
                loop.call_later(_PROBE_EVERY, self._probe, loop)
                return
            if waited < _GATHER:
                loop.call_later(_GATHER - waited, self._probe, loop)
                return
        with self._held:
            if self._settling.pop(loop, None) is not None and self._asked > self._done:
                self._wake.notify()

    # -- the pass (its own thread) ---------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            self._pool = cf.ThreadPoolExecutor(_THREADS, thread_name_prefix="benchclaw-fsync")
            self._thread = threading.Thread(target=self._run, name="benchclaw-commit", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._held:
                while self._asked <= self._done:
                    self._wake.wait()
                self._gather()
            self._one_pass()

    def _gather(self) -> None:
        """While only event loops wait, wait (the lock held, except while waiting) until every
        loop that asked or was woken is idle (``_probe``), ``_GATHER_MAX`` after the oldest
        at the latest; a blocked thread (``request``) ends it at once."""
        while not self._waiters and self._settling:
            left = min(self._settling.values()) + _GATHER_MAX - time.monotonic()
            if left <= 0:
                self._settling.clear()  # their probes find nothing to report
                break
            self._wake.wait(left)

    def _one_pass(self) -> None:
        """Take everything marked so far, make it durable, tell the waiters it covers."""
        with self._held:
            upto = self._marked
            files, self._files = self._files, {}
            dirs, self._dirs = self._dirs, set()
            renames, self._renames = self._renames, []
            for got in files.values():
                got.marked, got.busy = False, True
        error = None
        try:
            self._pass({path: got.fd for path, got in files.items()}, dirs, renames)
        except BaseException as e:  # noqa: BLE001 - handed to every waiter of this pass
            error = e
        with self._held:
            for got in files.values():
                got.busy = False
                if got.closing and not got.marked:
                    os.close(got.fd)
            for _, src, dst, _ in renames:
                if self._staged.get(str(dst)) is src:
                    del self._staged[str(dst)]
            self._done = upto
            ready = [f for t, f in self._waiters if t <= upto]
            self._waiters = [(t, f) for t, f in self._waiters if t > upto]
            woken = [(loop, f) for t, loop, f in self._loop_waiters if t <= upto]
            self._loop_waiters = [w for w in self._loop_waiters if w[0] > upto]
            now = time.monotonic()
            fresh = set()  # its woken runs go on to their next asks: the next pass waits for them
            for loop, _ in woken:
                if loop not in self._settling:
                    self._settling[loop] = now
                    fresh.add(loop)  # (else the probe of an ask made meanwhile is under way)
        self._wake_loops(woken, error, fresh)
        for fut in ready:
            if not fut.set_running_or_notify_cancel():
                continue  # its waiter was cancelled (an interrupted run): nobody to tell
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    def _wake_loops(self, woken: list, error: BaseException | None, fresh: set) -> None:
        """Tell each event loop's waiters their pass is done: one wake-up per loop, which then
        probes (those in ``fresh``) until the runs it woke are done with their turns (``_probe``)."""
        by_loop: dict = {}
        for loop, fut in woken:
            by_loop.setdefault(loop, []).append(fut)
        for loop, futs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, futs, error, self._probe if loop in fresh else None, loop)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                with self._held:
                    self._settling.pop(loop, None)

    def _pass(self, files: dict[str, int], dirs: set[str], renames: list) -> None:
        try:
            # A run being sealed was usually marked too (its last records): fsync is per file,
            # so one of its two descriptors is enough.
            self._fsync_all([(fd, path, False) for path, fd in files.items()]
                            + [(fd, src, False) for fd, src, _, _ in renames if str(src) not in files]
                            + [(None, d, True) for d in dirs])
            self._fsync_all([(None, d, True) for d in self._move(renames)])
        finally:
            for r in renames:
                os.close(r[0])

    @staticmethod
    def _move(renames: list) -> set[str]:
        """Step 2: every rename of the pass (its bytes are durable now); returns the
        directories to fsync. Raises StorageError for the first that fails."""
        dirs: set[str] = set()
        for _, src, dst, sync in renames:
            try:
                if dst.exists():
                    src.unlink()
                else:
                    os.replace(src, dst)
            except OSError as e:
                raise storage_error(dst, "move into place", e) from None
            dirs.update(sync)
        return dirs

    def _fsync_all(self, items: list) -> None:
        """fsync ``items`` (``(fd, path, is_dir)``): a few on this thread; more on this thread
        and a few pool threads at once, each taking the next item until none is left (a
        thread hop per item costs more than it saves). Raises the first StorageError."""
        if not items:
            return
        todo = iter(items)  # shared: each next() is atomic
        futures: list = []
        if len(items) > _INLINE and self._pool is not None:
            helpers = min(_THREADS, -(-len(items) // _CHUNK)) - 1
            try:
                futures = [self._pool.submit(_fsync_each, todo) for _ in range(helpers)]
            except RuntimeError:  # the interpreter is exiting (the pool takes no work): inline
                pass
        errors = _fsync_each(todo)
        for fut in futures:
            errors += fut.result()
        if errors:
            raise errors[0]


def held_exclusively(path: Path | str) -> bool:
    """True while some descriptor holds an exclusive ``flock`` on ``path`` (a live writer of
    a pack, a running grid's experiment lock): a shared probe that would have to wait. A
    missing or unreadable file is held by nobody."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def append_whole(fd: int, path: Path | str, good_size: int, data: bytes, what: str) -> None:
    """The one append rule of every appended file (chain files, packs): write ``data`` whole
    with ``O_APPEND``; a short write or an error (a full disk) cuts the file back to
    ``good_size``, so no torn tail is left behind, and raises StorageError naming the file.
    Durability is the caller's (a mark)."""
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(28, f"short write ({written} of {len(data)} bytes)")
    except OSError as e:
        try:
            os.ftruncate(fd, good_size)
        except OSError:
            pass  # recovery sets a torn tail aside
        raise storage_error(path, what, e) from None  # type: ignore[arg-type]


def storage_error(path: Path, what: str, err: OSError) -> StorageError:
    """The StorageError for a failed write of ``path`` (names the file and the cause). It
    lives here, below the store, because the commit pass raises it too."""
    reason = err.strerror or str(err)
    hint = " (the disk is full)" if err.errno == 28 else ""
    if err.errno in (13, 30):  # EACCES, EROFS
        hint = " (the runs directory is not writable here)"
    return StorageError(f"{path}: cannot {what}: {reason}{hint}; everything written before is safe; "
                        "free space, then run `benchclaw runs recover` (a grid run does it on start)")


def _settle_all(futs: list, error: BaseException | None, probe, loop) -> None:
    for fut in futs:
        if not fut.done():  # a cancelled waiter (an interrupted run): nobody to tell
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
    if probe is not None:
        loop.call_soon(probe, loop)  # after the runs just woken have run


def _fsync_each(todo) -> list:
    """fsync the items of ``todo`` (an iterator other threads take from too) until none is
    left; the StorageErrors of those that failed."""
    return [e for e in map(_fsync_one, todo) if e is not None]


def _fsync_one(item) -> BaseException | None:
    fd, path, is_dir = item
    try:
        if is_dir:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            os.fsync(fd)
        return None
    except OSError as e:
        err = storage_error(Path(path), "make durable (fsync)", e)
        err.oserror = e  # type: ignore[attr-defined]  (an appender says what it was appending)
        return err


_COMMITTER: list[Committer] = []


def committer() -> Committer:
    """This process's committer (one per process; a forked child makes its own)."""
    if not _COMMITTER:
        _COMMITTER.append(Committer())
    return _COMMITTER[0]


def _flush_at_exit() -> None:
    """Make what is still marked durable (settlements, journal records, staged blobs) before
    the process ends; on this thread when the committer's never started (no thread can be
    started at exit)."""
    if _COMMITTER:
        c = _COMMITTER[0]
        try:
            if c._thread is None:
                c._one_pass()
            else:
                c.wait()
        except Exception:  # noqa: BLE001 - exiting; what could not be made durable is not
            pass


os.register_at_fork(after_in_child=_COMMITTER.clear)
atexit.register(_flush_at_exit)
