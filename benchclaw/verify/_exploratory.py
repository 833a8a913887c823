"""Steps 5-8 of an exploratory bundle: a studio journal, its runs and its two kinds of ledger.

A bundle whose manifest says ``exploratory: true`` (docs/FORMAT.md "Bundles", exploratory
form) claims no hypothesis, no decision and no registration, so it has no summary and no
pre-registration to recompute. Steps 1-4 (container, runs, checks by replay, costs against
the packed catalog) are every bundle's; the verifier runs these as steps 5-8 instead
(``SECTIONS`` names them in the report):

5. ledgers: every ledger replayed by the shared fold (no reservation could have passed its
   session's or its day's limit), each one of the journal's own ledgers, opened with the
   budgets of the ``studio.open`` in force; every session reservation paired with its day
   reservation (same ``run``, ``key``, ``attempt``; the n-th with the n-th) at the same
   bound and settled alike, or, unpaired (the day refused it, or the studio died before
   reserving it), released at zero for a call the run never made; every call of every run
   reserved and settled in its session's ledger and in a day ledger at its bound and its
   recorded cost; every reservation belongs to a run in the bundle.
6. label: the one journal is exploratory throughout (studio kinds only, each record says
   so, it opens with ``studio.open``); nothing of a pre-registered experiment is in the
   bundle (no summary, spec or other journal; no run names an experiment); there is no
   registration, so ``--registered`` cannot be satisfied.
7. order: times well formed and never backwards in a file; the journal's first
   ``studio.open`` precedes every ledger record and every run; each run's job and
   ``studio.run.start`` precede its ``run.start``.
8. complete: the journal names every run and the bundle holds every run it names, with the
   same facts; every started run ended; each run ran its job's task, profile, seed and
   policy; a job's runs are its steps in order, and a job that ended passed or failed ran
   what its policy asked and ended as the policy's outcome says; no session started more
   runs than its budget allowed.

Kept apart from the experiment steps, and pure like them: step 5 (``_exploratory_ledgers``) reads the ledgers with
``benchclaw.formats.ledger`` through the experiment step 5's own replay, never the studio's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BenchClawError
from ..formats.money import parse_usd
from ..formats.policies import Attempt, PolicyError, outcome
from ._errors import VerificationError
from ._index import Index, Run
from ._journal import policy_sequence, run_times, journal_times, journal_of
from ._ledgers import PREFIX
from ._report import Section
from ._shape import BOOL, DICT, INT, LIST, STR, check_body, shape_of as _t
from .exploratory import STUDIO_KINDS, label_of

__all__ = ["SECTIONS", "after", "verify_label", "verify_order", "verify_complete"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("ledgers", "session and day ledgers replayed and paired; no limit passed; every call in both"),
    ("label", "one journal, exploratory throughout; nothing of a pre-registered experiment"),
    ("order", "the journal opened before every ledger record and run; times never go backwards"),
    ("complete", "every sealed run journaled and every journaled run present; run budgets held"),
)

_OPEN_FIELDS = {"exploratory": _t(BOOL), "session": _t(STR), "job": _t(STR)}
SHAPES: dict[str, dict] = {
    "studio.open": {"exploratory": _t(BOOL), "label": _t(STR), "catalog": _t(DICT),
                    "tiers": _t(LIST, items=STR), "tasks": _t(LIST, items=STR),
                    "policies": _t(LIST, items=STR), "profiles": _t(LIST, items=STR), "budgets": _t(DICT)},
    "studio.job": {**_OPEN_FIELDS, "task": _t(STR), "policy": _t(STR), "profile": _t(STR), "seed": _t(INT)},
    "studio.run.start": {**_OPEN_FIELDS, "step": _t(INT), "tier": _t(STR), "attempt": _t(STR)},
    "studio.run": {**_OPEN_FIELDS, "step": _t(INT), "tier": _t(STR), "attempt": _t(STR),
                   "run_id": _t(STR, optional=True), "status": _t(STR), "passed": _t(BOOL),
                   "gate_passed": _t(BOOL), "cost": _t(DICT)},
    "studio.job.end": {**_OPEN_FIELDS, "status": _t(STR), "tier": _t(STR, optional=True)},
}


def after(ix: Index, report) -> None:
    """What the report states beside the steps: the label, for the auditor to read."""
    report.exploratory = True
    for exp in ix.manifest.experiments:
        report.notes.append(f"{exp} is EXPLORATORY: runs from a studio, never pre-registered; this "
                            "bundle proves its runs, costs and budgets, and claims no hypothesis or decision")


# ------------------------------------------------------------------------------ shared reading

def studio_journal_id(ix: Index) -> str:
    return ix.manifest.experiments[0]


def _journal(ix: Index) -> list:
    """The journal (entry, line, record) in reader order, every body's studio shape checked
    (a few records: checked again by each step that reads it, rather than shared)."""
    journal = journal_of(ix, studio_journal_id(ix))
    for name, line, rec in journal:
        check_body(rec.kind, rec.body, SHAPES, name, line)
    return journal


def ledger_opens(ix: Index) -> list:
    return [rec for _, _, rec in _journal(ix) if rec.kind == "studio.open"]


def budgets_in_force(opens: list, at: str):
    """The last ``studio.open`` at or before ``at`` (None when the studio had not opened)."""
    found = None
    for rec in opens:
        if rec.at <= at:
            found = rec
    return found


@dataclass(frozen=True)
class _Budgets:
    session: dict   # ledger limits {usd, tokens, per_call_usd}
    day: dict
    runs: int


def studio_budgets(rec, where: str, line: int) -> _Budgets:
    """The ``budgets`` of a ``studio.open`` as ledger limits. Raises VerificationError."""
    bud = rec.body.get("budgets")
    try:
        s, d, per = bud["session"], bud["day"], bud["per_call_usd"]
        for part in (s, d):
            parse_usd(part["usd"], "budgets usd")
            if type(part["tokens"]) is not int:
                raise TypeError("tokens is not an integer")
        parse_usd(per, "budgets per_call_usd")
        if type(s["runs"]) is not int:
            raise TypeError("session runs is not an integer")
    except (BenchClawError, KeyError, TypeError) as e:
        raise VerificationError(where, f"studio.open budgets are not {{session {{usd, tokens, runs}}, "
                                f"day {{usd, tokens}}, per_call_usd}} ({e})", line) from None
    return _Budgets({"usd": s["usd"], "tokens": s["tokens"], "per_call_usd": per},
                    {"usd": d["usd"], "tokens": d["tokens"], "per_call_usd": per}, s["runs"])


# ------------------------------------------------------------------------------ 6. label

def verify_label(ix: Index, runs, sec: Section) -> None:
    exps = ix.manifest.experiments
    if len(exps) != 1:
        raise VerificationError("manifest.json", f"an exploratory bundle holds one journal, the manifest lists {list(exps)}")
    exp = exps[0]
    journal = _journal(ix)
    for name, line, rec in journal:
        if sec.attempt(_labelled, name, line, rec):
            sec.count("records labelled")
    if journal and journal[0][2].kind != "studio.open":
        sec.fail(VerificationError(journal[0][0], f"the journal opens with {journal[0][2].kind}, not studio.open",
                                   journal[0][1]))
    if not journal:
        sec.fail(VerificationError(f"journals/{exp}/", "the exploratory journal is missing or empty"))
    for rec in ledger_opens(ix):
        if rec.body.get("label") != label_of(exp):
            sec.fail(VerificationError(f"journals/{exp}/", f"studio.open at {rec.at} has label "
                                       f"{rec.body.get('label')!r}, the journal is {exp}"))
    for name in ix.names:
        sec.attempt(_not_an_experiment_entry, exp, name)
    for run in runs.values():
        if sec.attempt(_run_labelled, exp, run):
            sec.count("runs labelled")
    if ix.registered is not None:
        sec.fail(VerificationError(f"journals/{exp}/", "you hold a registration digest, but this bundle is "
                                   "exploratory: it was never pre-registered, so it cannot be the experiment "
                                   "you registered"))


def _labelled(name: str, line: int, rec) -> None:
    if rec.kind not in STUDIO_KINDS:
        raise VerificationError(name, f"a {rec.kind} record in an exploratory journal (only studio records: "
                                "an exploratory journal registers nothing and decides nothing)", line)
    if rec.body.get("exploratory") is not True:
        raise VerificationError(name, f"{rec.kind} is not labelled exploratory", line)


def _not_an_experiment_entry(exp: str, name: str) -> None:
    if name == "summary.json" or name.startswith("experiments/"):
        raise VerificationError(name, "an exploratory bundle claims no summary, spec or decision")
    if name.startswith("journals/") and not name.startswith(f"journals/{exp}/"):
        raise VerificationError(name, f"another journal in the exploratory bundle of {exp}: exploratory runs "
                                "are never mixed with a pre-registered experiment")


def _run_labelled(exp: str, run: Run) -> None:
    pol = run.policy
    if pol.get("studio") != exp or pol.get("exploratory") is not True:
        raise VerificationError(run.path, f"run.start.policy says studio {pol.get('studio')!r}, exploratory "
                                f"{pol.get('exploratory')!r}: not a run of {exp}", 1)
    if "experiment" in pol or "spec_digest" in pol:
        raise VerificationError(run.path, "an exploratory run names an experiment or a spec in its policy", 1)


# ------------------------------------------------------------------------------ 7. order

def verify_order(ix: Index, runs, sec: Section) -> None:
    journal = _journal(ix)
    sec.attempt(journal_times, journal)
    for run in runs.values():
        sec.attempt(run_times, run)
    opens = ledger_opens(ix)
    if not opens:
        raise VerificationError(f"journals/{studio_journal_id(ix)}/", "the journal has no studio.open: nothing opened it")
    first = opens[0].at
    for name, records in sorted((n, v) for n, v in ix.ledgers.items()
                                if n.startswith(PREFIX) and not isinstance(v, VerificationError)):
        for i, rec in enumerate(records, 1):
            if rec.at <= first:
                sec.fail(VerificationError(name, f"{rec.kind} at {rec.at} precedes the studio journal's "
                                           f"opening at {first}", i))
                break
        else:
            sec.count("ledger records after opening", len(records))
    started = {rec.body.get("attempt"): rec for _, _, rec in journal if rec.kind == "studio.run.start"}
    jobs = {rec.body.get("job"): rec for _, _, rec in journal if rec.kind == "studio.job"}
    for run in runs.values():
        if sec.attempt(_run_after_its_start, run, first, started, jobs):
            sec.count("runs after opening")


def _run_after_its_start(run: Run, first: str, started: dict, jobs: dict) -> None:
    at = run.started_at
    if at <= first:
        raise VerificationError(run.path, f"run started at {at}, before the studio journal opened at {first}", 1)
    start = started.get(run.policy.get("attempt"))
    job = jobs.get(run.policy.get("job"))
    for what, rec in (("studio.run.start", start), ("studio.job", job)):
        if rec is not None and rec.at > at:
            raise VerificationError(run.path, f"run started at {at}, before its {what} at {rec.at}", 1)


# ------------------------------------------------------------------------------ 8. complete

_SAME = (("session", lambda r: r.policy.get("session")), ("job", lambda r: r.policy.get("job")),
         ("step", lambda r: r.policy.get("step")), ("attempt", lambda r: r.policy.get("attempt")),
         ("tier", lambda r: r.start.get("tier")), ("status", lambda r: r.end.get("status")),
         ("passed", lambda r: bool(r.end.get("passed"))), ("gate_passed", lambda r: bool(r.end.get("gate_passed"))),
         ("cost", lambda r: {"known": bool((r.end.get("cost") or {}).get("known", False)),
                             "low": (r.end.get("cost") or {}).get("low", "0"),
                             "high": (r.end.get("cost") or {}).get("high", "0")}))


def verify_complete(ix: Index, runs, sec: Section) -> None:
    journal = _journal(ix)
    exp = studio_journal_id(ix)
    named: set[str] = set()
    ended = {rec.body.get("attempt") for _, _, rec in journal if rec.kind == "studio.run"}
    for name, line, rec in journal:
        if rec.kind == "studio.run":
            sec.attempt(_named_run, runs, name, line, rec.body, named)
        elif rec.kind == "studio.run.start" and rec.body.get("attempt") not in ended:
            sec.fail(VerificationError(name, f"run of attempt {rec.body.get('attempt')} started and never "
                                       "ended (no studio.run)", line))
    for run in runs.values():
        if run.run_id not in named:
            sec.fail(VerificationError(run.path, f"a sealed run of {exp} that the journal does not name"))
    runs_journaled = {rec.body.get("attempt"): rec.body for _, _, rec in journal if rec.kind == "studio.run"}
    for name, line, rec in journal:
        if rec.kind == "studio.run.start":
            sec.attempt(_start_as_ended, name, line, rec.body, runs_journaled)
    jobs = {rec.body.get("job"): rec.body for _, _, rec in journal if rec.kind == "studio.job"}
    opens = ledger_opens(ix)
    for run in runs.values():
        sec.attempt(_ran_its_job, run, jobs)
        sec.attempt(_as_configured, run, jobs, opens)
    for name, line, rec in journal:
        if rec.kind == "studio.job.end" and sec.attempt(_job_follows, ix, runs, journal, name, line, rec, jobs):
            sec.count("jobs recomputed")
    sec.attempt(_run_budgets, ix, journal)
    sec.count("runs named", len(named))


def _named_run(runs, name: str, line: int, body: dict, named: set) -> None:
    run_id = body.get("run_id")
    if run_id is None:
        return  # nothing was written for it (FORMAT.md "Studio journal")
    if run_id not in runs and run_id not in runs.rejected:
        raise VerificationError(name, f"names run {run_id}, which the bundle lacks", line)
    named.add(run_id)
    run = runs.get(run_id)
    if run is None:
        return  # present but broken: step 2 reported it
    for key, get in _SAME:
        if body.get(key) != get(run):
            raise VerificationError(name, f"run {run_id[:12]}: the journal says {key}={body.get(key)!r}, "
                                    f"the run says {get(run)!r}", line)


def _start_as_ended(name: str, line: int, start: dict, ended: dict) -> None:
    """A ``studio.run.start`` says what its ``studio.run`` (same attempt) says."""
    end = ended.get(start.get("attempt"))
    if end is None:
        return  # never ended: reported by the caller's loop
    for key in ("session", "job", "step", "tier", "task", "profile"):
        if start.get(key) != end.get(key):
            raise VerificationError(name, f"studio.run.start of attempt {start.get('attempt')} says {key}="
                                    f"{start.get(key)!r}, its studio.run says {end.get(key)!r}", line)


def _as_configured(run: Run, jobs: dict, opens: list) -> None:
    """The run used what the studio offered when its job started (``studio.open`` in force):
    its catalog, one of its tiers, tasks and profiles, and a policy it allowed."""
    job = jobs.get(run.policy.get("job"))
    opened = budgets_in_force(opens, run.started_at)
    if job is None or opened is None:
        return  # reported by _ran_its_job and step 7
    o, st = opened.body, run.start
    task = st.get("task") or {}
    got = (("catalog", st.get("catalog"), [o.get("catalog")]), ("tier", st.get("tier"), o.get("tiers")),
           ("task", f"{task.get('id')}@{task.get('version')}", o.get("tasks")),
           ("profile", (st.get("profile") or {}).get("name"), o.get("profiles")),
           ("policy", job.get("policy"), o.get("policies")))
    for what, value, offered in got:
        if value not in offered:
            raise VerificationError(run.path, f"ran {what} {value!r}, which the studio did not offer "
                                    f"(studio.open at {opened.at})", 1)


def _ran_its_job(run: Run, jobs: dict) -> None:
    job = jobs.get(run.policy.get("job"))
    if job is None:
        raise VerificationError(run.path, f"its job {run.policy.get('job')!r} is not in the journal", 1)
    task, profile = run.start.get("task") or {}, (run.start.get("profile") or {}).get("name")
    got = {"session": run.policy.get("session"), "task": f"{task.get('id')}@{task.get('version')}",
           "policy": run.policy.get("policy"), "profile": profile, "seed": run.start.get("seed")}
    for key, value in got.items():
        if job.get(key) != value:
            raise VerificationError(run.path, f"ran {key} {value!r}, its job {job.get('job')} was for "
                                    f"{job.get(key)!r}", 1)


def _job_follows(ix: Index, runs, journal: list, name: str, line: int, rec, jobs: dict) -> None:
    """A job's runs are its steps 0, 1, ... in order; a job that ended ``passed`` or
    ``failed`` ran the tiers its policy asked for, and its status and tier are the policy's
    outcome over those runs (``benchclaw.formats.policies``, as a grid's live trials). A ``memory``
    job is not recomputed: its first tier came from the session's memory, which the journal
    does not record."""
    jid = rec.body.get("job")
    job = jobs.get(jid)
    if job is None:
        raise VerificationError(name, f"studio.job.end of job {jid}, which the journal never started", line)
    if rec.body.get("session") != job.get("session"):
        raise VerificationError(name, f"studio.job.end of job {jid} names session {rec.body.get('session')!r}, "
                                f"the job's is {job.get('session')!r}", line)
    mine = [r.body for _, _, r in journal if r.kind == "studio.run" and r.body.get("job") == jid]
    steps = [r.get("step") for r in mine]
    if steps != list(range(len(mine))):
        raise VerificationError(name, f"job {jid}'s runs are steps {steps}, not 0 to {len(mine) - 1} in order", line)
    status = rec.body.get("status")
    if status not in ("passed", "failed", "refused", "aborted"):
        raise VerificationError(name, f"job {jid} ended {status!r}, not passed, failed, refused or aborted", line)
    if status in ("refused", "aborted") and rec.body.get("tier") is not None:
        raise VerificationError(name, f"job {jid} ended {status} but names tier {rec.body.get('tier')!r} as "
                                "taken", line)
    ran = [runs.get(r.get("run_id")) for r in mine]
    if status not in ("passed", "failed") or job.get("policy") == "memory" or None in ran:
        return  # refused or aborted mid-way; or a run missing (reported above)
    opened = budgets_in_force(ledger_opens(ix), rec.at)
    tiers = list(opened.body.get("tiers") or []) if opened is not None else []
    try:
        attempts = _attempts(ran)
        policy_sequence({"policy": job.get("policy"), "memory_start": None}, tiers, attempts)
        out = outcome(str(job.get("policy")), tiers, attempts)
    except (PolicyError, BenchClawError) as e:
        raise VerificationError(name, f"job {jid}: {e}", line) from None
    want = ("passed" if out.passed else "failed", out.taken.tier if out.taken else None)
    if (status, rec.body.get("tier")) != want:
        raise VerificationError(name, f"job {jid} ended {status} with tier {rec.body.get('tier')!r}; its runs "
                                f"give {want[0]} with tier {want[1]!r}", line)


def _attempts(runs: list[Run]) -> list[Attempt]:
    """The runs as a policy sees them. Raises BenchClawError for a cost that does not read."""
    return [Attempt(r.start.get("tier"), bool(r.end.get("gate_passed")), bool(r.end.get("passed")),
                    parse_usd((r.end.get("cost") or {}).get("low", "0"), "cost.low"),
                    parse_usd((r.end.get("cost") or {}).get("high", "0"), "cost.high"),
                    int(r.end.get("elapsed_ms") or 0), r.run_id, int(r.policy.get("batch") or 0))
            for r in runs]


def _run_budgets(ix: Index, journal: list) -> None:
    """No session started more runs than the session run budget in force allowed."""
    opens = ledger_opens(ix)
    used: dict[str, int] = {}
    for name, line, rec in journal:
        if rec.kind != "studio.run.start":
            continue
        sid = rec.body.get("session")
        used[sid] = used.get(sid, 0) + 1
        opened = budgets_in_force(opens, rec.at)
        if opened is None:
            raise VerificationError(name, "a run started before the studio opened", line)
        limit = studio_budgets(opened, name, line).runs
        if used[sid] > limit:
            raise VerificationError(name, f"session {sid} started its run number {used[sid]}, past its budget "
                                    f"of {limit} runs", line)
