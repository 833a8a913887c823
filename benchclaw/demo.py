"""``benchclaw demo``: the whole pipeline on the built-in simulator, in ordered stages.

Why it is built this way: the demo is the README's main job, the one command a newcomer
runs. It uses only what ships in the package (the built-in tasks, the ``sim`` catalog, a
demo experiment spec) so it needs no key and no network, and it goes through the same
public entry points a user would (prereg, run, report, site, bundle, verify), so it
exercises the real pipeline rather than a special path. Each stage is one small function
in ``STAGES``, in the order a person would describe them; a stage whose module is not
installed is skipped with a note, never silently. Numbers are simulated and every stage
that shows numbers says so.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from .errors import CheckFailed, InputError
from .paths import make_output_dir, package_data_dir, refuse_evidence_overlap
from .evidence.store import Store

__all__ = ["run_demo", "DemoResult", "STAGES", "DEMO_ID", "DEMO_2K_ID", "DEMO_EXPERIMENTS",
           "DEMO_LATENCY_SCALE"]

DEMO_ID = "DEMO"
# A second, smaller experiment at half the output-token budget, run first (as the seed's E01
# at 2,048 tokens came before E02 at 8,192), so the demo can show claims moving across
# experiments. (experiment id, shipped spec file), in the order they run.
DEMO_2K_ID = "DEMO-2K"
DEMO_EXPERIMENTS = ((DEMO_2K_ID, "demo-2k.toml"), (DEMO_ID, "demo.toml"))
# The simulator's latencies (a few hundred ms per call) scaled down so the demo takes
# seconds, not minutes, on 2 cores; set BENCHCLAW_SIM_LATENCY_SCALE to override.
DEMO_LATENCY_SCALE = 0.01
LATENCY_ENV = "BENCHCLAW_SIM_LATENCY_SCALE"  # as benchclaw.sim.provider reads it
SIMULATED = ("SIMULATED: every number below comes from BenchClaw's built-in simulator.\nIt shows how "
             "the tool works; it is evidence about no real model.")


class _Missing(Exception):
    """A stage's module is not installed (yet): skip the stage with a note."""


@dataclass
class DemoResult:
    workdir: Path
    runs: Path
    site: Path
    bundle: Path
    spec: Path
    invocation: str | None = None
    status: str | None = None
    summary: dict | None = None
    comparison: dict | None = None
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class _Ctx:
    result: DemoResult
    say: Callable[[str], None]       # data for people, to stdout
    note: Callable[[str], None]      # status, to stderr
    stream: TextIO | None
    concurrency: int | None
    latency_scale: float | None


# ------------------------------------------------------------------------------ stages

def _spec_path(r: "DemoResult", exp: str) -> Path:
    return r.spec.parent / f"{exp}.toml"


def stage_prepare(c: _Ctx) -> None:
    """Copy the shipped demo specs to <workdir>/experiments/DEMO-2K.toml and DEMO.toml."""
    r = c.result
    for exp, name in DEMO_EXPERIMENTS:
        shipped = (package_data_dir() / "experiments" / name).read_bytes()
        path = _spec_path(r, exp)
        if path.exists() and path.read_bytes() != shipped:
            raise InputError(f"{path}: exists and differs from the shipped demo spec; run the demo in an "
                             "empty directory (--workdir DIR)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(shipped)


def stage_register(c: _Ctx) -> None:
    """Pre-register them: each digest goes in its journal before any call."""
    from .experiments import prereg

    for exp, _ in DEMO_EXPERIMENTS:
        reg = prereg(Store(c.result.runs), _spec_path(c.result, exp))
        c.note(f"registered {reg.experiment}: {reg.spec_digest}")


def stage_run(c: _Ctx) -> None:
    """Every tier on every cell, plus the live ladder, in each experiment (resumes if run again)."""
    from .experiments.runner import run_experiment

    r = c.result
    if c.latency_scale is not None:
        sim = {"latency_scale": c.latency_scale}
    elif os.environ.get(LATENCY_ENV) is not None:
        sim = {}  # the simulator reads the variable itself
    else:
        sim = {"latency_scale": DEMO_LATENCY_SCALE}
    for exp, _ in DEMO_EXPERIMENTS:
        res = asyncio.run(run_experiment(Store(r.runs), exp, spec_path=_spec_path(r, exp),
                                         concurrency=c.concurrency, stream=c.stream, sim_options=sim))
        r.invocation, r.status = res.invocation, res.status
        for line in res.summary_lines():
            c.note(line)
        if res.status != "complete":
            raise CheckFailed(f"the demo grid {exp} ended {res.status}: {res.stop_detail}")


def stage_report(c: _Ctx) -> None:
    """The policy table: live and replayed policies, pass rates, cost bounds, decisions."""
    try:
        from .analysis import render_terminal
        from .analysis.report import build_summary
    except ImportError as e:
        raise _Missing(f"the analysis ({e.name}) is not available in this build") from None
    summary = build_summary(Store(c.result.runs), DEMO_ID)
    c.result.summary = summary
    c.say(SIMULATED)
    c.say(render_terminal(summary))


def stage_compare(c: _Ctx) -> None:
    """The two experiments side by side: how the ladder's claims moved with the budget."""
    from .analysis import render_compare_terminal
    from .analysis.report import build_comparison

    ids = [exp for exp, _ in DEMO_EXPERIMENTS]
    c.result.comparison = build_comparison(Store(c.result.runs), ids)
    c.say(render_compare_terminal(c.result.comparison))


def stage_site(c: _Ctx) -> None:
    """The static replay site."""
    try:
        from .site import build_site
    except ImportError as e:
        raise _Missing(f"the site builder ({e.name}) is not available in this build") from None
    build_site(c.result.runs, c.result.site)


def stage_bundle(c: _Ctx) -> None:
    """A reproducible evidence bundle."""
    try:
        from .bundle import export_bundle
    except ImportError as e:
        raise _Missing(f"the bundle exporter ({e.name}) is not available in this build") from None
    site = c.result.site if c.result.site.is_dir() else None
    export_bundle(c.result.runs, DEMO_ID, c.result.bundle, include_site=site)


def stage_verify(c: _Ctx) -> None:
    """Verify the bundle offline, as an auditor would."""
    try:
        from .verify import verify_bundle
    except ImportError as e:
        raise _Missing(f"the verifier ({e.name}) is not available in this build") from None
    if not c.result.bundle.is_file():
        raise _Missing("no bundle was written to verify")
    report = verify_bundle(c.result.bundle)
    pending = _pending_steps(report)
    if report.exit_code != 0 and pending:
        raise _Missing(f"verifier steps {', '.join(pending)} are not implemented in this build")
    if report.exit_code != 0:
        raise CheckFailed(f"{c.result.bundle}: the verifier rejected the demo bundle: "
                          f"{_first_failure(report)}")
    c.note(f"verified {c.result.bundle.name}: benchclaw-verify exit 0")


STAGES: list[tuple[str, Callable[[_Ctx], None]]] = [
    ("prepare", stage_prepare),
    ("register", stage_register),
    ("run", stage_run),
    ("report", stage_report),
    ("compare", stage_compare),
    ("site", stage_site),
    ("bundle", stage_bundle),
    ("verify", stage_verify),
]


# ------------------------------------------------------------------------------ entry point

def run_demo(workdir: Path | str = ".", *, say: Callable[[str], None], note: Callable[[str], None],
             stream: TextIO | None = None, concurrency: int | None = None,
             latency_scale: float | None = None) -> DemoResult:
    """Run every stage in order in ``workdir`` (runs/, site/, bundle.zip, experiments/).

    ``say`` receives data for people (the policy table, the comparison), ``note`` status lines; ``stream``
    the progress bar. Raises the first stage's BenchClawError (CheckFailed when the grid
    did not complete or the bundle does not verify); a stage whose module is missing is
    skipped with a note.
    """
    wd = Path(workdir)
    refuse_evidence_overlap(wd, "demo", may_contain=True)  # it writes runs/ and experiments/ of its own
    make_output_dir(wd, "demo")
    result = DemoResult(workdir=wd, runs=wd / "runs", site=wd / "site", bundle=wd / "bundle.zip",
                        spec=wd / "experiments" / f"{DEMO_ID}.toml")
    c = _Ctx(result, say, note, stream, concurrency, latency_scale)
    t0 = time.monotonic()
    note(SIMULATED)
    for name, stage in STAGES:
        t_stage = time.monotonic()
        try:
            stage(c)
            result.done.append(name)
            result.timings[name] = time.monotonic() - t_stage
        except _Missing as e:
            result.skipped.append(name)
            note(f"note: stage {name!r} skipped: {e}")
    result.seconds = time.monotonic() - t0
    for line in where_to_look(result):
        say(line)
    return result


def where_to_look(r: DemoResult) -> list[str]:
    rows = [(f"{r.spec.parent}/", "the pre-registered experiment specs (DEMO-2K, then DEMO)"),
            (f"{r.runs}/", "the evidence: hash-chained run logs, journal, ledger")]
    if "site" in r.done:
        rows.append((f"{r.site}/index.html", f"the replay site; open it from disk or `benchclaw serve {r.site}`"))
        if (r.site / "compare.html").is_file():
            rows.append((f"{r.site}/compare.html", "the two experiments side by side, and how each claim moved"))
    if "bundle" in r.done:
        rows.append((f"{r.bundle}", f"the evidence bundle; re-check it with `benchclaw-verify {r.bundle}`"))
    width = max(len(a) for a, _ in rows)
    lines = ["", f"Done in {r.seconds:.1f} s (simulated numbers). Where to look:"]
    lines += [f"  {a.ljust(width)}  {b}" for a, b in rows]
    if r.invocation:
        lines.append(f"  the budget ledger: `benchclaw ledger show {r.invocation} --runs {r.runs}`")
    if r.skipped:
        lines.append(f"  (skipped, not in this build: {', '.join(r.skipped)})")
    return lines


_PENDING = "not verified by this build"  # the verifier's wording for a step not written yet


def _pending_steps(report) -> list[str]:
    """Names of failing steps when *every* failure is a step this verifier build lacks
    (temporary, while the verifier is being completed); otherwise []."""
    failing = [s for s in getattr(report, "sections", []) if s.failure_count]
    if getattr(report, "fatal", None) is not None or not failing:
        return []
    if all(s.failures and all(_PENDING in str(f) for f in s.failures) for s in failing):
        return [s.name for s in failing]
    return []


def _first_failure(report) -> str:
    """The verifier's first complaint, for the error message."""
    if getattr(report, "fatal", None) is not None:
        return str(report.fatal)
    for sec in getattr(report, "sections", []):
        if sec.failures:
            return f"step {sec.number} ({sec.name}): {sec.failures[0]}"
        if not sec.ran:
            return f"step {sec.number} ({sec.name}) did not run"
    return "see benchclaw-verify output"
