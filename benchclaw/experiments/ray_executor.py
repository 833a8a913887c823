"""The Ray executor: each agent run of a grid is one Ray task on a cluster (docs/scale.md).

Why it is built this way:
- **The runner still plans on the driver.** Units, policies, resume, stopping rules and
  the journal stay in ``benchclaw.experiments.runner``; only ``run_agent`` moves to a worker. A worker
  writes its run into a scratch runs directory and returns the sealed bytes and blobs;
  the driver stores them (content addressed, so storing twice is a no-op) under the same
  run id, so its runs directory ends up as a local run would leave it.
- **One ledger authority.** Every reservation goes through one Ray actor, ``_Authority``,
  pinned to the driver's node. It owns a ``benchclaw.experiments.ledger.Ledger`` on the invocation's
  ledger file (the same fold, flock and fsync as a local run) and serialises reservations,
  so no number of workers can pass the budget or the per-call stop.
- **Evidence from the start.** A worker sends its run's ``run.start`` the moment it is
  written, and with each reservation (and settlement) the
  records its run wrote since (and their blobs); the authority appends them, fsynced, to
  ``open/<attempt>.jsonl`` on the driver *before* it grants the reservation (or records the
  settlement, so a known settlement never precedes its ``call`` record). So when a
  worker dies mid-call, the driver holds exactly what a local crash would have left on
  disk: the run is sealed ``aborted`` by the store's crash recovery, its reservation
  settled as unknown (counted at its upper bound), and the unit resumes as today. A run
  cut off before its first call is sealed ``aborted`` too, as a local one is; only a task
  Ray had not started yet leaves nothing (as a unit the local runner had not started).

Trade-offs: the authority is one process on one node (its rate is measured in
``bench/scale.py``); each reservation costs a round trip to it plus an fsync of the run's
new records. A worker reads the provider's key from its own environment; it is never sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from .grid import reserved_attempts
from .executor import Executor, RunDone, RunJob, RunParts, agent_kwargs, first_last
from ..evidence.check import recover_one
from ..evidence.packs import finish_packs
from ..errors import BudgetError, IntegrityError, UsageError
from .ledger import Ledger, Reservation
from ..formats.records import GENESIS, blob_refs, line_hash, parse_line, split_lines, verify_chain
from ..evidence.store import RunWriter, Store, storage_error, write_atomically

__all__ = ["RayExecutor", "require_ray"]


def require_ray():
    """The ``ray`` module. Raises UsageError with the install hint when it is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'benchclaw[ray]'") from None
    return ray


class RayExecutor(Executor):
    """Runs each agent run as a Ray task. ``address`` is the cluster's (``ray start --head``
    prints it; ``auto`` finds a local one); None starts a local Ray instance. A Ray
    already initialised in this process (tests, notebooks) is used as it is.
    ``task_cpus`` is what one run asks Ray for: 1 (the default) runs one run per CPU,
    right for CPU-heavy checks; a fraction (0.1) packs I/O-bound runs ten to a CPU."""

    name = "ray"

    def __init__(self, address: str | None = None, *, task_cpus: float = 1.0, init_options: dict | None = None):
        self.address, self.task_cpus = address, task_cpus
        self.init_options = dict(init_options or {})
        self._started = False
        self.refs: dict[str, Any] = {}
        self.preloaded: dict[str, Any] = {}

    # -- the executor interface (benchclaw.experiments.executor.Executor) -------------------------
    def prepare(self, parts: RunParts) -> None:
        ray = require_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, **self.init_options)
            self._started = True
        self.parts = parts
        self.shared = ray.put(RunParts(None, parts.backends, parts.catalog, parts.profiles, parts.tiers,
                                       parts.settings))  # a worker's store is its own
        # max_retries=0: a run that may have reached the model is never silently redone
        self.remote_run = ray.remote(max_retries=0, num_cpus=self.task_cpus)(_run_on_worker)

    async def start(self, ledger: Ledger, halt=lambda: None) -> None:
        # An interrupt cancels the tasks in flight (``cut_off``); the runner checks ``halt``
        # before it submits a run, so no new task starts after it.
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ledger_id = ledger.id
        here = ray.get_runtime_context().get_node_id()
        actor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)(_Authority)
        self.authority = actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(
            str(self.parts.store.root.resolve()), ledger.id, self.parts.store.fsync)
        await self.authority.ready.remote()

    async def run(self, job: RunJob) -> RunDone:
        ray = require_ray()
        ref = self.remote_run.remote(self.shared, job, self.authority, self.ledger_id, self._preload(job))
        self.refs[job.attempt] = ref
        try:
            data, blobs = await ref
        except ray.exceptions.RayTaskError as e:  # the run raised: as a local run would
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, BaseException) else e) from None
        except ray.exceptions.RayError as e:  # the worker (or its node) was lost
            return self.cut_off(job, f"worker lost: {type(e).__name__}") or RunDone(None, {}, 0)
        self.refs.pop(job.attempt, None)
        # From here on no await: an interrupt cannot cut a finished run off while it lands.
        reserved, _ = ray.get(self.authority.close_attempt.remote(job.attempt, "run ended", False))
        return self._land(job, data, blobs, reserved)

    def cut_off(self, job: RunJob, why: str) -> RunDone | None:
        """Kill the run's task if it still runs, settle its open reservations as unknown
        (the authority refuses any later one), and seal what reached the driver aborted."""
        ray = require_ray()
        ref = self.refs.pop(job.attempt, None)
        if ref is not None:
            ray.cancel(ref, force=True)
            finished = _result_if_finished(ray, ref)  # it may have ended just before the cancel
            if finished is not None:
                reserved, _ = ray.get(self.authority.close_attempt.remote(job.attempt, why, True))
                return self._land(job, *finished, reserved)
        try:
            reserved, _ = ray.get(self.authority.close_attempt.remote(job.attempt, why, True))
        except ray.exceptions.RayError:  # the authority is gone: its open reservations stay at the bound
            reserved = None
        store = self.parts.store
        mirror = _mirror_path(store, job.attempt)
        if not mirror.exists():
            return None
        run_id = recover_one(store, mirror).run_id
        if run_id is None:
            return None
        if reserved is None:
            reserved = int(job.attempt in reserved_attempts(store, [self.ledger_id]))
        # Sealed by crash recovery, journaled as a crash's run is: at its run.end cost. The
        # call cut off in flight counts at its ledger bound (FORMAT.md "Calls cut off in flight").
        return RunDone(run_id, first_last(store, run_id)[1], reserved)

    async def close(self) -> None:
        ray = require_ray()
        if getattr(self, "authority", None) is not None:
            ray.kill(self.authority)
            self.authority = None
        if self._started:
            ray.shutdown()
            self._started = False

    def _preload(self, job: RunJob):
        """The blobs the run's policy context names (the registered spec), which the
        worker's store must hold before ``run.start`` may reference them: one object each."""
        ray = require_ray()
        refs = {}
        for digest in sorted(set(blob_refs(job.policy_context))):
            if digest not in self.preloaded:
                self.preloaded[digest] = ray.put(self.parts.store.get_blob(digest))
            refs[digest] = self.preloaded[digest]
        return refs

    # -- landing a finished run on the driver -------------------------------------------
    def _land(self, job: RunJob, data: bytes, blobs: dict[str, bytes], reserved: int) -> RunDone:
        store = self.parts.store
        for digest, blob in sorted(blobs.items()):
            if store.put_blob(blob) != digest:
                raise IntegrityError(f"a worker sent blob {digest} whose bytes hash otherwise")
        mirror = _mirror_path(store, job.attempt)
        before = mirror.read_bytes() if mirror.exists() else b""
        if not data.startswith(before):
            raise IntegrityError(f"{mirror}: the run a worker returned does not extend the records it "
                                 "sent before its reservations")
        records = _verify_run(data, f"run of attempt {job.attempt}")
        if (records[0].body.get("policy") or {}).get("attempt") != job.attempt:
            raise IntegrityError(f"a worker returned a run of another attempt for {job.attempt}")
        write_atomically(mirror, data, mirror.with_name(mirror.name + ".landing"), fsync=store.fsync,
                         what="store a run a worker returned")  # a crash now leaves a complete run to seal
        run_id = store.seal_file(mirror, hashlib.sha256(data).hexdigest())
        return RunDone(run_id, records[-1].body, reserved)


# ------------------------------------------------------------------------ the worker side

class _ScratchStore(Store):
    """A worker's throw-away runs directory; its one run is ``open/<attempt>.jsonl``."""

    def __init__(self, root: Path, attempt: str):
        super().__init__(root, fsync=False)
        self.attempt = attempt
        self.writer: RunWriter | None = None
        self.on_start: Callable[[], None] | None = None  # called once run.start is written

    def open_run(self) -> RunWriter:
        self.ensure()
        self.writer = RunWriter(self, self.root / "open" / f"{self.attempt}.jsonl", self._appended)
        return self.writer

    def _appended(self, rec) -> None:
        if rec.seq == 0 and self.on_start is not None:
            self.on_start()

    def blobs(self) -> dict[str, bytes]:
        """Every blob the run stored (packed or loose), by digest."""
        return {f"sha256:{hexd}": loc.read() for hexd, loc in self.iter_blobs()}


class _RemoteLedger:
    """The ledger as a worker's run sees it: ``reserve``/``settle`` go to the authority;
    each reservation first ships the run's new records and the blobs not yet sent."""

    def __init__(self, authority, ledger_id: str, attempt: str, store: _ScratchStore):
        self.authority, self.id, self.attempt, self.store = authority, ledger_id, attempt, store
        self.sent_lines = 0
        self.sent_blobs: set[str] = set()

    def reserve(self, *, run: str, key: str, tokens: int, usd: Decimal) -> Reservation:
        import ray

        lines, blobs = self._news()
        ok, answer = ray.get(self.authority.reserve.remote(self.attempt, run, key, tokens, usd, lines, blobs))
        self._sent(lines, blobs)
        if not ok:
            raise BudgetError(answer)
        return Reservation(answer, run, key, tokens, usd, self.attempt)

    def settle(self, reservation: Reservation, *, tokens: int | None, usd: Decimal | None,
               reason: str | None = None) -> None:
        """Ships the ``call`` record first (the agent appends it before settling), so a
        known settlement never reaches the ledger without its call on the driver."""
        import ray

        lines, blobs = self._news()
        ray.get(self.authority.settle.remote(self.attempt, reservation.id, tokens, usd, reason, lines, blobs))
        self._sent(lines, blobs)

    def started(self) -> None:
        """Ships ``run.start`` the moment it is written, so a run cut off before its first
        reservation is on the driver as it would be on a local disk: sealed ``aborted`` by
        ``cut_off`` (an interrupt that cuts runs off then shows in the runs it cut off,
        FORMAT.md "A stop must follow from the evidence"). Refused once the run was cut off
        (the worker is being killed; nothing more of it lands)."""
        import ray

        lines, blobs = self._news()
        if ray.get(self.authority.started.remote(self.attempt, lines, blobs)):
            self._sent(lines, blobs)

    def _news(self) -> tuple[list[bytes], dict[str, bytes]]:
        records = self.store.writer.records if self.store.writer else []
        lines = [r.line for r in records[self.sent_lines:]]
        return lines, {d: b for d, b in self.store.blobs().items() if d not in self.sent_blobs}

    def _sent(self, lines: list, blobs: dict) -> None:
        self.sent_lines += len(lines)
        self.sent_blobs |= set(blobs)


def _run_on_worker(shared: RunParts, job: RunJob, authority, ledger_id: str,
                   preload: dict) -> tuple[bytes, dict[str, bytes]]:
    """One agent run on a worker; returns the sealed run's bytes and the blobs the
    authority has not stored yet. ``preload``: digest -> object ref of blobs the driver
    holds already (Ray resolves only top-level refs, so they are fetched here)."""
    import ray

    sweep_scratch()
    with tempfile.TemporaryDirectory(prefix=f"{_SCRATCH}{os.getpid()}-") as tmp:
        store = _ScratchStore(Path(tmp), job.attempt)
        ledger = _RemoteLedger(authority, ledger_id, job.attempt, store)
        store.on_start = ledger.started
        for digest, ref in preload.items():
            store.put_blob(ray.get(ref))
            ledger.sent_blobs.add(digest)
        provider = shared.backends.provider(shared.catalog.tier(job.tier))

        async def go():
            try:
                return await shared.backends.run_agent(store=store, provider=provider, ledger=ledger,
                                                       **agent_kwargs(shared, job))
            finally:
                if hasattr(provider, "aclose"):
                    await provider.aclose()

        try:
            result = asyncio.run(go())
            data = store.run_path(result.run_id).read_bytes()
            return data, {d: b for d, b in store.blobs().items() if d not in ledger.sent_blobs}
        finally:
            finish_packs(str(store.root / "objects"))  # a worker runs many attempts: no descriptor left behind


_SCRATCH = "benchclaw-ray-"


def sweep_scratch(parent: str | None = None) -> int:
    """Remove the scratch runs directories that workers killed mid-run left behind (Ray
    force-cancels a task with SIGKILL, so its ``TemporaryDirectory`` is never cleaned up);
    returns how many were removed. A scratch directory is named after its worker's pid
    (``benchclaw-ray-<pid>-*``); it is removed only when no process has that pid on this
    node, so a live worker's directory is never touched (a reused pid only delays the
    removal). Directories without a pid in their name, or that cannot be removed, are
    left alone: a sweep never fails a run."""
    import shutil

    parent = parent or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(parent) if n.startswith(_SCRATCH)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        pid = name[len(_SCRATCH):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        removed += not os.path.exists(os.path.join(parent, name))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


# ------------------------------------------------------------------------ the authority

class _Authority:
    """The one ledger authority of an invocation (a Ray actor on the driver's node)."""

    def __init__(self, root: str, ledger_id: str, fsync: bool):
        self.store = Store(root, fsync=fsync)
        self.ledger = Ledger.open(self.store, ledger_id)
        self.open: dict[str, dict[str, Reservation]] = {}   # attempt -> reservation id -> reservation
        self.reserved: dict[str, int] = {}                   # attempt -> reservations made
        self.mirrors: dict[str, tuple[int, str]] = {}        # attempt -> (next seq, prev hash)
        self.closed: set[str] = set()

    def ready(self) -> bool:
        return True

    def reserve(self, attempt: str, run: str, key: str, tokens: int, usd: Decimal, lines: list[bytes],
                blobs: dict[str, bytes]) -> tuple[bool, str]:
        """Store the run's new evidence, then reserve: ``(True, reservation id)`` or
        ``(False, why)`` (refused by the ledger, or the run was cut off)."""
        if attempt in self.closed:
            return False, f"ledger {self.ledger.id}: call refused: the run was cut off"
        self._mirror(attempt, lines, blobs)
        try:
            res = self.ledger.reserve(run=run, key=key, tokens=tokens, usd=usd, attempt=attempt)
        except BudgetError as e:
            return False, str(e)
        self.open.setdefault(attempt, {})[res.id] = res
        self.reserved[attempt] = self.reserved.get(attempt, 0) + 1
        return True, res.id

    def started(self, attempt: str, lines: list[bytes], blobs: dict[str, bytes]) -> bool:
        """Store a run's ``run.start`` (and its blobs); False when the run was cut off."""
        if attempt in self.closed:
            return False
        self._mirror(attempt, lines, blobs)
        return True

    def settle(self, attempt: str, rid: str, tokens: int | None, usd: Decimal | None, reason: str | None,
               lines: list[bytes], blobs: dict[str, bytes]) -> bool:
        res = self.open.get(attempt, {}).pop(rid, None)
        if res is None:  # the run was cut off meanwhile: settled as unknown already
            return False
        self._mirror(attempt, lines, blobs)
        self.ledger.settle(res, tokens=tokens, usd=usd, reason=reason)
        return True

    def close_attempt(self, attempt: str, why: str, fence: bool) -> tuple[int, str]:
        """Forget ``attempt``, settling its open reservations as unknown (cut off in flight).
        ``fence``: its task may still be running (cut off), so refuse any later reservation
        of it; a task that returned can send none. Returns how many reservations it made and
        the open ones' upper bounds (a decimal string)."""
        if fence:
            self.closed.add(attempt)
        self.mirrors.pop(attempt, None)
        total = Decimal(0)
        for res in self.open.pop(attempt, {}).values():
            self.ledger.settle(res, tokens=None, usd=None, reason=why)
            total += res.usd
        return self.reserved.pop(attempt, 0), str(total)

    def _mirror(self, attempt: str, lines: list[bytes], blobs: dict[str, bytes]) -> None:
        """Store the blobs, then append a run's records, chain checked, to
        ``open/<attempt>.jsonl`` (fsynced)."""
        for digest, data in blobs.items():
            if self.store.put_blob(data) != digest:
                raise IntegrityError(f"blob {digest}: its bytes hash otherwise")
        if not lines:
            return
        seq, prev = self.mirrors.get(attempt, (0, GENESIS))
        path = _mirror_path(self.store, attempt)
        for i, line in enumerate(lines):
            rec = parse_line(line, f"{path}:{seq + i + 1}")
            if rec.seq != seq + i or rec.prev != prev:
                raise IntegrityError(f"{path}:{seq + i + 1}: a worker sent records out of chain")
            prev = line_hash(line)
        self.store.ensure()
        try:
            with open(path, "ab") as f:
                f.write(b"".join(ln + b"\n" for ln in lines))
                f.flush()
                if self.store.fsync:
                    os.fsync(f.fileno())
        except OSError as e:
            raise storage_error(path, "append a worker's records", e) from None
        self.mirrors[attempt] = (seq + len(lines), prev)


# ------------------------------------------------------------------------------ helpers

def _result_if_finished(ray, ref):
    """A cancelled task's result when it had finished anyway, else None."""
    try:
        return ray.get(ref, timeout=10)
    except Exception:  # cancelled, lost, failed or still dying: nothing landed
        return None


def _mirror_path(store: Store, attempt: str) -> Path:
    return store.root / "open" / f"{attempt}.jsonl"


def _verify_run(data: bytes, where: str) -> list:
    lines, torn = split_lines(data)
    if torn:
        raise IntegrityError(f"{where}: torn last line")
    records = verify_chain(lines, where)
    if not records or records[0].kind != "run.start" or records[-1].kind != "run.end":
        raise IntegrityError(f"{where}: a sealed run starts with run.start and ends with run.end")
    return records


