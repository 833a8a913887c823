"""The offline verifier's pipeline: eight numbered steps, in the order an auditor would ask.

Each step is a function ``(bundle, section) -> None`` made of small checks that raise a
precise ``VerificationError`` (never return False); the section collects them, so every
defect is listed, and a later step builds only on what earlier steps accepted.
``UnreadableBundle`` stops everything (exit 2). An unexpected exception inside a step is
recorded as a failure of that step, never a traceback: a crafted bundle that trips a
recomputation has, by definition, not been verified. A step that did not run counts as
a failure too (fail closed).

No network, no disk writes: the bundle is read into memory once (bounded by
``Limits.archive_bytes``) and every member is inflated in memory with a size cap. Step 1's
objects are hashed in a forked worker while the run logs are parsed here, and steps 3 and
6-8 run in another while steps 4-5 run here (``_workers``): two cores, one report.

An exploratory bundle (the studio's journal: no registration, no decisions; its manifest
says ``exploratory``) has the same steps 1-4 and its own 5-8 (``_exploratory``), attached by
the one hook ``_form`` once step 2 is done.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Callable

from ._container import cancel_object_hashing, hash_entry, start_object_hashing, verify_container
from ._context import Bundle
from ._errors import UnreadableBundle, VerificationError
from ._report import Section, VerifyReport
from ._runs import parse_run, verify_runs
from ._workers import start
from ._zip import Limits, ZipView

__all__ = ["verify_bundle", "STEPS"]


def _steps() -> tuple[tuple[str, Callable[[Bundle, Section], None]], ...]:
    from ._checks import verify_checks
    from ._costs import verify_costs
    from ._journal import verify_completeness, verify_prereg
    from ._ledgers import verify_ledgers
    from ._summary import verify_summary

    return (
        ("container", verify_container),   # 1. every entry listed, sizes and SHA-256 match
        ("runs", verify_runs),             # 2. run ids, chains, objects, task digests
        ("checks", verify_checks),         # 3. each run replayed; checks re-run on what it wrote
        ("costs", verify_costs),           # 4. costs and bounds from usage and prices
        ("ledgers", verify_ledgers),       # 5. settled spend = recorded calls; no limit passed
        ("summary", verify_summary),       # 6. summary.json recomputed from the runs
        ("prereg", verify_prereg),         # 7. registration (pins) before calls, ledgers, runs
        ("complete", verify_completeness),  # 8. nothing dropped; every stop and trial follows
    )


STEPS = _steps


def verify_bundle(source: str | os.PathLike | bytes, *, limits: Limits = Limits(),
                  registered: str | list[str] | None = None) -> VerifyReport:
    """Verify a bundle given as a path or as its bytes. Never raises for bad input: the
    report's ``exit_code`` is 0 (verified), 1 (evidence does not match) or 2 (unreadable).
    ``registered``: the registration digest(s) the auditor holds (``benchclaw prereg``
    printed it); step 7 fails unless the bundle's registration is one of them."""
    label = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    report = VerifyReport.empty(label)
    paused = gc.isenabled()
    gc.disable()  # millions of acyclic records: cyclic GC passes would only cost time
    try:
        data = _load(source, limits)
        bundle = Bundle(ZipView(data, limits), limits)
        if registered is not None:
            bundle.registered = frozenset([registered] if isinstance(registered, str) else registered)
        _run_steps(bundle, report)
        _after(bundle, report)
    except UnreadableBundle as e:
        report.fatal = e
    except (MemoryError, RecursionError) as e:
        report.fatal = UnreadableBundle("", f"not a readable bundle: {type(e).__name__} while reading")
    finally:
        if paused:
            gc.enable()
    return report


def _after(b: Bundle, report: VerifyReport) -> None:
    """What the report states beside the steps: each experiment's registration digest (for
    the auditor to compare), and the entries no step proves (``site/``: pages rendered
    from the evidence by a builder the verifier does not run)."""
    from ._journal import registration_of, repinned

    if b.manifest is None:
        return
    if b.manifest.exploratory:  # no registration to show: a note says what it is instead
        from ._exploratory import after

        after(b, report)
    else:
        for exp in b.manifest.experiments:
            report.registrations[exp] = registration_of(b, exp)
            report.notes.extend(repinned(b, exp))
    site = [n for n in b.view.names if n.startswith("site/")]
    if site:
        report.unproven.append(("site/", len(site), "the pages are not recomputed: their tables and "
                                "numbers are NOT verified; read the numbers from summary.json"))


def _load(source, limits: Limits) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    path = Path(source)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.archive_bytes:
                raise UnreadableBundle(str(path), f"{size} bytes, above the limit of {limits.archive_bytes}")
            return f.read(limits.archive_bytes + 1)
    except IsADirectoryError:
        raise UnreadableBundle(str(path), "is a directory, not a bundle file") from None
    except OSError as e:
        raise UnreadableBundle(str(path), f"cannot read ({e.strerror or e})") from None


# Steps 3 and 6-8 read only what steps 1-2 established (and the ledger chains, parsed
# before the fork), never what steps 4-5 add (step 5 reads the costs step 4 confirmed), so
# they run in a forked child on the second core while this process runs steps 4-5: about
# the same amount of work on each side. The report is the same as in order: each step
# fills its own section, and the sections are numbered, not timed.
_SERIAL = 2
_IN_CHILD = frozenset({"checks", "summary", "prereg", "complete"})


def _run_steps(b: Bundle, report: VerifyReport) -> None:
    steps = STEPS()
    try:
        _parse_while_hashing(b)
        for name, step in steps[:_SERIAL]:
            _run_step(b, report, name, step)
    finally:
        cancel_object_hashing(b)
    steps = _form(b, report, steps)
    later = [(name, step) for name, step in steps[_SERIAL:] if name in _IN_CHILD]
    pending = start(_run_in_child, b, later, timeout=b.limits.worker_seconds)
    try:
        _release(b, "fork")
        for name, step in steps[_SERIAL:]:
            if name not in _IN_CHILD:
                _run_step(b, report, name, step)
                _release(b, name)
        _merge(report, pending.result())
    finally:
        pending.cancel()


def _form(b: Bundle, report: VerifyReport, steps: tuple) -> tuple:
    """The steps for this bundle's form: an exploratory bundle's 5-8 are ``_exploratory``'s."""
    if b.manifest is None or not b.manifest.exploratory:
        return steps
    from ._exploratory import adopt

    return adopt(report, steps)


def _forget_digests(b: Bundle) -> None:
    b.digests.clear()
    b.memo.pop("good objects", None)


def _forget_derived(b: Bundle) -> None:
    b.derived.clear()
    for key in [k for k in b.memo if k[0] == "usage"]:
        del b.memo[key]  # step 4's normalised usages: step 5 reads the confirmed costs


# What this process no longer needs once the child has its copy (the digests serve steps
# 1-2 and the child's step 7; steps 4-5 read neither), and once step 4 has read the objects' derived values: freed
# so that step 5's replay reuses the memory instead of raising the peak.
_RELEASE = {"fork": _forget_digests, "costs": _forget_derived}


def _release(b: Bundle, after: str) -> None:
    """Without ``fork`` the child's steps have already run here, so this holds too."""
    if after in _RELEASE:
        _RELEASE[after](b)


def _parse_while_hashing(b: Bundle) -> None:
    """Fork the object hashing of step 1, and meanwhile hash and parse the run logs (the
    part of step 2 that needs no object digest). Raises UnreadableBundle (no manifest)."""
    from ._ledgers import PREFIX, forget_ledger_lines, parse_ledger_chains

    start_object_hashing(b)
    for name in b.view.names:
        if name.startswith("runs/"):
            parse_run(b, name)
        elif name.startswith(PREFIX):
            hash_entry(b, name)  # kept for the chain parse below, which would inflate it again
    parse_ledger_chains(b)
    forget_ledger_lines(b)
    for name in [n for n in b.content if n.startswith(PREFIX)]:
        del b.content[name]  # parsed: later steps read the chains, not the bytes


def _run_step(b: Bundle, report: VerifyReport, name: str, step) -> None:
    sec = report.section(name)
    try:
        step(b, sec)
    except UnreadableBundle:
        raise
    except VerificationError as e:
        sec.fail(e)
    except Exception as e:  # noqa: BLE001 - a crafted bundle must never produce a traceback
        sec.fail(VerificationError("", f"recomputation failed: {type(e).__name__}: {e}"[:500]))
    sec.ran = True
    if name == "container":
        report.manifest_digest = b.manifest.digest
        report.experiments = b.manifest.experiments


def _run_in_child(b: Bundle, steps) -> dict:
    """Run ``steps`` on a scratch report; their sections (or the fatal error) as JSON values."""
    scratch = VerifyReport.empty("")
    try:
        for name, step in steps:
            _run_step(b, scratch, name, step)
    except UnreadableBundle as e:
        return {"fatal": e.to_dict()}
    except (MemoryError, RecursionError) as e:
        return {"fatal": {"path": "", "message": f"not a readable bundle: {type(e).__name__} while reading",
                          "record": None}}
    return {"sections": [scratch.section(name).to_dict() for name, _ in steps]}


def _merge(report: VerifyReport, got: dict) -> None:
    if got.get("fatal"):
        f = got["fatal"]
        raise UnreadableBundle(f["path"], f["message"], f["record"])
    for d in got["sections"]:
        sec = report.section(d["name"])
        sec.counts.update(d["counts"])
        sec.failures.extend(VerificationError(f["path"], f["message"], f["record"]) for f in d["failures"])
        sec.failure_count += d["failure_count"]
        sec.ran = d["ran"]
