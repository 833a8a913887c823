"""The grid runner on a scripted agent: journal records, resume, interrupts, stopping rules,
concurrency caps, and live policies agreeing with their offline replay."""

import asyncio
from dataclasses import dataclass
from decimal import Decimal as D
from types import SimpleNamespace

import pytest

from benchclaw.experiments.grid import attempt_from_run
from benchclaw.experiments.executor import Backends
from benchclaw.evidence.check import check_store
from benchclaw.errors import BudgetError
from benchclaw.experiments import deviate, prereg
from benchclaw.experiments.ledger import read_ledger
from benchclaw.formats.policies import replay
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store

TIERS = ("lightning", "super", "ultra")
COST = {"lightning": D("0.001"), "super": D("0.003"), "ultra": D("0.008")}

SPEC = '''v = 1
id = "R1"
title = "runner test"
[grid]
tasks = ["alpha-*", "beta-*", "gamma-*"]
profiles = ["direct", "checker"]
seeds = [1, 2, 3]
tiers = ["lightning", "super", "ultra"]
catalog = "sim"
all_tiers = {all_tiers}
[settings]
concurrency = 4
{settings}
[budget]
usd = "{usd}"
per_call_usd = "0.05"
[policies]
live = {live}
{stopping}
'''


def script(task: str, tier: str, profile: str, seed: int) -> tuple[bool, bool]:
    """(gate_passed, passed) per cell and tier: a fixed, varied pattern."""
    if task.startswith("alpha"):
        return (True, True) if tier != "lightning" or seed % 2 else (False, False)
    if task.startswith("beta"):
        ok = tier == "ultra" or (tier == "super" and profile == "checker")
        return ok, ok
    if tier == "super":
        return True, False          # gate passes, a held-out check fails
    return (tier == "ultra" and seed != 3,) * 2


@dataclass
class FakeAgent:
    """Writes a minimal sealed run through the store and the ledger, like run_agent."""

    latency: float = 0.0
    on_cancel: str = "seal"          # "seal" like the real agent, or "leave" the file open
    status_override: str | None = None
    after_run: object = None
    in_flight: int = 0
    max_in_flight: int = 0
    tier_max: dict = None
    calls: int = 0

    def __post_init__(self):
        self.tier_max, self.tier_now = {}, {}

    async def __call__(self, *, store, task, tier, catalog, profile, seed, provider, limits, policy_context,
                       ledger, max_tokens, temperature, retries, on_open=None):
        w = store.open_run()
        if on_open is not None:
            on_open(w)
        w.append("run.start", {"task": {"id": task.id, "version": task.version}, "tier": tier.name,
                               "profile": {"name": profile.name}, "seed": seed, "policy": policy_context,
                               "ledger": ledger.id})
        self._enter(tier.name)
        try:
            try:
                res = ledger.reserve(run=w.path.stem, key="0.0", tokens=1000, usd=COST[tier.name] * 2)
            except BudgetError as e:
                return self._end(w, "budget_stop", str(e), False, False, D(0), 0)
            self.calls += 1
            await asyncio.sleep(self.latency)
            ledger.settle(res, tokens=500, usd=COST[tier.name])
            w.append("call", {"turn": 0, "cost": {"known": True, "low": str(COST[tier.name]),
                                                  "high": str(COST[tier.name])}})
            gate, passed = script(task.id, tier.name, profile.name, seed)
            status = self.status_override or ("passed" if passed else "failed")
            return self._end(w, status, "scripted", gate, passed, COST[tier.name], 1)
        except asyncio.CancelledError:
            if self.on_cancel == "seal":
                self._end(w, "aborted", "cancelled", False, False, D(0), 0)
            raise
        finally:
            self._leave(tier.name)

    def _enter(self, tier):
        self.in_flight += 1
        self.tier_now[tier] = self.tier_now.get(tier, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.tier_max[tier] = max(self.tier_max.get(tier, 0), self.tier_now[tier])

    def _leave(self, tier):
        self.in_flight -= 1
        self.tier_now[tier] -= 1

    def _end(self, w, status, reason, gate, passed, cost, calls):
        c = str(cost)
        w.append("run.end", {"status": status, "reason": reason, "gate_passed": gate, "passed": passed,
                             "calls": calls, "cost": {"known": True, "low": c, "high": c}, "elapsed_ms": 10})
        run_id = w.seal()
        if self.after_run:
            self.after_run(run_id)
        return SimpleNamespace(run_id=run_id, status=status, gate_passed=gate, passed=passed, cost_low=cost,
                               cost_high=cost, elapsed_ms=10, turns=1, calls=calls)


def fake_backends(agent):
    tasks = [SimpleNamespace(id=i, version=1, digest="sha256:" + "0" * 64) for i in ("alpha-one", "beta-two", "gamma-three")]
    tiers = {t: SimpleNamespace(name=t) for t in TIERS}
    catalog = SimpleNamespace(tier=lambda n: tiers[n], require_prices=lambda ts: None,
                              ref=lambda: {"name": "fake", "digest": "sha256:" + "1" * 64})
    return Backends(tasks=lambda: tasks, catalog=lambda ref: catalog, profile=lambda n: SimpleNamespace(name=n),
                    provider=lambda tier: None, run_agent=agent)


def setup(tmp_path, *, all_tiers=True, live='["ladder"]', usd="5", stopping="", settings=""):
    spec = tmp_path / "R1.toml"
    spec.write_text(SPEC.format(all_tiers=str(all_tiers).lower(), live=live, usd=usd, stopping=stopping,
                                settings=settings))
    store = Store(tmp_path / "runs", fsync=False)
    prereg(store, spec, backends=fake_backends(None))
    return store, spec


def run(store, agent, **kw):
    return asyncio.run(run_experiment(store, "R1", backends=fake_backends(agent), handle_signals=False, **kw))


def kinds(store):
    return [e.kind for e in store.read_journal("R1")]


def journal(store, kind):
    return [e.body for e in store.read_journal("R1") if e.kind == kind]


# ---------------------------------------------------------------------------------- tests

def test_complete_grid_writes_every_journal_record_and_a_consistent_ledger(tmp_path):
    store, _ = setup(tmp_path)
    res = run(store, FakeAgent())
    assert res.status == "complete"
    k = kinds(store)
    assert k[0] == "prereg" and k[1] == "grid.start" and k[-1] == "grid.end"
    grid_runs = [r for r in journal(store, "run") if r["policy"] == "grid"]
    assert len(grid_runs) == 18 * 3 and len(journal(store, "trial")) == 18
    assert all(r["called_model"] and r["rerun"] is False for r in journal(store, "run"))
    sealed = {r.run_id: r for r in store.iter_runs()}
    assert {r["run_id"] for r in journal(store, "run")} == set(sealed)
    start = sealed[grid_runs[0]["run_id"]].start["policy"]
    assert start["experiment"] == "R1" and start["spec_digest"].startswith("sha256:")
    st = read_ledger(store, res.ledger)
    assert st.closed and not st.open and st.unknown_calls == 0
    assert st.settled_usd == sum(COST[r["tier"]] for r in journal(store, "run"))
    assert check_store(store).ok


def test_second_invocation_skips_finished_cells(tmp_path):
    store, _ = setup(tmp_path)
    run(store, FakeAgent())
    agent = FakeAgent()
    res = run(store, agent)
    assert res.status == "complete" and agent.calls == 0 and res.skipped == 18 * 4
    assert kinds(store).count("grid.start") == 2


def test_live_policies_agree_with_their_offline_replay(tmp_path):
    store, _ = setup(tmp_path, live='["ladder", "speculative", "memory", "always:super"]')
    run(store, FakeAgent())
    runs = journal(store, "run")
    grid = {}
    for r in runs:
        if r["policy"] == "grid":
            grid.setdefault(r["cell"], {})[r["tier"]] = attempt_from_run(r)
    trials = journal(store, "trial")
    assert len(trials) == 18 * 4
    for t in trials:
        offline = replay(t["policy"], TIERS, grid[t["cell"]], memory_start=t["memory_start"])
        live_tiers = [next(r["tier"] for r in runs if r["run_id"] == rid) for rid in t["runs"]]
        assert live_tiers == [a.tier for a in offline.attempts], t
        assert t["passed"] == offline.passed and t["tier"] == offline.taken.tier
        assert D(t["cost"]["low"]) == offline.cost_low


def test_memory_starts_where_another_seed_last_passed(tmp_path):
    store, _ = setup(tmp_path, live='["memory"]', settings="")
    run(store, FakeAgent(), concurrency=1)
    runs = journal(store, "run")
    for t in journal(store, "trial"):
        group = t["cell"].rsplit("/", 1)[0]
        before = [r for r in runs if r["run_id"] in set(
            r2["run_id"] for r2 in runs[:runs.index(next(x for x in runs if x["trial"] == t["trial"]))])]
        passing = [r for r in before if r["passed"] and r["cell"] != t["cell"]
                   and r["cell"].rsplit("/", 1)[0] == group]
        assert t["memory_start"] == (passing[-1]["tier"] if passing else None)
        first = next(r for r in runs if r["run_id"] == t["runs"][0])
        assert first["tier"] == (t["memory_start"] or "lightning")


def test_concurrency_and_per_tier_caps_are_respected(tmp_path):
    store, _ = setup(tmp_path, live='["speculative"]', settings="[settings.tier_concurrency]\nultra = 1")
    agent = FakeAgent(latency=0.01)
    run(store, agent, concurrency=3)
    assert agent.max_in_flight == 3 and agent.tier_max["ultra"] == 1


def test_budget_refusal_stops_the_grid_and_says_so(tmp_path):
    store, _ = setup(tmp_path, usd="0.02")
    res = run(store, FakeAgent(), concurrency=1)
    assert res.status == "stopped" and res.stop_rule == "budget"
    stop = journal(store, "stop")[0]
    assert stop["rule"] == "budget" and stop["cells_left"]
    st = read_ledger(store, res.ledger)
    assert st.spent_usd <= D("0.02") and st.refused >= 1
    assert journal(store, "grid.end")[-1]["status"] == "stopped"


@pytest.mark.parametrize("stopping, rule, override", [
    ('[[stopping]]\nrule = "spend"\nusd = "0.01"', "spend", None),
    ('[[stopping]]\nrule = "provider_errors"\nconsecutive = 3', "provider_errors", "provider_error"),
])
def test_stopping_rules_fire_and_are_recorded(tmp_path, stopping, rule, override):
    store, _ = setup(tmp_path, stopping=stopping)
    res = run(store, FakeAgent(status_override=override), concurrency=1)
    assert res.stop_rule == rule and journal(store, "stop")[0]["rule"] == rule
    assert len(res.runs) < 18 * 3


@pytest.mark.parametrize("on_cancel", ["seal", "leave"])
def test_interrupt_seals_open_runs_and_resume_never_redoes_a_called_run(tmp_path, on_cancel):
    store, _ = setup(tmp_path)
    holder = {}
    done = []

    def after(run_id):
        done.append(run_id)
        if len(done) == 10:
            holder["grid"].interrupt("interrupted by test")

    agent = FakeAgent(latency=0.005, on_cancel=on_cancel, after_run=after)
    import benchclaw.experiments.runner as runner_mod
    orig = runner_mod._Grid.run

    async def capture(self, **kw):
        holder["grid"] = self
        return await orig(self, **kw)

    runner_mod._Grid.run = capture
    try:
        res = run(store, agent)
    finally:
        runner_mod._Grid.run = orig
    assert res.status == "interrupted"
    assert not store.open_run_paths()
    aborted = [r for r in journal(store, "run") if r["status"] == "aborted"]
    assert aborted and all(r["called_model"] for r in aborted)  # cut off mid-call: reserved
    from benchclaw.experiments.executor import first_last

    for r in aborted:  # the journal claims what the run says (the verifier compares them) ...
        c = first_last(store, r["run_id"])[1]["cost"]
        assert r["cost"] == {"known": bool(c.get("known")), "low": c["low"], "high": c["high"]}
    st = read_ledger(store, res.ledger)
    # ... and each call cut off in flight stays in the ledger, unknown, at its upper bound
    assert not st.open and st.unknown_calls == len(aborted) and st.closed
    assert journal(store, "stop")[0]["rule"] == "interrupted"
    before = {p.name: p.read_bytes() for p in (store.root / "runs").glob("*/*.jsonl")}
    res2 = run(store, FakeAgent())
    assert res2.status == "complete"
    after_files = {p.name: p.read_bytes() for p in (store.root / "runs").glob("*/*.jsonl")}
    assert all(after_files[n] == b for n, b in before.items())  # every earlier sealed run intact
    grid = [r for r in journal(store, "run") if r["policy"] == "grid"]
    keys = [(r["cell"], r["tier"]) for r in grid if r["called_model"]]
    assert len(keys) == len(set(keys)) == 54  # no grid unit run twice
    carried = read_ledger(store, res2.ledger)
    assert carried.carried_usd == st.spent_usd


def test_run_that_never_called_the_model_runs_again_and_names_what_it_replaces(tmp_path):
    store, _ = setup(tmp_path, all_tiers=True, live="[]", usd="0.0105")
    res = run(store, FakeAgent(), concurrency=1)
    assert res.stop_rule == "budget"
    refused = [r for r in journal(store, "run") if not r["called_model"]]
    assert refused and refused[0]["status"] == "budget_stop"
    spec = tmp_path / "R1.toml"
    spec.write_text(spec.read_text().replace('usd = "0.0105"', 'usd = "5"'))
    deviate(store, "R1", "raise the budget", backends=fake_backends(None))
    res2 = run(store, FakeAgent())
    assert res2.status == "complete"
    redo = [r for r in res2.runs if r["replaces"] == refused[0]["run_id"]]
    assert len(redo) == 1 and redo[0]["called_model"]


def test_deviation_is_ordered_before_the_runs_it_affects(tmp_path):
    store, spec = setup(tmp_path, all_tiers=False, live='["always:ultra"]')
    run(store, FakeAgent())
    spec.write_text(spec.read_text().replace('live = ["always:ultra"]', 'live = ["always:ultra", "ladder"]'))
    reg = deviate(store, "R1", "add the ladder", backends=fake_backends(None))
    run(store, FakeAgent())
    dev = [e for e in store.read_journal("R1") if e.kind == "deviation"][0]
    new_runs = [r for r in store.iter_runs() if r.start["policy"]["policy"] == "ladder"]
    assert new_runs and all(r.records[0].at > dev.record.at for r in new_runs)
    assert all(r.start["policy"]["spec_digest"] == reg.spec_digest for r in new_runs)


def test_rerun_labels_new_runs_and_keeps_the_primary(tmp_path):
    store, _ = setup(tmp_path, live="[]")
    run(store, FakeAgent(status_override="provider_error"), concurrency=2)
    primary = {r["run_id"] for r in journal(store, "run")}
    res = run(store, FakeAgent(), rerun=True)
    assert res.status == "complete" and len(res.runs) == 54
    assert all(r["rerun"] and r["replaces"] in primary for r in res.runs)
    assert primary <= {r["run_id"] for r in journal(store, "run")}


def test_progress_prints_lines_when_not_a_tty(tmp_path):
    import io

    store, _ = setup(tmp_path, live="[]")
    buf = io.StringIO()
    run(store, FakeAgent(), stream=buf, progress_every=18)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("R1 [54/54 100%] passes") and "spend $" in lines[-1]


def test_a_second_runner_of_the_same_experiment_is_refused(tmp_path):
    from benchclaw.errors import UsageError

    store, _ = setup(tmp_path, live="[]")
    with store.experiment_lock("R1"):
        assert store.experiment_live("R1") and not store.experiment_live("R2")
        with pytest.raises(UsageError, match="being run by another process"):
            run(store, FakeAgent())
    assert not store.open_run_paths() and "grid.start" not in kinds(store)


# ------------------------------------------------------------------ scheduling for the tail

def _outcomes(store):
    """What each unit did, without run ids or timing: the run set and its results."""
    runs = journal(store, "run")
    out = sorted((r["cell"], r["policy"], r["trial"] or "", r["tier"], r["status"], r["passed"], r["cost"]["low"])
                 for r in runs)
    trials = sorted((t["trial"], t["passed"], t["tier"], t["cost"]["low"]) for t in journal(store, "trial"))
    return out, trials


def test_grid_starts_longest_expected_first_without_changing_runs_or_results(tmp_path, monkeypatch):
    import benchclaw.experiments.runner as runner_mod

    # Baseline: the queue in grid order (the rule replaced by the identity).
    (tmp_path / "base").mkdir()
    (tmp_path / "sched").mkdir()
    base, _ = setup(tmp_path / "base", live='["ladder", "speculative"]')
    with monkeypatch.context() as m:
        m.setattr(runner_mod, "longest_first", lambda units, history, prior, capped=(): list(units))
        run(base, FakeAgent(), concurrency=1)
    store, _ = setup(tmp_path / "sched", live='["ladder", "speculative"]')
    run(store, FakeAgent(), concurrency=1)

    assert _outcomes(store) == _outcomes(base)  # the same runs, the same results
    grid_order = [(r["cell"], r["tier"]) for r in journal(base, "run") if r["policy"] == "grid"]
    got = [(r["cell"], r["tier"]) for r in journal(store, "run") if r["policy"] == "grid"]
    # No earlier runs: the ladder's cheapest tier first (expected longest), ties in grid order.
    want = sorted(grid_order, key=lambda ct: TIERS.index(ct[1]))
    assert got == want and got != grid_order
    # Live trials still start after every grid run, in their own order.
    policies = [r["policy"] for r in journal(store, "run")]
    assert policies.index("ladder") > max(i for i, p in enumerate(policies) if p == "grid")


def test_longest_first_prefers_earlier_runs_measured_durations(tmp_path):
    from benchclaw.experiments.grid import (History, Unit, longest_first, make_cells, make_units,
                                            run_length_prior)

    tasks = [SimpleNamespace(id="alpha-one", version=1), SimpleNamespace(id="beta-two", version=1)]
    cells = make_cells(tasks, ["direct"], [1, 2])
    units = make_units(cells, TIERS, True, ["ladder"])
    h = History()
    # Seed 1 already ran: alpha's ultra took longest, beta's lightning shortest.
    for task, tier, ms in [("alpha-one", "lightning", 100), ("alpha-one", "super", 200), ("alpha-one", "ultra", 900),
                           ("beta-two", "lightning", 50), ("beta-two", "super", 300)]:
        h.add({"run_id": f"{task}{tier}", "cell": f"{task}@1/direct/1", "tier": tier, "policy": "grid",
               "called_model": True, "elapsed_ms": ms})
    h.add({"run_id": "x", "cell": "beta-two@1/direct/1", "tier": "ultra", "policy": "grid",
           "called_model": False, "elapsed_ms": 99999})  # never called the model: no evidence of length
    todo = [u for u in units if u.cell.seed == 2 or u.policy != "grid"]
    order = longest_first(todo, h, run_length_prior(TIERS, {"direct": 3}))
    names = [(u.cell.task.id, u.tier) for u in order if u.policy == "grid"]
    assert names == [("beta-two", "ultra"),                      # no measured run: unknown first
                     ("alpha-one", "ultra"), ("beta-two", "super"), ("alpha-one", "super"),
                     ("alpha-one", "lightning"), ("beta-two", "lightning")]
    live = [u for u in todo if u.policy != "grid"]
    assert len(live) == 4 and order[-len(live):] == live  # live trials last, in their order
    assert sorted(order, key=lambda u: str(u.key)) == sorted(todo, key=lambda u: str(u.key))
    # Tier memory reads the journal order of grid runs: with a memory trial to run, keep it.
    mem = make_units(cells, TIERS, True, ["memory"])
    assert longest_first(mem, h, run_length_prior(TIERS, {})) == mem
    # A tier capped below the concurrency: sorted, its runs would wait on the cap in a row.
    assert longest_first(todo, h, run_length_prior(TIERS, {}), capped=["ultra"]) == todo
    assert isinstance(order[0], Unit)


def test_run_length_prior_puts_cheap_tiers_and_checking_profiles_first():
    from benchclaw.experiments.grid import (longest_first, make_cells, make_units, run_length_prior,
                                            History)

    cells = make_cells([SimpleNamespace(id="alpha-one", version=1)], ["direct", "checker"], [1])
    units = make_units(cells, TIERS, True, [])
    prior = run_length_prior(["lightning", "super", "ultra"], {"direct": 3, "checker": 4})
    got = [(u.tier, u.cell.profile) for u in longest_first(units, History(), prior)]
    assert got == [("lightning", "checker"), ("lightning", "direct"), ("super", "checker"),
                   ("super", "direct"), ("ultra", "checker"), ("ultra", "direct")]


def test_progress_line_shows_recent_tokens_per_second_per_tier():
    import io

    from benchclaw.experiments.progress import RECENT_CALLS, Progress
    from benchclaw.experiments.runner import _run_speed

    buf = io.StringIO()
    p = Progress(4, buf, label="E ", every=1)
    p.calls("lightning", [(400, 1000), (200, 1000)])  # 600 tokens in 2 s
    p.calls("ultra", [(50, 1000), (10, 0)])           # no time, no speed
    p.update(done=1)
    assert buf.getvalue().rstrip().endswith("tok/s lightning 300 ultra 50")
    p.calls("lightning", [(100, 1000)] * RECENT_CALLS)  # only the recent runs count: it slowed down
    assert p.line().endswith("tok/s lightning 100 ultra 50")
    assert _run_speed({"usage": {"completion": 7}, "elapsed_ms": 70}) == [(7, 70)]
    assert _run_speed({"usage": None, "elapsed_ms": 9}) == [] == _run_speed({})


def test_every_stopping_rule_a_spec_accepts_is_one_the_runner_checks():
    from benchclaw.experiments.runner import STOP_CHECKS
    from benchclaw.formats.spec import STOP_RULES

    assert set(STOP_CHECKS) == set(STOP_RULES)


def test_threads_get_short_gil_turns_while_a_grid_runs_and_the_setting_is_restored(tmp_path):
    """The group commit's threads must not wait 5 ms for each hand-over of the GIL while the
    event loop runs the grid (``runner.short_gil_turns``)."""
    import sys

    store, _ = setup(tmp_path)
    seen = []
    agent = FakeAgent(after_run=lambda *a, **k: seen.append(sys.getswitchinterval()))
    before = sys.getswitchinterval()
    assert run(store, agent).status == "complete" and seen
    assert max(seen) <= 0.0005 < before == sys.getswitchinterval()


def test_grids_that_overlap_in_one_process_restore_the_gil_setting_when_the_last_one_ends():
    """Two grids in two threads of one process, the first to start ending first: the
    setting stays short until the second ends, then is the user's again (not left short)."""
    import sys

    from benchclaw.experiments.runner import short_gil_turns

    before = sys.getswitchinterval()
    first, second = short_gil_turns(), short_gil_turns()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert sys.getswitchinterval() <= 0.0005
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before
