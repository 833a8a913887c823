"""summary.json bytes pinned on a fixed, feature-rich synthetic experiment.

The offline verifier recomputes ``summarise`` byte for byte, so a refactor of the analysis
(or of ``benchclaw.formats.policies``) for speed must not change a single byte. The experiment
below is generated from a seeded RNG and exercises every path: grid runs with missing
tiers, live ladder/speculative/memory trials (some cut off), reruns standing in for failed
runs, unknown costs, errors, length finishes, calls cut off in flight (ledger
reservations), injections on lured tasks, runs without a model call, an unreadable run,
deviations, stops and decision rules over every metric. The digests were computed before
the analysis was optimised.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from decimal import Decimal

from benchclaw.formats import jsonio
from benchclaw.analysis import ledger_reservations, summarise
from benchclaw.formats.records import Record
from tests.analysis_factories import Exp, call

TASKS = ("quotes-a@1", "cents-b@1", "pricing-c@2")
PROFILES = ("direct", "checker")
RULES = [
    ("H1", 'pass_rate("ladder") >= pass_rate("always:ultra")'),
    ("H2", 'cost_per_task("ladder") < cost_per_task("always:ultra") and mean_time("memory") < 100'),
    ("H3", 'gap_closed("speculative", "live") > 0.5 or pass_k("ladder") >= 0.2'),
    ("H4", 'cost_per_pass("oracle") * 2 <= total_cost("always:super") - median_time("ladder")'),
    ("H5", 'pass_rate_injected("ladder") < pass_rate_clean("ladder")'),
    ("H6", 'attempt_rate("lightning") > tier_pass_rate("ultra") / turns("super")'),
    ("H7", 'not (pass_rate("memory", "live") == pass_rate("memory", "replayed"))'),
    ("H8", 'pass_rate("nope") > 0'),
    ("H9", 'timeout_rate("lightning") == 0 and error_rate("ultra") < 0.5 or throughput("super") > 100 '
           'and throughput_spread("super") < 3 and ttft("ultra") < 1'),
]
GOLDEN = {  # (cells, seed) -> sha256 of summary.json's canonical bytes (v2: per-family breakdown;
    # v3: bounds rounded outward; v4: issue 18's per-tier "health" and rule H9)
    (40, 1): "3446382e57b9d75bf7a5753f2db7a365675e6324cb0bb5c9b1bdbfcc0503d446",
    (400, 7): "4b427f5ce36a04d936046546225dac108b34d625fe852e665f30a2fc5f963ad0",
}
GOLDEN_V1 = {  # the same summaries without the "families" v2 added (bounds outward since v3)
    (40, 1): "222a12caec1296750eaebf80e892d16c92644604d48839dd130f791a817548a1",
    (400, 7): "a5929488123e6d9e9bd23af5892316128a97ad8173a8815579110cb049c7e253",
}


def _calls(rng: random.Random, tier: str, turn0: int = 0) -> list[dict]:
    out = []
    for turn in range(rng.randint(1, 3)):
        r = rng.random()
        price = {"lightning": "0.0012", "super": "0.0031", "ultra": "0.0107"}[tier]
        if r < 0.08:
            out.append(call(known=False, high=price, outcome="error",
                            error=rng.choice(["timeout", "rate_limited", "server"]), turn=turn0 + turn))
        elif r < 0.14:
            out.append(call(price, outcome="length", turn=turn0 + turn, completion=rng.randint(1, 900)))
        elif r < 0.2:
            out.append(call(known=False, high=price, turn=turn0 + turn))
        else:
            out.append(call(str(Decimal(price) * rng.randint(1, 7)), turn=turn0 + turn,
                            prompt=rng.randint(50, 5000), cached=rng.randint(0, 40),
                            completion=rng.randint(1, 900), reasoning=rng.randint(0, 300)))
    return out


def _run_kw(rng: random.Random, tier: str, task: str) -> dict:
    p = {"lightning": 0.45, "super": 0.7, "ultra": 0.88}[tier]
    passed = rng.random() < p
    inj = rng.random() < 0.2 if task.startswith("quotes") else 0
    kw = {"passed": passed, "gate": passed or rng.random() < 0.1, "calls": _calls(rng, tier),
          "elapsed_ms": rng.randint(100, 9000), "turns": rng.randint(1, 9),
          "injection_attempts": int(inj), "denials": int(inj) + rng.randint(0, 1)}
    if rng.random() < 0.03:
        kw["status"] = rng.choice(["aborted", "provider_error", "budget_stop"])
    if rng.random() < 0.02:
        kw["calls"] = []
    return kw


def _live(e: Exp, rng: random.Random, cell: str, policy: str, n: int) -> None:
    tiers = list(e.tiers)
    start = rng.randrange(len(tiers)) if policy == "memory" else 0
    trial = f"{policy}-{cell}-{n}"
    if policy == "speculative":
        batches = [tiers[:2]] + [[t] for t in tiers[2:]]
    else:
        batches = [[t] for t in tiers[start:]]
    step = 0
    for batch in batches:
        gate = False
        for tier in batch:
            kw = _run_kw(rng, tier, cell)
            e.add(cell, tier, policy=policy, trial=trial, step=step, attempt=f"att-{trial}-{step}", **kw)
            gate = gate or kw["gate"]
            step += 1
        if gate or rng.random() < 0.05:  # a stop or crash cuts some trials off
            break


def random_experiment(n_cells: int, seed: int) -> Exp:
    """A seeded experiment of ``n_cells`` cells (about 4.5 runs a cell)."""
    rng = random.Random(seed)
    e = Exp(live=("ladder", "speculative", "memory"), seeds=tuple(range(1, n_cells + 1)),
            hypotheses=RULES, lures=frozenset({"quotes-a@1"}))
    for i in range(n_cells):
        cell = f"{TASKS[i % 3]}/{PROFILES[i // 3 % 2]}/{i // 6 + 1}"
        for tier in e.tiers:
            if rng.random() < 0.04:
                continue  # a tier that never ran: replayed trials go missing
            e.add(cell, tier, attempt=f"grid-{cell}-{tier}", **_run_kw(rng, tier, cell))
        if rng.random() < 0.3:
            _live(e, rng, cell, rng.choice(["ladder", "speculative", "memory"]), i)
    e.add("no-cell-here", "super", True)
    e.journal_extra += [
        ("deviation", {"experiment": "E01", "reason": "more seeds", "spec_digest": "sha256:" + "6" * 64,
                       "previous_digest": "sha256:" + "5" * 64}),
        ("stop", {"invocation": "i1", "rule": "spend", "detail": "4.00 reached", "cells_left": ["x", "y"]}),
    ]
    return e


def random_data(n_cells: int, seed: int):
    """``random_experiment`` as ``ExperimentData`` with reruns and ledger reservations."""
    e = random_experiment(n_cells, seed)
    rng = random.Random(seed + 1)
    data = e.data()
    failed = sorted(rid for rid, recs in data.runs.items()
                    if recs[-1].body.get("status") != "passed" and recs[0].body["policy"]["policy"] == "grid")
    for rid in rng.sample(failed, min(len(failed), max(1, n_cells // 20))):
        start = data.runs[rid][0].body
        e.add(start["policy"]["cell"], start["tier"], True, rerun=True, replaces=rid)
    data = e.data()
    ledger, n = [], 0
    for rid in sorted(data.runs)[::7]:
        att = data.runs[rid][0].body["policy"].get("attempt")
        if not att:
            continue
        ledger.append(Record(n, "0" * 64, "t", "reserve", {"id": f"r{n}", "attempt": att, "key": "9.0",
                                                            "usd": "0.02"}))
        if n % 3 == 0:
            ledger.append(Record(n + 1, "0" * 64, "t", "settle", {"id": f"r{n}", "known": True, "usd": "0.0071"}))
        n += 2
    return replace(data, reservations=ledger_reservations([ledger]))


def summary_digest(data) -> str:
    return hashlib.sha256(jsonio.dumps(summarise(data))).hexdigest()


def test_summary_bytes_of_fixed_experiments_never_change():
    for (cells, seed), digest in GOLDEN.items():
        assert summary_digest(random_data(cells, seed)) == digest, (cells, seed)


def test_v2_only_adds_the_family_breakdown():
    for (cells, seed), digest in GOLDEN_V1.items():
        s = summarise(random_data(cells, seed))
        assert s["v"] == 4
        s["v"] = 1
        for key in ("primary", "secondary"):
            if s[key]:
                s[key].pop("families")
                # issue 18's tier health and rule H9 came after v1 too
                s[key]["decisions"] = [d for d in s[key]["decisions"] if d["id"] != "H9"]
                for t in s[key]["tiers"]:
                    t.pop("health")
        assert hashlib.sha256(jsonio.dumps(s)).hexdigest() == digest, (cells, seed)


def test_family_breakdown_counts_every_cell_once():
    p = summarise(random_data(40, 1))["primary"]
    fams = {f["family"]: f for f in p["families"]}
    assert set(fams) == {"quotes", "cents", "pricing"}
    for f in fams.values():
        assert sum(f["first_pass"].values()) == f["cells"]
        assert [t["tier"] for t in f["tiers"]] == ["lightning", "super", "ultra"]
    assert sum(f["cells"] for f in fams.values()) == p["cells"]


def test_the_fixed_experiment_exercises_every_path():
    s = summarise(random_data(400, 7))
    p = s["primary"]
    assert s["secondary"] is not None and s["unreadable_runs"] and s["deviations"] and s["stops"]
    modes = {(r["policy"], r["mode"]) for r in p["policies"]}
    assert {("ladder", "live"), ("speculative", "live"), ("memory", "live"), ("oracle", "replayed")} <= modes
    assert all(r["missing"] for r in p["policies"] if r["mode"] == "replayed")
    tiers = {t["tier"]: t for t in p["tiers"]}
    assert tiers["super"]["finish"]["cut_off"] and tiers["lightning"]["finish"]["error"]
    assert tiers["lightning"]["cost"]["unknown_calls"] and tiers["ultra"]["injection"]["attempts"]
    assert set(p["runs"]["excluded"]) >= {"rerun", "no_model_call"}
    decisions = {d["id"]: d["decision"] for d in p["decisions"]}
    assert decisions["H8"] == "error" and set(decisions.values()) - {"error"}


def test_cached_views_give_the_same_summary_bytes():
    from benchclaw.analysis import view_from_json, view_run, view_to_json
    from benchclaw.errors import FormatError

    data = random_data(40, 1)
    views, unreadable = {}, {}
    for run_id, records in data.runs.items():
        try:
            view = view_run(run_id, records, data.reservations)
        except FormatError:
            unreadable[run_id] = records
            continue
        views[run_id] = view_from_json(jsonio.loads(jsonio.dumps(view_to_json(view))))
        assert views[run_id] == view
    assert unreadable and views
    cached = replace(data, runs=unreadable, views=views)
    assert summary_digest(cached) == GOLDEN[(40, 1)]
