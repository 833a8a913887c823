"""Streamed calls end to end over real HTTP (issue #18).

One grid against loopback ``benchclaw sim serve`` servers, every tier the ``openai``
provider (the official SDK): ``plain`` (not streamed) and ``streamed`` (``stream = true``)
share one healthy server, so the same cells must give the same pass/fail and the same
costs; three streamed tiers have a server that misbehaves the way streams do: a stream
that stalls on a run's first attempt (cut after ``stall_s`` and retried), streams cut
after N tokens (the call's cost is the documented lower bound up to the upper bound), and
streams that end without a usage chunk (a bound, never an exact cost). Then the report,
the site and the bundle, which must verify offline (the verifier recounts each floor).
"""

from __future__ import annotations

import time
from decimal import Decimal
from types import SimpleNamespace

import pytest

from benchclaw.formats import jsonio
from benchclaw.formats.money import MAX_TOKEN_BYTES, Prices, Usage, call_cost
from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.profiles import load_profiles
from benchclaw.sim.server import SimServer
from benchclaw.evidence.store import Store

from .helpers import (assert_ledgers_reconcile, bodies, build_products, experiment_runs, record_figures,
                      register_and_run, write_spec)
from .test_faults import FirstAttemptFault

EXP = "STREAMS"
TASKS = ["cents-fees", "pricing-seats", "quotes-policy"]
PROFILES = ("direct", "checker")
CUT_AFTER = 5      # tokens a cut or stalled stream sends
STALL_S = 1.0      # the stall tier's stall_seconds (the others have 30 s: a loaded CI machine may pause)
HANG_S = 20.0      # how long a stalled server stays silent (far beyond STALL_S)
SECONDS = 30
PRICES = Prices(input=Decimal("0.30"), cached_input=Decimal("0.075"), output=Decimal("1.20"))

CATALOG_HEAD = 'v = 1\nname = "streams"\ndescription = "SIMULATED: loopback simulator servers"\nsimulated = true\n'
TIER = '[tiers.{name}]\nprovider = "openai"\nmodel = "sim/super"\nbase_url = "{url}"\nsimulated = true\n' \
       'stream = {stream}\nstall_seconds = {stall}\nprices = {{ input = "0.30", cached_input = "0.075", output = "1.20" }}\n'


# Pre-registered provider-health hypotheses, decided from the runs (FORMAT.md §10).
HYPOTHESES = """
[[hypotheses]]
id = "H-no-timeouts"
text = "6 of 6 streamed runs meet no provider timeout."
rule = 'timeout_rate("streamed") == 0 and error_rate("streamed") == 0'
[[hypotheses]]
id = "H-stalls"
text = "The stalling endpoint times out in no run."
rule = 'timeout_rate("stall") == 0'
[[hypotheses]]
id = "H-speed"
text = "Streamed and plain calls are served at some speed, with a first token."
rule = 'throughput("streamed") > 0 and ttft("streamed") >= 0 and throughput("plain") > 0'
"""


def _backend(**faults) -> SimBackend:
    return SimBackend(load_profiles(), latency_scale=0,
                      faults=SimFaults(stream_cut_after=CUT_AFTER, hang_s=HANG_S, **faults))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("streams")
    healthy = SimServer(backend=_backend()).start()
    stall = FirstAttemptFault("stream_stall", profiles=load_profiles(), latency_scale=0,
                              faults=SimFaults(stream_cut_after=CUT_AFTER, hang_s=HANG_S))
    servers = {"stall": SimServer(backend=stall).start(),
               "cut": SimServer(backend=_backend(rates={"stream_cut": 1.0})).start(),
               "nousage": SimServer(backend=_backend(rates={"missing_usage": 1.0})).start()}
    tiers = {"plain": (healthy, "false", 30), "streamed": (healthy, "true", 30), "stall": (servers["stall"], "true", STALL_S),
             "cut": (servers["cut"], "true", 30), "nousage": (servers["nousage"], "true", 30)}
    try:
        catalog = tmp / "streams.toml"
        catalog.write_text(CATALOG_HEAD + "".join(TIER.format(name=n, url=s.base_url, stream=st, stall=stall)
                                                  for n, (s, st, stall) in tiers.items()))
        spec = write_spec(tmp, EXP, tasks=TASKS, tiers=list(tiers), catalog="streams.toml", profiles=PROFILES,
                          settings={"seconds": SECONDS, "retries": 2, "concurrency": 8, "max_tokens": 4096},
                          extra=HYPOTHESES)
        store = Store(tmp / "runs")
        t0 = time.monotonic()
        result = register_and_run(store, spec, EXP)
        wall = time.monotonic() - t0
        products = build_products(store, EXP, tmp)
    finally:
        for s in [healthy, *servers.values()]:
            s.stop()
    runs = experiment_runs(store, EXP)
    by_tier: dict[str, list] = {}
    for r in runs:
        by_tier.setdefault(r.start["tier"], []).append(r)
    return SimpleNamespace(store=store, result=result, products=products, by_tier=by_tier, wall=wall, runs=runs)


def _cells(runs) -> dict:
    return {(r.start["task"]["id"], r.start["profile"]["name"]): r for r in runs}


def test_streamed_and_plain_give_the_same_verdicts_and_costs(grid):
    assert grid.result.status == "complete", grid.result.stop_detail
    plain, streamed = _cells(grid.by_tier["plain"]), _cells(grid.by_tier["streamed"])
    assert set(plain) == set(streamed) and len(plain) == len(TASKS) * len(PROFILES)
    for cell, p in plain.items():
        s = streamed[cell]
        assert (s.end["status"], s.end["passed"]) == (p.end["status"], p.end["passed"]), cell
        assert s.end["cost"] == p.end["cost"] and s.end["cost"]["known"], cell
        assert s.end["usage"] == p.end["usage"], cell
        pc, sc = bodies(p, "call"), bodies(s, "call")
        assert [c["reply"] for c in sc] == [c["reply"] for c in pc], cell
        assert all("stream" not in c for c in pc)
        for c in sc:
            st = c["stream"]
            assert st["end"] == "done" and st["usage_chunk"] is True and c["request_id"]
            assert st["text_chunks"] == c["usage"]["completion"]  # the simulator streams a token per chunk
            assert 0 <= st["ttft_ms"] <= c["latency_ms"]
    assert any(r.end["passed"] for r in plain.values())


def test_a_stalled_stream_is_cut_and_retried(grid):
    for run in grid.by_tier["stall"]:
        calls = bodies(run, "call")
        first, second = calls[0], calls[1]
        assert (first["turn"], first["attempt"], second["turn"], second["attempt"]) == (0, 0, 0, 1)
        assert first["error"]["kind"] == "timeout" and first["error"]["message"].startswith("stalled")
        assert first["stream"]["end"] == "stalled" and first["stream"]["text_chunks"] == CUT_AFTER
        # cut at stall_s, not after the server's 20 s of silence nor the run's 30 s
        assert STALL_S * 1000 <= first["latency_ms"] < HANG_S * 1000 / 4
        assert second["error"] is None and second["stream"]["end"] == "done"
        assert run.end["status"] in ("passed", "failed"), run.end["reason"]
        assert run.end["elapsed_ms"] < HANG_S * 1000  # no run waited out the stalled server


def _floor_by_hand(store, call) -> Decimal:
    """FORMAT.md §6: prompt >= ceil(message bytes / 128) once a token arrived; completion >=
    the text chunks (and the reply's bytes / 128), at most max_tokens."""
    request = jsonio.loads(store.get_blob(call["request"]))
    prompt_bytes = sum(len(m["content"].encode()) for m in request["messages"])
    reply = 0 if call["reply"] is None else len(store.get_blob(call["reply"]))
    chunks = call["stream"]["text_chunks"]
    prompt = -(-prompt_bytes // MAX_TOKEN_BYTES)
    completion = min(request["max_tokens"], max(chunks, -(-reply // MAX_TOKEN_BYTES)))
    cheapest = min(PRICES.input, PRICES.cached_input)  # the prompt may all have been a cache read
    return (Decimal(prompt) * cheapest + Decimal(completion) * PRICES.output) / Decimal(1_000_000)


def test_a_stream_cut_after_n_tokens_costs_the_documented_lower_bound(grid):
    for run in grid.by_tier["cut"]:
        calls = bodies(run, "call")
        assert run.end["status"] == "provider_error" and len(calls) == 3
        for c in calls:
            assert c["error"]["kind"] == "connection" and c["stream"]["end"] == "cut"
            assert c["stream"]["text_chunks"] == CUT_AFTER and c["usage"] is None
            low = Decimal(c["cost"]["low"])
            assert c["cost"]["known"] is False and low == _floor_by_hand(grid.store, c) > 0
            assert low < Decimal(c["cost"]["high"])
            prompt = -(-_prompt_bytes(grid.store, c) // 128)
            assert low == call_cost(Usage(prompt=prompt, cached_read=prompt, completion=CUT_AFTER), PRICES)
        assert Decimal(run.end["cost"]["low"]) == sum(Decimal(c["cost"]["low"]) for c in calls)


def _prompt_bytes(store, call) -> int:
    return sum(len(m["content"].encode()) for m in jsonio.loads(store.get_blob(call["request"]))["messages"])


def test_a_stream_without_a_usage_chunk_is_a_bound_not_an_exact_cost(grid):
    plain = _cells(grid.by_tier["plain"])
    for cell, run in _cells(grid.by_tier["nousage"]).items():
        calls = bodies(run, "call")
        assert run.end["status"] == plain[cell].end["status"]  # the replies are whole: same verdict
        for c in calls:
            assert c["stream"]["end"] == "done" and c["stream"]["usage_chunk"] is False
            assert c["usage"] is None and c["cost"]["known"] is False
            assert Decimal(c["cost"]["low"]) == _floor_by_hand(grid.store, c) > 0
        exact = Decimal(plain[cell].end["cost"]["low"])
        low, high = Decimal(run.end["cost"]["low"]), Decimal(run.end["cost"]["high"])
        assert low <= exact <= high and low > 0  # the floor never claims more than was spent


def test_the_ledger_settles_cut_calls_at_the_upper_bound(grid):
    calls = assert_ledgers_reconcile(grid.store, EXP)
    assert calls == sum(len(bodies(r, "call")) for r in grid.runs)


def test_the_bundle_verifies_with_every_floor_recounted(grid):
    from .helpers import verdict_text

    assert grid.products.verdict.exit_code == 0, verdict_text(grid.products.verdict)
    calls = [c for r in grid.runs for c in bodies(r, "call")]
    streamed = [c for c in calls if "stream" in c]
    floors = [c for c in streamed if c["usage"] is None]
    record_figures("streaming", tiers=len(grid.by_tier), runs=len(grid.runs), calls=len(calls),
                   streamed_calls=len(streamed), chunks=sum(c["stream"]["chunks"] for c in streamed),
                   calls_with_floor=len(floors), stalls_cut=sum(c["stream"]["end"] == "stalled" for c in streamed),
                   wall_s=round(grid.wall, 1), bundle_bytes=grid.products.bundle.stat().st_size)



def _forge(grid, tmp_path, monkeypatch, edit_call, end: str = "cut") -> object:
    """A consistent forgery of the first call of a run whose first stream ended ``end``
    (digests, chain and run id redone)."""
    from benchclaw.verify import verify_bundle
    from tests import test_bundle_support
    from tests.test_bundle_support import Forger

    monkeypatch.setattr(test_bundle_support, "EXP", EXP)  # the Forger's journal and summary

    f = Forger.of(grid.products.bundle.read_bytes())
    run = next(r for r in f.run_ids() if any(o["kind"] == "call" and o["body"].get("stream", {}).get("end") == end
                                             and (end != "done" or o["body"]["usage"] is None) for o in f.records(r)))

    def edit(objs):
        call = next(o for o in objs if o["kind"] == "call")
        edit_call(call["body"])
        return objs
    f.edit_run(run, edit)
    return verify_bundle(f.pack(tmp_path))


def _costs_failures(rep) -> list[str]:
    return [str(x) for x in rep.section("costs").failures]


def test_a_raised_floor_is_caught_by_the_verifier(grid, tmp_path, monkeypatch):
    def raise_floor(body):
        body["cost"]["low"] = body["cost"]["high"]
    rep = _forge(grid, tmp_path, monkeypatch, raise_floor)
    assert rep.exit_code == 1 and any("differs from the recomputed" in t for t in _costs_failures(rep))


def test_inflated_text_chunks_change_the_recounted_floor(grid, tmp_path, monkeypatch):
    def inflate(body):
        body["stream"]["text_chunks"] += 100
    rep = _forge(grid, tmp_path, monkeypatch, inflate)
    assert rep.exit_code == 1 and any("differs from the recomputed" in t for t in _costs_failures(rep))


def test_report_and_site_show_throughput_ttft_and_timeouts_per_tier(grid):
    from .helpers import tier_row

    plain, streamed = tier_row(grid.products.summary, "plain"), tier_row(grid.products.summary, "streamed")
    for row in (plain, streamed):
        h = row["health"]
        assert h["errors"] == 0 and h["timeout_runs"] == 0 and h["runs"] == len(TASKS) * len(PROFILES)
        assert h["tokens_per_s"]["calls"] == h["calls"] and Decimal(h["tokens_per_s"]["median"]) > 0
    assert plain["health"]["ttft_s"]["median"] is None and Decimal(streamed["health"]["ttft_s"]["median"]) >= 0
    stall = tier_row(grid.products.summary, "stall")["health"]
    assert stall["timeout_runs"] == stall["runs"] == len(TASKS) * len(PROFILES)  # each run's first attempt stalled
    cut = tier_row(grid.products.summary, "cut")["health"]
    assert cut["errors"] == cut["calls"] and cut["error_rate"] == ["1.0000", "1.0000"]
    assert "Provider health" in grid.products.terminal and "tok/s by quarter" in grid.products.markdown
    page = next(grid.products.site.rglob(f"*{EXP}*/index.html"), None) or next(
        p for p in grid.products.site.rglob("*.html") if "Provider health" in p.read_text())
    assert "Provider health" in page.read_text() and "first token" in page.read_text()
    assert "Output tokens per second by tier" in page.read_text()  # the chart (no bars: simulated runs)
    run_id = grid.by_tier["cut"][0].run_id
    run_page = next(p for p in grid.products.site.rglob(f"*{run_id[:16]}*.html"))
    text = run_page.read_text()
    assert "streamed: " in text and "ended <b>cut</b>" in text and "cost floor from what was received" in text


def test_provider_health_hypotheses_are_decided(grid):
    decided = {d["id"]: d["decision"] for d in grid.products.summary["primary"]["decisions"]}
    assert decided == {"H-no-timeouts": "supported", "H-stalls": "refuted", "H-speed": "supported"}


def test_a_reply_without_text_chunks_is_caught(grid, tmp_path, monkeypatch):
    def no_chunks(body):
        body["stream"]["text_chunks"] = 0
        body["cost"]["low"] = "0"  # what the floor would be with no text chunk
    rep = _forge(grid, tmp_path, monkeypatch, no_chunks, end="done")  # a stream without usage, reply kept
    assert rep.exit_code == 1 and any("has text but stream.text_chunks is 0" in t for t in _costs_failures(rep))
