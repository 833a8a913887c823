"""Grid runner benchmarks: harness CPU per model call, and concurrency efficiency.

Both run a real registered experiment through ``benchclaw.experiments.runner.run_experiment`` with the
real agent, store (fsync on), ledger and the built-in simulator, in a temporary directory.

    python bench/grid.py --calls 2000
        Zero-latency simulator. Harness CPU per model call = (process CPU during the grid
        - CPU spent inside the simulator) / calls. Target: under 2 ms per call.
        Then the same grid with every tier streamed (``stream = true``: the simulator's
        replies cut into one chunk per token and joined again by the stream assembler,
        which is harness work; only building the chunks counts as the simulator's).
        Last lines: grid_overhead ms_per_call=X, then grid_stream ms_per_call=Y

    python bench/grid.py --latency 0.5 --concurrency 16
        Every call takes exactly 0.5 s (simulator content, fixed wall latency). Ideal wall
        time for N slots = max(sum of every run's serial call time / N, the longest run);
        efficiency = ideal / measured. Target: >= 0.9 at 64 (issue 17). Wall time: other
        work on the machine lowers it; the "schedule bound" line does not depend on CPU.
        Also prints the process CPU per call (every thread: harness, simulator, fsync
        workers) and the machine's load average, since wall time on a shared machine
        depends on both: the line before the last is grid_concurrency cpu_ms_per_call=Y.
        And where a call's harness time goes (``TurnTimer``): the wall time a run spends
        beside its model calls, per call, and how much of it is waiting for group commits
        (how many waits, how long a commit pass takes, how late the loop wakes a timer).
        Last line: grid_concurrency efficiency=X

    --profile writes a cProfile of the grid to grid.prof and prints the top functions.
    --no-fsync  the store without fsync (NOT durable): the ceiling for writing off the loop.
    --grid-order  the queue in plain grid order (before longest-expected-first), to compare
        the concurrency mode's "schedule bound" line: the efficiency a harness that cost
        nothing would reach starting the runs in the order this grid started them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import cProfile
import heapq
import io
import math
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

from benchclaw.experiments.executor import default_backends
from benchclaw.experiments import prereg
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence._commit import committer
from benchclaw.evidence.store import Store

SPEC = """v = 1
id = "BENCH"
title = "grid benchmark"
[grid]
tasks = ["*"]
profiles = ["direct", "checker"]
seeds = {seeds}
tiers = ["lightning", "super", "ultra"]
catalog = "{catalog}"
all_tiers = true
[settings]
max_tokens = 4096
concurrency = {concurrency}
[budget]
usd = "1000"
"""
STREAM_CATALOG = """v = 1
name = "sim-stream"
description = "SIMULATED: the sim tiers, streamed"
extends = "sim"
[tiers.lightning]
stream = true
[tiers.super]
stream = true
[tiers.ultra]
stream = true
"""
CALLS_PER_RUN_GUESS = 5.6  # measured: 2424 calls over 432 runs of the 12 shipped tasks on sim


def runs_per_seed() -> int:
    """Grid runs one seed makes: the tasks ``tasks = ["*"]`` resolves to (the latest
    version of every shipped task, counted, since task families keep being added)
    x 2 profiles x 3 tiers."""
    from benchclaw.experiments.grid import resolve_tasks
    from benchclaw.checks.tasks import find_tasks

    return len(resolve_tasks(["*"], find_tasks(), "bench")) * 2 * 3

TMPDIR: list[str | None] = [None]  # --tmpdir: where the runs directory lives (its file system matters)
FSYNC = [True]  # --no-fsync: what the harness costs without durability (the ceiling for group commit)


class CpuMeter:
    """Wraps the simulator provider and adds up the CPU time spent inside it. With zero
    latency the simulator never yields, so the delta is its own work alone."""

    def __init__(self, inner, totals: dict):
        self.inner, self.totals = inner, totals
        self.simulated, self.name = inner.simulated, inner.name
        self.simulated_time_scale = None  # runs keep real time, as they did before Provider had it

    async def complete(self, req):
        t0 = time.process_time()
        resp = await self.inner.complete(req)
        self.totals["sim_cpu"] += time.process_time() - t0
        self.totals["calls"] += 1
        return resp

    async def aclose(self):
        await self.inner.aclose()


class FixedLatency(CpuMeter):
    """Every call takes exactly ``latency`` seconds of wall time; the content is the
    simulator's (at zero latency)."""

    def __init__(self, inner, totals: dict, latency: float, runs: dict):
        super().__init__(inner, totals)
        self.latency, self.runs = latency, runs

    async def complete(self, req):
        t0 = time.perf_counter()
        resp = await super().complete(req)
        await asyncio.sleep(self.latency)
        _note("called", time.perf_counter() - t0)
        return resp


_RUN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("bench_run", default=None)


def _note(what: str, seconds: float) -> None:
    """Add ``seconds`` to the current run's ``what`` (the run whose task is awaiting)."""
    run = _RUN.get()
    if run is not None:
        run[what] = run.get(what, 0.0) + seconds
        run[what + "_n"] = run.get(what + "_n", 0) + 1


class TurnTimer:
    """Times, per run, its wall time, its model calls and its waits for a group commit
    (``Committer.commit``: the reservation's, the records' before a settlement, the seal's),
    so the concurrency line says where a turn's time goes besides the model call."""

    def __init__(self):
        self.runs: list[dict] = []
        self.passes: list[float] = []
        self.lags: list[float] = []

    def install(self, backends) -> None:
        inner, runs = backends.run_agent, self.runs

        async def run_agent(**kw):
            run: dict = {}
            _RUN.set(run)
            t0 = time.perf_counter()
            try:
                return await inner(**kw)
            finally:
                run["wall"] = time.perf_counter() - t0
                runs.append(run)
        backends.run_agent = run_agent
        c = committer()
        commit = c.commit

        async def timed(ticket=None):
            t0 = time.perf_counter()
            try:
                await commit(ticket)
            finally:
                _note("commit", time.perf_counter() - t0)
        c.commit = timed
        one_pass, passes = c._pass, self.passes

        def timed_pass(*a):
            t0 = time.perf_counter()
            try:
                return one_pass(*a)
            finally:
                passes.append(time.perf_counter() - t0)
        c._pass = timed_pass

    async def watch_loop(self) -> None:
        """How late the event loop wakes a 5 ms timer: the delay every wake-up (a commit
        done, a reply arrived) waits for on a busy loop."""
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            self.lags.append(time.perf_counter() - t0 - 0.005)

    def report(self) -> str:
        turns = sum(r.get("called_n", 0) for r in self.runs) or 1
        per = lambda k: 1000 * sum(r.get(k, 0.0) for r in self.runs) / turns
        gap = per("wall") - per("called")
        waits = sum(r.get("commit_n", 0) for r in self.runs) / turns
        mid = lambda xs: 1000 * sorted(xs)[len(xs) // 2] if xs else 0.0
        return (f"per model call: harness wall {gap:.1f} ms beside the call, of which waiting for "
                f"group commits {per('commit'):.1f} ms ({waits:.2f} waits per call; a commit pass takes "
                f"{1000 * sum(self.passes) / max(len(self.passes), 1):.1f} ms on average, and the event loop "
                f"wakes a timer {mid(self.lags):.1f} ms late at the median)")


class HandleMeter:
    """Adds up the CPU time of the simulated endpoint alone (``SimBackend.handle``: deciding
    the turn and building its body or chunks), so that parsing a reply or assembling a
    stream counts as the harness's work."""

    def __init__(self, inner, totals: dict):
        self.inner, self.totals = inner, totals
        self.simulated, self.name = inner.simulated, inner.name
        self.simulated_time_scale = None  # runs keep real time, as they did before Provider had it
        backend = inner.backend
        if not getattr(backend, "_metered", False):
            handle = backend.handle

            def metered(*a, **kw):
                t0 = time.process_time()
                try:
                    return handle(*a, **kw)
                finally:
                    totals["sim_cpu"] += time.process_time() - t0
            backend.handle, backend._metered = metered, True

    async def complete(self, req):
        self.totals["calls"] += 1
        return await self.inner.complete(req)

    async def aclose(self):
        await self.inner.aclose()


def _prepare(root: Path, seeds: int, concurrency: int, stream: bool = False) -> Store:
    spec = root / "BENCH.toml"
    if stream:
        (root / "sim-stream.toml").write_text(STREAM_CATALOG)
    spec.write_text(SPEC.format(seeds=list(range(1, seeds + 1)), concurrency=concurrency,
                                catalog="sim-stream.toml" if stream else "sim"))
    store = Store(root / "runs", fsync=FSYNC[0])
    prereg(store, spec)
    return store


def _backends(wrap):
    b = default_backends({"latency_scale": 0})
    inner = b.provider
    b.provider = lambda tier: wrap(inner(tier))
    return b


def overhead(calls: int, concurrency: int, profile: bool) -> None:
    seeds = max(1, math.ceil(calls / (runs_per_seed() * CALLS_PER_RUN_GUESS)))
    totals = {"sim_cpu": 0.0, "calls": 0}
    with tempfile.TemporaryDirectory(dir=TMPDIR[0]) as tmp:
        store = _prepare(Path(tmp), seeds, concurrency)
        backends = _backends(lambda p: CpuMeter(p, totals))
        prof = cProfile.Profile() if profile else None
        t0, w0 = os.times(), time.perf_counter()
        if prof:
            prof.enable()
        res = asyncio.run(run_experiment(store, "BENCH", backends=backends, handle_signals=False))
        if prof:
            prof.disable()
        t1, wall = os.times(), time.perf_counter() - w0
    user, system = t1.user - t0.user, t1.system - t0.system
    cpu = user + system
    n = totals["calls"]
    harness = cpu - totals["sim_cpu"]
    print(f"grid {res.status}: {len(res.runs)} runs, {n} model calls, concurrency {concurrency}, "
          f"zero-latency sim, fsync {'on' if FSYNC[0] else 'OFF'}")
    print(f"wall {wall:.2f} s; process CPU {cpu:.2f} s (user {user:.2f}, system {system:.2f}: file "
          f"creation, fsync), of which inside the simulator {totals['sim_cpu']:.2f} s")
    print(f"harness CPU per call {1000 * harness / n:.3f} ms (target < 2 ms); "
          f"including the simulator {1000 * cpu / n:.3f} ms; wall per call {1000 * wall / n:.3f} ms")
    print(f"load average {_load()} (CPU time per call grows on a busy machine too: shared caches, "
          "the kernel's own contention)")
    if prof:
        _report_profile(prof)
    print(f"grid_overhead ms_per_call={1000 * harness / n:.3f}")


def stream_overhead(calls: int, concurrency: int) -> None:
    """The same grid twice, simulator work metered at ``SimBackend.handle`` in both: plain,
    then every tier streamed. Prints both figures so they compare like for like."""
    seeds = max(1, math.ceil(calls / (runs_per_seed() * CALLS_PER_RUN_GUESS)))
    figures = {}
    for stream in (False, True):
        totals = {"sim_cpu": 0.0, "calls": 0, "chunks": 0}
        with tempfile.TemporaryDirectory(dir=TMPDIR[0]) as tmp:
            store = _prepare(Path(tmp), seeds, concurrency, stream=stream)
            backends = _backends(lambda p: HandleMeter(p, totals))
            t0 = os.times()
            res = asyncio.run(run_experiment(store, "BENCH", backends=backends, handle_signals=False))
            t1 = os.times()
            chunks = sum(r.body.get("stream", {}).get("chunks", 0) for run in res.runs
                         for r in store.read_run(run["run_id"], verify=False).records if r.kind == "call")
        cpu = (t1.user - t0.user) + (t1.system - t0.system)
        n = totals["calls"]
        figures[stream] = 1000 * (cpu - totals["sim_cpu"]) / n
        print(f"{'streamed' if stream else 'plain'} grid {res.status}: {len(res.runs)} runs, {n} calls"
              + (f", {chunks} chunks ({chunks / n:.0f} per call)" if stream else "")
              + f"; harness CPU per call {figures[stream]:.3f} ms (simulator endpoint {totals['sim_cpu']:.2f} s)")
    print(f"streaming adds {figures[True] - figures[False]:.3f} ms of harness CPU per call "
          f"({figures[True] / figures[False]:.2f}x the plain call measured the same way)")
    print(f"grid_stream ms_per_call={figures[True]:.3f}")


def concurrency_efficiency(latency: float, concurrency: int, seeds: int) -> None:
    totals = {"sim_cpu": 0.0, "calls": 0}
    with tempfile.TemporaryDirectory(dir=TMPDIR[0]) as tmp:
        store = _prepare(Path(tmp), seeds, concurrency)
        backends = _backends(lambda p: FixedLatency(p, totals, latency, {}))
        timer = TurnTimer()
        timer.install(backends)
        t0, w0 = os.times(), time.perf_counter()
        res = asyncio.run(_watched(run_experiment(store, "BENCH", backends=backends, handle_signals=False),
                                   timer.watch_loop()))
        t1, wall = os.times(), time.perf_counter() - w0
        started = sorted((_start_of(store, r["run_id"]) for r in res.runs))
    serial = [c * latency for _, c in started]
    ideal = max(sum(serial) / concurrency, max(serial))
    eff = ideal / wall
    bound = ideal / _list_schedule(serial, concurrency)
    print(f"grid {res.status}: {len(res.runs)} runs, {totals['calls']} calls of {latency} s each, "
          f"concurrency {concurrency}")
    print(f"wall {wall:.2f} s; ideal {ideal:.2f} s (max of total call time / {concurrency} = "
          f"{sum(serial) / concurrency:.2f} s and the longest run = {max(serial):.2f} s)")
    print(f"schedule bound {bound:.3f}: the efficiency of a harness that costs nothing, starting the runs "
          f"in the order this grid started them (CPU-independent; the rest of the gap is harness time)")
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    print(f"process CPU {cpu:.2f} s (user {t1.user - t0.user:.2f}, system {t1.system - t0.system:.2f}), "
          f"{1000 * cpu / totals['calls']:.3f} ms per call; load average {_load()}")
    print(timer.report())
    print(f"efficiency {eff:.3f} (target >= 0.9)")
    print(f"grid_concurrency cpu_ms_per_call={1000 * cpu / totals['calls']:.3f}")
    print(f"grid_concurrency efficiency={eff:.3f}")


async def _watched(main, watcher):
    """``main``'s result, with ``watcher`` running beside it until it is done."""
    side = asyncio.create_task(watcher)
    try:
        return await main
    finally:
        side.cancel()


def _load() -> str:
    """The 1, 5 and 15 minute load averages (other work competing for the CPUs)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _start_of(store: Store, run_id: str) -> tuple[str, int]:
    """(when the run started, its model calls)."""
    recs = store.read_run(run_id, verify=False).records
    return recs[0].at, sum(1 for r in recs if r.kind == "call")


def _list_schedule(durations: list[float], slots: int) -> float:
    """Makespan of starting ``durations`` in order, each on the first free slot."""
    free = [0.0] * slots
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def _report_profile(prof: cProfile.Profile) -> None:
    prof.dump_stats("grid.prof")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    print("\n".join(out.getvalue().splitlines()[:45]))
    print("(full profile in grid.prof)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=None, help="overhead mode: at least this many model calls")
    ap.add_argument("--latency", type=float, default=None, help="concurrency mode: seconds per call")
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=4, help="concurrency mode: seeds per cell (grid size)")
    ap.add_argument("--profile", action="store_true", help="overhead mode: cProfile the grid")
    ap.add_argument("--no-fsync", action="store_true",
                    help="no fsync (not durable): the cost that writing off the event loop could remove")
    ap.add_argument("--grid-order", action="store_true",
                    help="start runs in plain grid order (the runner before longest-first), for comparison")
    ap.add_argument("--tmpdir", default=None, help="put the runs directory here (default: the system temp dir)")
    args = ap.parse_args()
    TMPDIR[0] = args.tmpdir
    FSYNC[0] = not args.no_fsync
    if args.grid_order:
        import benchclaw.experiments.runner

        benchclaw.experiments.runner.longest_first = lambda units, history, prior, capped=(): list(units)
    if args.latency is not None:
        concurrency_efficiency(args.latency, args.concurrency or 16, args.seeds)
    else:
        overhead(args.calls or 2000, args.concurrency or 8, args.profile)
        stream_overhead(args.calls or 2000, args.concurrency or 8)


if __name__ == "__main__":
    sys.exit(main())
