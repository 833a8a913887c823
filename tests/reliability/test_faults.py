"""Provider faults, end to end over real HTTP (issue #10, first bullet).

One grid, one tier per fault: every tier is the ``openai`` provider (the official SDK)
talking to its own loopback simulator server that misbehaves in exactly one way, either
on every call ("persistent") or only on the first attempt of a run ("once", so the retry
path is exercised too). Both agent profiles run on every tier. Then, for each fault: the
run ends with the status a user should expect, every call is recorded with its error kind
and its exact cost or its bounds, the ledger equals the call records, the report counts
the fault, and the exported bundle (site included) verifies offline.

Why one grid rather than one per fault: prereg, the runner, the report, the site and the
verifier each run once for all 24 runs, which keeps the suite to seconds; the fault
tiers are independent because each has its own server (and fault schedule).
"""

from __future__ import annotations

import threading
from decimal import Decimal
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from benchclaw.formats import jsonio
from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.profiles import load_profiles
from benchclaw.sim.server import SimServer
from benchclaw.evidence.store import Store

from .helpers import (terminal_row, assert_ledgers_reconcile, bodies, build_products, experiment_runs, record_figures,
                      register_and_run, tier_row, write_spec, patched_profiles)

EXP = "FAULTS"
TASK = "cents-fees"
PROFILES = ("direct", "checker")
SECONDS = 5          # the run's time bound: what a hung endpoint costs a run
RETRIES = 2          # extra attempts after a retryable failure (3 calls at most per turn)
RETRY_AFTER_S = 0.05
FINISHED = {"passed", "failed"}


class FirstAttemptFault(SimBackend):
    """A simulated endpoint that fails only the first attempt of a run's first turn (a
    request with just the system and task messages, seen for the first time); the
    retry of the same body is answered normally."""

    def __init__(self, kind: str, **kw) -> None:
        super().__init__(**kw)
        self.kind = kind
        self._local = threading.local()

    def handle(self, raw_body: bytes, **kw):
        try:
            self._local.first = len(jsonio.loads(raw_body).get("messages", ())) == 2
        except (ValueError, AttributeError):
            self._local.first = False
        return super().handle(raw_body, **kw)

    def _pick_fault(self, n: int, digest: str, k: int) -> str | None:
        return self.kind if getattr(self._local, "first", False) and k == 0 else None


@dataclass(frozen=True)
class Fault:
    """One fault tier: how its server misbehaves and what the evidence must show."""

    rates: dict = field(default_factory=dict)
    once: str | None = None                  # fail only the first attempt of a run
    profile: dict | None = None              # patched fields of the `super` sim profile
    statuses: frozenset = frozenset()        # acceptable run.end statuses
    error: str | None = None                 # the error kind the faulty calls carry
    http_status: int | None = None
    calls_per_run: int | None = None         # exact number of calls when the fault persists
    outcome: str | None = None               # the outcome every call has (length, ...)
    cost_known: bool | None = None           # every call's cost.known


PERSISTENT_CALLS = RETRIES + 1
FAULTS: dict[str, Fault] = {
    "timeout": Fault(rates={"timeout": 1.0}, statuses=frozenset({"limit_time"}), error="timeout",
                     calls_per_run=1, cost_known=False),
    "rate-limited": Fault(rates={"rate_limited": 1.0}, statuses=frozenset({"provider_error"}),
                          error="rate_limited", http_status=429, calls_per_run=PERSISTENT_CALLS, cost_known=True),
    "rate-limited-once": Fault(once="rate_limited", statuses=FINISHED, error="rate_limited", http_status=429),
    "server-500": Fault(rates={"server": 1.0}, statuses=frozenset({"provider_error"}), error="server",
                        http_status=500, calls_per_run=PERSISTENT_CALLS, cost_known=False),
    "server-500-once": Fault(once="server", statuses=FINISHED, error="server", http_status=500),
    "reset": Fault(rates={"connection": 1.0}, statuses=frozenset({"provider_error"}), error="connection",
                   calls_per_run=PERSISTENT_CALLS, cost_known=False),
    "reset-once": Fault(once="connection", statuses=FINISHED, error="connection"),
    "malformed": Fault(rates={"malformed": 1.0}, statuses=frozenset({"provider_error"}), error="malformed",
                       calls_per_run=1, cost_known=False),
    "missing-usage": Fault(rates={"missing_usage": 1.0}, statuses=FINISHED, cost_known=False),
    "length": Fault(profile={"reasoning": {k: (60000.0, 0.01) for k in ("read", "write", "check", "finish")}},
                    statuses=frozenset({"limit_turns"}), outcome="length", cost_known=True),
    "reasoning-only": Fault(profile={"reasoning_only": 1.0}, statuses=frozenset({"limit_turns"}),
                            outcome="reasoning_only", cost_known=True),
    "echo-alias": Fault(rates={"model_mismatch": 1.0}, statuses=FINISHED, cost_known=True),
}

CATALOG_HEAD = 'v = 1\nname = "faulty"\ndescription = "SIMULATED: loopback simulator servers, one fault each"\n' \
               'simulated = true\n'
TIER = '[tiers.{name}]\nprovider = "openai"\nmodel = "sim/super"\nbase_url = "{url}"\nsimulated = true\n' \
       'prices = {{ input = "0.30", cached_input = "0.075", output = "1.20" }}\n'


def _server(fault: Fault) -> SimServer:
    profiles = patched_profiles(super=fault.profile) if fault.profile else load_profiles()
    faults = SimFaults(rates=fault.rates, retry_after_s=RETRY_AFTER_S, hang_s=SECONDS * 4)
    if fault.once:
        backend = FirstAttemptFault(fault.once, profiles=profiles, faults=SimFaults(retry_after_s=RETRY_AFTER_S),
                                    latency_scale=0)
    else:
        backend = SimBackend(profiles, faults=faults, latency_scale=0)
    return SimServer(backend=backend).start()


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The whole pipeline once: 12 fault tiers x 2 profiles, then report, site, bundle."""
    tmp = tmp_path_factory.mktemp("faults")
    servers = {name: _server(f) for name, f in FAULTS.items()}
    try:
        catalog = tmp / "faulty.toml"
        catalog.write_text(CATALOG_HEAD + "".join(TIER.format(name=n, url=s.base_url) for n, s in servers.items()))
        spec = write_spec(tmp, EXP, tasks=[TASK], tiers=list(FAULTS), catalog="faulty.toml", profiles=PROFILES,
                          settings={"seconds": SECONDS, "retries": RETRIES, "concurrency": 2 * len(FAULTS),
                                    "max_tokens": 4096})
        store = Store(tmp / "runs")
        result = register_and_run(store, spec, EXP)
        products = build_products(store, EXP, tmp)
    finally:
        for s in servers.values():
            s.stop()
    runs = experiment_runs(store, EXP)
    by_tier: dict[str, list] = {}
    for r in runs:
        by_tier.setdefault(r.start["tier"], []).append(r)
    return SimpleNamespace(store=store, result=result, products=products, runs=runs, by_tier=by_tier)


def test_the_grid_completes_with_one_run_per_fault_and_profile(grid):
    assert grid.result.status == "complete", grid.result.stop_detail
    assert {t: len(rs) for t, rs in grid.by_tier.items()} == {t: len(PROFILES) for t in FAULTS}
    assert {r.start["profile"]["name"] for r in grid.runs} == set(PROFILES)


def _assert_calls_per_run(fault: Fault, calls: list, end: dict, where: str) -> None:
    """Every attempt a persistent fault allows was made, unless the run ended because the
    next retry's wait was longer than the time it had left (on a loaded machine the run's
    5 s can run short before the last backoff): fewer calls only for that stated reason."""
    if len(calls) < fault.calls_per_run and "longer than the" in str(end["reason"]):
        assert end["status"] == "provider_error" and "the run has left" in end["reason"], where
        return
    assert len(calls) == fault.calls_per_run, f"{where}: {end['reason']}"


@pytest.mark.parametrize("name", list(FAULTS))
def test_each_fault_ends_the_run_right_and_records_every_call(grid, name):
    fault = FAULTS[name]
    for run in grid.by_tier[name]:
        where = f"{name}/{run.start['profile']['name']} ({run.run_id[:12]})"
        end, calls = run.end, bodies(run, "call")
        assert end["status"] in fault.statuses, f"{where}: {end['status']}: {end['reason']}"
        assert end["calls"] == len(calls) >= 1
        if fault.calls_per_run is not None:
            _assert_calls_per_run(fault, calls, end, where)
        if fault.error:
            failed = [c for c in calls if c["error"]]
            assert failed and all(c["error"]["kind"] == fault.error and c["outcome"] == "error" for c in failed), where
            if fault.http_status:
                assert all(c["error"]["status"] == fault.http_status for c in failed), where
            if fault.error == "rate_limited":
                assert all(c["error"]["retry_after_ms"] == int(RETRY_AFTER_S * 1000) for c in failed), where
            if fault.once:  # only the first attempt failed; the retry went through
                assert [c["error"] is not None for c in calls[:2]] == [True, False], where
                assert (calls[0]["turn"], calls[0]["attempt"], calls[1]["turn"], calls[1]["attempt"]) == (0, 0, 0, 1)
            else:
                assert all(c["error"] for c in calls), where
                assert str(end["reason"]).startswith(fault.error) or end["status"] == "limit_time", end["reason"]
        if fault.outcome:
            assert all(c["outcome"] == fault.outcome for c in calls), where
            assert {c["finish_reason"] for c in calls} == {"length" if fault.outcome == "length" else "stop"}
        for c in calls:
            _assert_cost_recorded(c, where)
        if fault.cost_known is not None and not fault.once:
            assert all(c["cost"]["known"] is fault.cost_known for c in calls), where
            assert end["cost"]["known"] is fault.cost_known, where
        if name == "missing-usage":
            assert all(c["usage"] is None and c["usage_raw"] is None for c in calls), where
        if name == "echo-alias":
            assert all(c["model_mismatch"] is True and c["model_echoed"] == "sim/super-simulated-alias"
                       for c in calls), where
        else:
            assert not any(c["model_mismatch"] for c in calls), where


def _assert_cost_recorded(call: dict, where: str) -> None:
    """A call with usage has its exact cost; one refused before a model ran (HTTP 429) is a
    known zero with its reason; any other without usage has the bounds [0, prompt + max_tokens]."""
    cost = call["cost"]
    if call["usage"] is not None:
        assert cost["known"] and cost["low"] == cost["high"], where
    elif call["error"] and call["error"]["status"] == 429:
        assert cost == {"known": True, "low": "0", "high": "0"} and "HTTP 429" in call["cost_note"], where
    else:
        assert not cost["known"] and cost["low"] == "0" and Decimal(cost["high"]) > 0, where


def test_the_ledger_equals_the_call_records(grid):
    calls = assert_ledgers_reconcile(grid.store, EXP)
    assert calls == sum(len(bodies(r, "call")) for r in grid.runs)


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_report_counts_each_fault(grid, name):
    row = tier_row(grid.products.summary, name)
    calls = [c for r in grid.by_tier[name] for c in bodies(r, "call")]
    errors: dict[str, int] = {}
    for c in calls:
        if c["error"]:
            errors[c["error"]["kind"]] = errors.get(c["error"]["kind"], 0) + 1
    assert row["finish"]["errors"] == errors
    for outcome in ("stop", "length", "reasoning_only", "error"):
        assert row["finish"][outcome] == sum(c["outcome"] == outcome for c in calls), outcome
    statuses: dict[str, int] = {}
    for r in grid.by_tier[name]:
        statuses[r.end["status"]] = statuses.get(r.end["status"], 0) + 1
    assert row["statuses"] == statuses
    unknown = sum(not c["cost"]["known"] for c in calls)
    assert row["cost"]["unknown_calls"] == unknown
    assert row["cost"]["total"]["known"] is (unknown == 0)
    assert row["tokens"][name]["calls"] == len(calls)
    assert row["tokens"][name]["unknown_usage"] == sum(c["usage"] is None for c in calls)
    # The terminal report's outcomes row of this tier says the same.
    line = terminal_row(grid.products.terminal, "Outcomes and injections", f"tier {name}")
    assert " stop " in line
    for status, n in statuses.items():
        assert f"{status}:{n}" in line, (status, line)
    for kind, n in errors.items():
        assert f"{kind}:{n}" in line, (kind, line)


def test_invalid_replies_are_not_denials_in_the_evidence(grid):
    """The length and reasoning-only tiers' replies were invalid (cut off, empty), never
    refused by a permission: run.end says ``denials: 0`` and counts them as ``invalid``."""
    for name in ("length", "reasoning-only"):
        assert sum(r.end["denials"] for r in grid.by_tier[name]) == 0
        assert sum(r.end["invalid"] for r in grid.by_tier[name]) == sum(r.end["turns"] for r in grid.by_tier[name])


def test_the_report_counts_only_permission_denials(grid):
    recorded = {t: sum(r.end["denials"] for r in rs) for t, rs in grid.by_tier.items()}
    reported = {t: tier_row(grid.products.summary, t)["injection"]["denials"] for t in grid.by_tier}
    assert reported == recorded


def test_the_report_counts_echoed_model_mismatches(grid):
    for name, runs in grid.by_tier.items():
        recorded = sum(c["model_mismatch"] for r in runs for c in bodies(r, "call"))
        assert tier_row(grid.products.summary, name)["finish"]["model_mismatch"] == recorded, name
        assert (recorded > 0) == (name == "echo-alias"), name
    mismatched = sum(len(bodies(r, "call")) for r in grid.by_tier["echo-alias"])
    line = terminal_row(grid.products.terminal, "Outcomes and injections", "tier echo-alias")
    assert f"model-mismatch {mismatched}" in line, line


def test_the_bundle_of_the_faulty_grid_verifies(grid):
    from .helpers import verdict_text

    assert grid.products.verdict.exit_code == 0, verdict_text(grid.products.verdict)
    calls = sum(len(bodies(r, "call")) for r in grid.runs)
    faulty = sum(1 for r in grid.runs for c in bodies(r, "call")
                 if c["error"] or c["outcome"] != "stop" or c["usage"] is None or c["model_mismatch"])
    record_figures("faults", fault_kinds=len(FAULTS), runs=len(grid.runs), calls=calls, faulty_calls=faulty,
                   statuses=sorted({r.end["status"] for r in grid.runs}),
                   bundle_bytes=grid.products.bundle.stat().st_size)
