"""The offline verifier: one reading stage, then eight numbered steps, in the order an auditor would ask.

Reading (``_reading``): every entry of the bundle is inflated, hashed and parsed once into a
typed, read-only ``Index`` (``_index``). All of the verifier's forking, memory and garbage
collector tactics live there. Then the steps run, strictly in their numbered order, each
reading the index and writing only its own report section:

====  ==========  ==============================================================  =====================
step  section     what it establishes                                             hands on
====  ==========  ==============================================================  =====================
1     container   every entry listed, sizes and SHA-256 match                     -
2     runs        run ids, chains, objects, task digests                          the runs it accepted
3     checks      each run replayed; checks re-run on what it wrote               -
4     costs       costs and bounds from usage and prices                          the confirmed costs
5     ledgers     settled spend = recorded calls; no limit passed                 -
6     summary     summary.json recomputed from the runs                           -
7     prereg      registration (pins) before calls, ledgers, runs                 -
8     complete    nothing dropped; every stop and trial follows                   -
====  ==========  ==============================================================  =====================

Steps 3-8 build only on the runs step 2 accepted (so one fault is reported where it is,
not five times downstream); step 5 ties the ledgers to the costs step 4 confirmed. An
exploratory bundle (the studio's journal: no registration, no decisions; its manifest says
``exploratory``) runs ``_exploratory``'s steps 5-8 (ledgers, label, order, complete) in
their place.

Each step is made of small checks that raise a precise ``VerificationError`` (never return
False); its section collects them, so every defect is listed. ``UnreadableBundle`` stops
everything (exit 2). An unexpected exception inside a step is recorded as a failure of that
step, never a traceback: a crafted bundle that trips a recomputation has, by definition,
not been verified. A step that did not run counts as a failure too (fail closed).

No network, and nothing written but unlinked temporary files, gone when the verification
ends: the one the reading stage spills per-run values to (``_index.Spill``), one a forked
reader writes its results into while it runs (``_reading``), and the one step 6's analysis
folds the runs' views into (``analysis.fold``, spilled as export folds them). The bundle is
read once, bounded by ``Limits``.

``BENCHCLAW_VERIFY_TIMINGS=1`` in the environment writes one line per stage to stderr
(``verify-timing <stage> wall=S cpu=S workers_cpu=S rss_mb=R peak_mb=P``: this process's CPU
seconds and its reaped workers', its resident and peak memory at the stage's end), for
``bench/verify.py --timings``; it changes nothing else.
"""

from __future__ import annotations

import os
import sys

from ._errors import UnreadableBundle, VerificationError
from ._index import Index
from ._reading import reading
from ._report import Section, VerifyReport
from ._zip import Limits

__all__ = ["verify_bundle"]


def verify_bundle(source: str | os.PathLike | bytes, *, limits: Limits = Limits(),
                  registered: str | list[str] | None = None) -> VerifyReport:
    """Verify a bundle given as a path or as its bytes. Never raises for bad input: the
    report's ``exit_code`` is 0 (verified), 1 (evidence does not match) or 2 (unreadable).
    ``registered``: the registration digest(s) the auditor holds (``benchclaw prereg``
    printed it); step 7 fails unless the bundle's registration is one of them."""
    label = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    report = VerifyReport.empty(label)
    held = None if registered is None else frozenset([registered] if isinstance(registered, str) else registered)
    clock = _Clock()
    try:
        with reading(source, limits, held) as ix:
            clock.lap("reading")
            report.manifest_digest = ix.manifest.digest
            report.experiments = ix.manifest.experiments
            _run_steps(ix, report, clock)
            _after(ix, report)
    except UnreadableBundle as e:
        report.fatal = e
    except (MemoryError, RecursionError) as e:
        report.fatal = UnreadableBundle("", f"not a readable bundle: {type(e).__name__} while reading")
    return report


def _run_steps(ix: Index, report: VerifyReport, clock: "_Clock") -> None:
    """Steps 1 to 8, in order; what one step hands on is passed to the next by name."""
    from ._checks import verify_checks
    from ._container import verify_container
    from ._costs import Costs, verify_costs
    from ._runs import Runs, verify_runs

    step = _Stepper(ix, report, clock)
    step("container", verify_container)                               # 1
    runs = step("runs", verify_runs) or Runs.none()                    # 2
    step("checks", verify_checks, runs)                                # 3
    costs = step("costs", verify_costs, runs) or Costs.none()          # 4
    if ix.manifest.exploratory:
        _exploratory_steps(step, report, runs, costs)                  # 5-8, studio form
        return
    from ._journal import verify_completeness, verify_prereg
    from ._ledgers import verify_ledgers
    from ._summary import verify_summary

    step("ledgers", verify_ledgers, runs, costs)                       # 5
    del costs  # step 4's prices by run (its calls stay in the index): read by step 5 only
    step("summary", verify_summary, runs)                              # 6
    step("prereg", verify_prereg, runs)                                # 7
    step("complete", verify_completeness, runs)                        # 8


def _exploratory_steps(step, report: VerifyReport, runs, costs) -> None:
    """An exploratory bundle's steps 5-8 (``_exploratory``): its sections replace 5-8."""
    from ._exploratory import SECTIONS, verify_complete, verify_label, verify_order
    from ._exploratory_ledgers import verify_ledgers

    report.sections[4:] = [Section(i, n, t) for i, (n, t) in enumerate(SECTIONS, 5)]
    step("ledgers", verify_ledgers, runs, costs)                       # 5
    step("label", verify_label, runs)                                  # 6
    step("order", verify_order, runs)                                  # 7
    step("complete", verify_complete, runs)                            # 8


class _Stepper:
    """Runs one step into its own section: ``step(ix, *handed, sec)``; returns what the
    step returns (None when it broke off)."""

    def __init__(self, ix: Index, report: VerifyReport, clock: "_Clock"):
        self.ix, self.report, self.clock = ix, report, clock

    def __call__(self, name: str, fn, *handed):
        sec = self.report.section(name)
        got = None
        try:
            got = fn(self.ix, *handed, sec)
        except UnreadableBundle:
            raise
        except VerificationError as e:
            sec.fail(e)
        except Exception as e:  # noqa: BLE001 - a crafted bundle must never produce a traceback
            sec.fail(VerificationError("", f"recomputation failed: {type(e).__name__}: {e}"[:500]))
        sec.ran = True
        self.clock.lap(f"{sec.number}.{name}")
        return got


class _Clock:
    """``BENCHCLAW_VERIFY_TIMINGS``: each stage's wall and CPU seconds, to stderr (a no-op
    without it)."""

    def __init__(self):
        self.on = bool(os.environ.get("BENCHCLAW_VERIFY_TIMINGS"))
        self.last = os.times() if self.on else None

    def lap(self, stage: str) -> None:
        if not self.on:
            return
        now, was = os.times(), self.last
        self.last = now
        print(f"verify-timing {stage} wall={now.elapsed - was.elapsed:.2f} "
              f"cpu={now.user + now.system - was.user - was.system:.2f} "
              f"workers_cpu={now.children_user + now.children_system - was.children_user - was.children_system:.2f}"
              f"{_memory()}", file=sys.stderr)


def _memory() -> str:
    """`` rss_mb=R peak_mb=P`` of this process (Linux's /proc), else nothing."""
    try:
        with open("/proc/self/status") as f:
            got = {k: int(v.split()[0]) / 1024 for k, _, v in (line.partition(":") for line in f)
                   if k in ("VmRSS", "VmHWM")}
        return f" rss_mb={got['VmRSS']:.0f} peak_mb={got['VmHWM']:.0f}"
    except (OSError, KeyError, ValueError):
        return ""


def _after(ix: Index, report: VerifyReport) -> None:
    """What the report states beside the steps: each experiment's registration digest (for
    the auditor to compare), and the entries no step proves (``site/``: pages rendered
    from the evidence by a builder the verifier does not run)."""
    from ._journal import registration_of, repinned, unshown_stops

    if ix.manifest.exploratory:  # no registration to show: a note says what it is instead
        from ._exploratory import after

        after(ix, report)
    else:
        for exp in ix.manifest.experiments:
            report.registrations[exp] = registration_of(ix, exp)
            report.notes.extend(repinned(ix, exp))
            report.notes.extend(unshown_stops(ix, exp))
    site = ix.names_under("site/")
    if site:
        report.unproven.append(("site/", len(site), "the pages are not recomputed: their tables and "
                                "numbers are NOT verified; read the numbers from summary.json"))
