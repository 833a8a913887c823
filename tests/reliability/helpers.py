"""Small factories shared by the reliability suites: a spec in a temp folder, a grid run
through the real runner, the derived products (report, site, bundle, verdict), and
readers over the evidence that recompute what each suite asserts independently of the
part under test (ledger reconciliation is summed here from the call records, not taken
from the verifier).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable

from benchclaw.experiments import prereg
from benchclaw.experiments.ledger import read_ledger
from benchclaw.experiments.runner import GridResult, run_experiment
from benchclaw.evidence.store import Store

FIGURES_ENV = "BENCHCLAW_RELIABILITY_FIGURES"

SPEC = """v = 1
id = "{id}"
title = "{title}"
[grid]
tasks = {tasks}
profiles = {profiles}
seeds = {seeds}
tiers = {tiers}
catalog = "{catalog}"
all_tiers = true
[settings]
{settings}
[budget]
usd = "{usd}"
[policies]
live = {live}
{extra}
"""


def toml_list(items: Iterable[Any]) -> str:
    return json.dumps(list(items))


def write_spec(folder: Path, exp_id: str, *, tasks: Iterable[str], tiers: Iterable[str], catalog: str = "sim",
               profiles: Iterable[str] = ("direct", "checker"), seeds: Iterable[int] = (1,),
               settings: dict | None = None, usd: str = "5.00", live: Iterable[str] = (), extra: str = "",
               title: str = "reliability suite") -> Path:
    """Write ``<folder>/<exp_id>.toml`` and return its path. ``settings`` values are TOML
    literals already (``{"seconds": 5, "temperature": '"0"'}``)."""
    folder.mkdir(parents=True, exist_ok=True)
    body = "\n".join(f"{k} = {v}" for k, v in (settings or {}).items())
    text = SPEC.format(id=exp_id, title=title, tasks=toml_list(tasks), profiles=toml_list(profiles),
                       seeds=toml_list(seeds), tiers=toml_list(tiers), catalog=catalog, settings=body,
                       usd=usd, live=toml_list(live), extra=extra)
    path = folder / f"{exp_id}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def run_grid(store: Store, exp_id: str, *, spec_path: Path | None = None, **kw) -> GridResult:
    """One invocation of the real grid runner, in a fresh event loop, signals untouched."""
    return asyncio.run(run_experiment(store, exp_id, spec_path=spec_path, handle_signals=False, **kw))


def register_and_run(store: Store, spec_path: Path, exp_id: str, **kw) -> GridResult:
    prereg(store, spec_path, backends=kw.get("backends"))  # pins what the run will resolve
    return run_grid(store, exp_id, spec_path=spec_path, **kw)


# ------------------------------------------------------------------------ the evidence

def experiment_runs(store: Store, exp_id: str) -> list:
    """Every sealed run whose run.start names ``exp_id``, sorted by run id."""
    out = [r for r in store.iter_runs() if (r.start.get("policy") or {}).get("experiment") == exp_id]
    return sorted(out, key=lambda r: r.run_id)


def bodies(run, kind: str) -> list[dict]:
    return [rec.body for rec in run.records if rec.kind == kind]


def journal(store: Store, exp_id: str, kind: str) -> list[dict]:
    return [e.body for e in store.read_journal(exp_id) if e.kind == kind]


def ledger_ids(store: Store, exp_id: str) -> list[str]:
    return [b["ledger"] for b in journal(store, exp_id, "grid.start")]


@dataclass
class CallTotals:
    known_calls: int = 0
    known_usd: Decimal = Decimal(0)
    unknown_calls: int = 0
    unknown_usd: Decimal = Decimal(0)

    @property
    def high(self) -> Decimal:
        return self.known_usd + self.unknown_usd


def call_totals(runs: Iterable) -> dict[str, CallTotals]:
    """Per ledger id: the recorded calls' exact costs and upper bounds, summed here."""
    out: dict[str, CallTotals] = {}
    for run in runs:
        t = out.setdefault(run.start.get("ledger"), CallTotals())
        for c in bodies(run, "call"):
            cost = c["cost"]
            if cost["known"]:
                assert cost["low"] == cost["high"], f"run {run.run_id}: a known cost with two bounds"
                t.known_calls += 1
                t.known_usd += Decimal(cost["low"])
            else:
                # low is 0, or a streamed call's floor (FORMAT §6); the ledger holds the high
                assert 0 <= Decimal(cost["low"]) <= Decimal(cost["high"]) and Decimal(cost["high"]) > 0, \
                    f"run {run.run_id}: an unknown cost without an upper bound: {cost}"
                t.unknown_calls += 1
                t.unknown_usd += Decimal(cost["high"])
    return out


def assert_ledgers_reconcile(store: Store, exp_id: str) -> int:
    """Each ledger of the experiment equals its runs' call records exactly: settled (known)
    calls and USD, unknown calls at their upper bound, nothing left open. Returns the
    number of calls reconciled."""
    totals = call_totals(experiment_runs(store, exp_id))
    n = 0
    for lid in ledger_ids(store, exp_id):
        st = read_ledger(store, lid)
        t = totals.get(lid, CallTotals())
        assert st.closed and not st.open, f"ledger {lid}: left open ({len(st.open)} reservations)"
        assert (st.settled_calls, st.settled_usd) == (t.known_calls, t.known_usd), \
            f"ledger {lid}: settled {st.settled_calls} calls ${st.settled_usd}, records {t.known_calls} ${t.known_usd}"
        assert (st.unknown_calls, st.unknown_usd) == (t.unknown_calls, t.unknown_usd), \
            f"ledger {lid}: unknown {st.unknown_calls} calls ${st.unknown_usd}, records {t.unknown_calls} ${t.unknown_usd}"
        n += t.known_calls + t.unknown_calls
    return n


# ------------------------------------------------------------------------ derived products

@dataclass
class Products:
    summary: dict
    terminal: str
    markdown: str
    site: Path
    bundle: Path
    verdict: Any
    files: list[Path] = field(default_factory=list)


def terminal_row(terminal: str, section: str, label: str) -> str:
    """One row of a terminal table, whole: the report splits a table wider than 100 columns
    into blocks that each repeat the row's label (a cell too wide wraps onto lines with a
    blank label), so the row is every line of ``label`` in the first ``== section ==``,
    with its continuation lines, joined."""
    part = terminal.split(f"== {section} ==", 1)[1].split("\n== ", 1)[0]
    out, inside = [], False
    for line in part.splitlines():
        if line.startswith(label + " "):
            out.append(line)
            inside = True
        elif inside and line.startswith(" ") and line.strip():
            out.append(line)
        else:
            inside = False
    return "  ".join(out)


def verdict_text(report) -> str:
    if report.fatal is not None:
        return f"unreadable: {report.fatal}"
    return "; ".join(f"step {s.name}: {e}" for s, e in report.failures()) or "ok"


def build_products(store: Store, exp_id: str, out: Path, *, include_site: bool = True) -> Products:
    """Report (summary, terminal and Markdown text), site, bundle (with the site) and the
    verifier's verdict on it, the way a user makes them after a grid."""
    from benchclaw.analysis import render_markdown, render_terminal
    from benchclaw.bundle import export_bundle
    from benchclaw.analysis.report import build_summary
    from benchclaw.site import build_site
    from benchclaw.verify import verify_bundle

    summary = build_summary(store, exp_id)
    site = out / "site"
    build_site(store.root, site)
    bundle = out / f"{exp_id}.zip"
    export_bundle(store.root, exp_id, bundle, include_site=site if include_site else None)
    verdict = verify_bundle(bundle)
    return Products(summary, render_terminal(summary), render_markdown(summary), site, bundle, verdict)


def tier_row(summary: dict, tier: str, analysis: str = "primary") -> dict:
    return next(t for t in summary[analysis]["tiers"] if t["tier"] == tier)


def record_figures(suite: str, **figures: Any) -> None:
    """Append a suite's figures (for docs/RELIABILITY.md) when the env var names a file."""
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"suite": suite, **figures}, default=str, sort_keys=True) + "\n")


def patched_profiles(**changes: dict):
    """The shipped simulator profiles with some profiles' fields replaced:
    ``patched_profiles(super={"reasoning_only": 1.0})``."""
    from benchclaw.sim.profiles import Profiles, load_profiles

    base = load_profiles()
    by_name = dict(base.by_name)
    for name, fields in changes.items():
        by_name[name] = replace(by_name[name], **fields)
    return Profiles(by_name=by_name, effort=base.effort, path=base.path)
