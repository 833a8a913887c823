"""Step 3, the checks: each run replayed from its task and replies, its checks re-run.

For each run that passed step 2: the task version is rebuilt from the bundle's
``tasks/<id>/v<N>/`` files (``Task.from_files``, the loader the runtime uses); the run is
replayed over the task inputs (``_replay``: every request, action, observation and
``run.end`` count follows from the model's replies), and the recorded ``artifact``
records must equal the files the replay wrote; then ``benchclaw.checks.tasks.check_artifacts``
(pure) re-runs every check on those replayed files, held-out ones included, and each
result must equal its ``check`` record field for field. ``run.end`` ``passed``,
``gate_passed`` and the status must follow from them.

A run with no check records must be ``aborted`` (the runtime records checks on every
other ending; crash recovery and an abort record neither checks nor artifacts). An
aborted run may hold some of its check records (a crash after them): those must match
their recomputation, and the run may claim no pass.
"""

from __future__ import annotations

import hashlib

from ..formats.records import DIGEST_RE
from ..checks import run_check
from ..checks.tasks import Task, check_artifacts, workspace_with
from ._errors import VerificationError
from ._index import Index, Run
from ._replay import judged_gate, replay_run
from ._report import Section
from ._runs import Runs
from .layout import task_entry
from .manifest import object_path

__all__ = ["verify_checks", "load_task", "per_run"]

_LITERAL = "literal:"
_FIELDS = ("id", "type", "gate", "heldout", "passed", "detail")


def verify_checks(ix: Index, runs: Runs, sec: Section) -> None:
    """Each run as ``per_run`` finds it: the reading stage's verdict when it took one (the
    run holds), else the run read here (and its fault reported)."""
    cache: dict = {}  # pure recomputations of this step, by their inputs (tasks, check results)
    for run in runs.values():
        results = ix.facts_of(run.path).checks
        if results is None:
            sec.attempt(_check_run, ix, run, cache, lambda n: sec.count("results", n))
        elif results:
            sec.count("results", results)
    sec.count("runs", len(runs))


def per_run(ix: Index, run: Run, cache: dict) -> int:
    """Step 3 on one run, pure: how many check results it confirmed (0 for an aborted run
    that recorded none). Raises VerificationError at the run's first fault. The reading
    stage takes it of every run (``_reading``, D); ``cache``: pure recomputations by
    their inputs (tasks, check results), shared across runs."""
    counted = [0]
    _check_run(ix, run, cache, lambda n: counted.__setitem__(0, n))
    return counted[0]


def load_task(ix: Index, prefix: str, cache: dict) -> Task:
    """The task version under ``prefix`` (once per version). Raises VerificationError naming it."""
    key = ("task", prefix)
    if key not in cache:
        try:
            cache[key] = Task.from_files(dict(ix.task_files.get(prefix) or {}), prefix)
        except Exception as e:  # FormatError, or anything a crafted task file trips
            cache[key] = VerificationError(prefix, f"not a loadable task version: {e}")
    if isinstance(cache[key], VerificationError):
        raise cache[key]
    return cache[key]


def _lit(detail: str) -> str:
    """As the runtime records untrusted strings: a digest-shaped one is marked literal."""
    return _LITERAL + detail if DIGEST_RE.match(detail) else detail


def _artifacts(ix: Index, run: Run) -> dict[str, str]:
    """Each recorded artifact's digest, by path. Its bytes are not read: step 2 tied the
    object to its digest, so comparing digests compares the bytes."""
    out: dict[str, str] = {}
    for line, rec in run.of_kind("artifact"):
        path, size, digest = rec.body.get("path"), rec.body.get("size"), rec.body.get("digest")
        if not isinstance(path, str) or path in out:
            raise VerificationError(run.path, f"artifact path {path!r} is not a new path", line)
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise VerificationError(run.path, f"{digest!r} is not a blob digest", line)
        if not ix.has(object_path(digest)):
            raise VerificationError(run.path, f"{object_path(digest)} is missing from the bundle", line)
        if size != ix.sizes[object_path(digest)]:
            raise VerificationError(run.path, f"artifact {path}: size says {size!r}, the blob has "
                                    f"{ix.sizes[object_path(digest)]} bytes", line)
        out[path] = digest
    return out


def _digest(data: bytes | None) -> str | None:
    return None if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


def _same_as_replay(run: Run, task: Task, artifacts: dict[str, str], written: dict[str, bytes], *,
                    every_write: bool) -> None:
    """The recorded artifacts are what the replay left: every written file (once the run
    reached its end), and each artifact's bytes the replayed workspace's."""
    for path in written if every_write else ():
        if path not in artifacts:
            raise VerificationError(run.path, f"{path} was written but is not a recorded artifact")
    for path, digest in artifacts.items():
        if _digest(written.get(path, task.inputs.get(path))) != digest:
            raise VerificationError(run.path, f"artifact {path} differs from what the run's "
                                    "write actions left in the workspace (replayed)")


def _check_run(ix: Index, run: Run, cache: dict, count) -> None:
    """The run replayed and its checks re-run; ``count(n)``: its n check results matched."""
    prefix = task_entry(run.start.get("task"))
    task = load_task(ix, prefix, cache)
    artifacts = _artifacts(ix, run)
    recorded = run.of_kind("check")
    written = replay_run(ix, run, task, cache)
    # a run that reached its end records every written file; an aborted one records none
    _same_as_replay(run, task, artifacts, written, every_write=bool(recorded))
    if not recorded:
        _no_checks(run)
        return
    results = _recompute(cache, prefix, task, written)  # on the replay, not the blobs
    aborted = run.end.get("status") == "aborted"
    if len(recorded) != len(results) and not (aborted and len(recorded) < len(results)):
        raise VerificationError(run.path, f"{len(recorded)} check records, the task has "
                                f"{len(results)} checks", recorded[0][0])
    for (line, rec), res in zip(recorded, results):
        _same_result(run, line, rec.body, {**res.to_dict(), "detail": _lit(res.detail)})
    count(len(recorded))
    if aborted:  # cut off by a crash after (some of) its checks: it claims nothing
        _no_claims(run)
        return
    passed = all(r.passed for r in results)
    gate = all(r.passed for r in results if r.gate)
    if any(isinstance(rec.body.get("error"), dict) and rec.body["error"].get("kind") == "key_echo"
           for _, rec in run.of_kind("call")):
        passed = gate = False  # the provider sent the key back in content: the run cannot pass
    _end_claims(run, passed, gate)


def _recompute(cache: dict, prefix: str, task: Task, artifacts: dict[str, bytes]) -> list:
    """``check_artifacts`` is pure, so identical replayed files of one task version are
    checked once; and the gate checks the replay already judged on this very workspace
    (the run's last ``check`` action, when nothing was written after it) are not judged
    again."""
    key = ("checks", prefix, tuple(sorted(artifacts.items())))
    if key not in cache:
        ws = workspace_with(task, artifacts)
        gate = judged_gate(cache, task, ws)
        if gate is None:
            cache[key] = check_artifacts(task, artifacts, include_heldout=True)
        else:
            judged = iter(gate)
            cache[key] = [next(judged) if s.gate and not s.heldout else run_check(s, ws, task.heldout)
                          for s in task.checks]
    return cache[key]


def _same_result(run: Run, line: int, got: dict, want: dict) -> None:
    if got == want:
        return
    label = f"check {want['id']}"
    for key in _FIELDS:
        if got.get(key) != want[key]:
            raise VerificationError(run.path, f"{label}: recorded {key}={got.get(key)!r}, "
                                    f"recomputed {key}={want[key]!r}", line)
    extra = sorted(set(got) - set(want))
    raise VerificationError(run.path, f"{label}: unexpected field(s) {extra}", line)


def _end_claims(run: Run, passed: bool, gate: bool) -> None:
    end, last = run.end, run.count
    for key, want in (("passed", passed), ("gate_passed", gate)):
        if end.get(key) is not want:
            raise VerificationError(run.path, f"run.end {key}={end.get(key)!r}, the recomputed "
                                    f"checks give {want}", last)
    status = end.get("status")
    if status in ("passed", "failed") and status != ("passed" if passed else "failed"):
        raise VerificationError(run.path, f"run.end status {status!r}, the recomputed checks "
                                f"give {'passed' if passed else 'failed'}", last)


def _no_checks(run: Run) -> None:
    end, last = run.end, run.count
    if end.get("status") != "aborted":
        raise VerificationError(run.path, f"run ended {end.get('status')!r} but holds no check "
                                "results (only an aborted run may lack them)", last)
    _no_claims(run)


def _no_claims(run: Run) -> None:
    """An aborted run's claims are fixed at false (FORMAT.md §3, crash recovery)."""
    if run.end.get("passed") or run.end.get("gate_passed"):
        raise VerificationError(run.path, "an aborted run claims a pass", run.count)
