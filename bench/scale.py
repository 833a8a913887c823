"""Scale benchmarks: the local executor against Ray with 1 and 2 workers, the ledger
authority's reservation rate, storage per run and merge time (docs/scale.md).

Each configuration runs the same registered experiment (3 tasks x 1 profile x N seeds x
3 tiers, every tier, live ladder) on the built-in simulator, in a fresh runs directory
(fsync on), and prints one line:

    scale executor=ray workers=W runs=N seconds=S runs_per_s=R overspend_usd=0

``overspend_usd`` is how far the ledger's worst-case spend went past its limit (it must
be 0; with ``--budget`` set low the grid stops mid-way and the line still says 0).

Workloads:
    --workload latency   the simulator sleeping its simulated latency (mean ~3.3 s a call)
                         times --latency-scale (default 0.1): I/O-bound, like a real API
    --workload cpu       zero latency, and each run followed by --check-ms of CPU work in
                         the worker (a heavy check: a database per migration, a local model)

    python bench/scale.py --workload latency
    python bench/scale.py --workload cpu --check-ms 300
    python bench/scale.py --authority        # reservations/s through the Ray ledger authority
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from benchclaw.experiments.executor import Backends, default_backends
from benchclaw.evidence.merge import merge_store
from benchclaw.experiments import prereg
from benchclaw.experiments.ledger import read_ledger
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store

SPEC = """v = 1
id = "SCALE"
title = "scale benchmark (simulated)"
[grid]
tasks = ["quotes-incident", "cents-fees", "pricing-seats"]
profiles = ["direct"]
seeds = {seeds}
tiers = ["lightning", "super", "ultra"]
catalog = "sim"
all_tiers = true
[settings]
max_tokens = 4096
concurrency = {concurrency}
[budget]
usd = "{budget}"
per_call_usd = "0.05"
[policies]
live = ["ladder"]
"""


class HeavyCheck:
    """``run_agent`` followed by ``ms`` of CPU work (SHA-256 over a buffer), in the process
    that ran the agent: the shape of a check that needs a CPU (or a database) per run."""

    def __init__(self, run_agent, ms: int):
        self.run_agent, self.ms = run_agent, ms

    async def __call__(self, **kw):
        result = await self.run_agent(**kw)
        end = time.process_time() + self.ms / 1000
        buf = b"x" * 65536
        while time.process_time() < end:
            buf = hashlib.sha256(buf).digest() * 2048
        return result


def one(args, executor: str, workers: int | None) -> dict:
    """Run the grid once; returns its figures."""
    tmp = Path(tempfile.mkdtemp(prefix="benchclaw-scale-"))
    spec = tmp / "SCALE.toml"
    spec.write_text(SPEC.format(seeds=list(range(1, args.seeds + 1)), concurrency=args.concurrency,
                                budget=args.budget))
    store = Store(tmp / "runs")
    prereg(store, spec)
    latency = args.latency_scale if args.workload == "latency" else 0
    sim = {"latency_scale": latency}
    base = default_backends(sim)
    run_agent = HeavyCheck(base.run_agent, args.check_ms) if args.workload == "cpu" else base.run_agent
    backends = Backends(base.tasks, base.catalog, base.profile, base.provider, run_agent)
    runner = None
    if executor == "ray":
        import ray

        from benchclaw.experiments.ray_executor import RayExecutor

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        runner = RayExecutor(task_cpus=args.task_cpus)
    t0 = time.perf_counter()
    res = asyncio.run(run_experiment(store, "SCALE", backends=backends, handle_signals=False, executor=runner,
                                     concurrency=args.concurrency))
    seconds = time.perf_counter() - t0
    if executor == "ray":
        import ray

        ray.shutdown()
    st = read_ledger(store, res.ledger)
    runs = len(store.run_ids())
    size = sum(p.stat().st_size for p in (tmp / "runs").rglob("*") if p.is_file())
    t1 = time.perf_counter()
    merge_store(Store(tmp / "merged"), store)
    merge_s = time.perf_counter() - t1
    return {"runs": runs, "seconds": seconds, "status": res.status,
            "overspend": max(Decimal(0), st.spent_usd - st.limits.usd), "bytes": size, "merge_s": merge_s}


def authority_rate(n: int, workers: int) -> None:
    """Reserve + settle ``n`` times from ``workers`` Ray tasks through one authority."""
    import ray

    from benchclaw.experiments.ray_executor import _Authority
    from benchclaw.experiments.ledger import Ledger, Limits

    tmp = Path(tempfile.mkdtemp(prefix="benchclaw-authority-"))
    store = Store(tmp / "runs")
    Ledger.create(store, "AUTH-1", Limits(Decimal("1000000")), experiment="AUTH", invocation="AUTH-1")
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    actor = ray.remote(num_cpus=0, max_concurrency=1)(_Authority).remote(str(store.root), "AUTH-1", True)
    ray.get(actor.ready.remote())

    def loop(authority, k: int, tag: str) -> int:
        for i in range(k):
            ok, rid = ray.get(authority.reserve.remote(tag, "r", f"{i}.0", 100, Decimal("0.0001"), [], {}))
            ray.get(authority.settle.remote(tag, rid, 50, Decimal("0.00005"), None, [], {}))
        return k

    task = ray.remote(num_cpus=1)(loop)
    t0 = time.perf_counter()
    ray.get([task.remote(actor, n // workers, f"w{w}") for w in range(workers)])
    seconds = time.perf_counter() - t0
    ray.shutdown()
    local = Ledger.open(store, "AUTH-1")
    t1 = time.perf_counter()
    for i in range(n):
        local.settle(local.reserve(run="r", key=f"{i}.1", tokens=100, usd=Decimal("0.0001")), tokens=50,
                     usd=Decimal("0.00005"))
    local_s = time.perf_counter() - t1
    print(f"authority executor=ray callers={workers} reservations={n} seconds={seconds:.2f} "
          f"reservations_per_s={n / seconds:.0f} (reserve+settle, fsync on)")
    print(f"authority executor=local reservations={n} seconds={local_s:.2f} reservations_per_s={n / local_s:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["latency", "cpu"], default="latency")
    ap.add_argument("--latency-scale", type=float, default=0.1)
    ap.add_argument("--check-ms", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--budget", default="1000")
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--task-cpus", type=float, default=1.0, help="Ray CPUs per run (0.125: 8 runs a CPU)")
    ap.add_argument("--authority", action="store_true", help="measure the ledger authority instead")
    ap.add_argument("--reservations", type=int, default=2000)
    args = ap.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if args.authority:
        authority_rate(args.reservations, max(args.workers or [2]))
        return
    label = (f"latency_scale={args.latency_scale}" if args.workload == "latency" else f"check_ms={args.check_ms}")
    print(f"# workload={args.workload} {label} concurrency={args.concurrency} task_cpus={args.task_cpus} "
          "(simulated)", file=sys.stderr)
    for executor, workers in [("local", None)] + [("ray", w) for w in args.workers]:
        r = one(args, executor, workers)
        print(f"scale executor={executor} workers={workers or 1} runs={r['runs']} seconds={r['seconds']:.2f} "
              f"runs_per_s={r['runs'] / r['seconds']:.2f} overspend_usd={r['overspend']}", flush=True)
        print(f"  status={r['status']} bytes_per_run={r['bytes'] // max(r['runs'], 1)} "
              f"merge_s={r['merge_s']:.2f} (merging this runs directory into an empty one)", flush=True)


if __name__ == "__main__":
    main()
