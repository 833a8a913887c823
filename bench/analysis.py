"""Analysis speed: ``summarise`` over about N synthetic runs, in memory.

The experiment is ``tests.test_analysis_golden.random_data``: grid runs on three tiers with
some tiers missing, live ladder/speculative/memory trials, reruns, unknown costs, errors,
calls cut off in flight, injections and every metric in a decision rule (the same
generator whose summary bytes a test pins). Building the records is not timed; each
``summarise`` call is (best of ``--repeat``), plus one ``view_run`` pass alone, because
the offline verifier and the site's incremental rebuild both pay it.

    python bench/analysis.py --runs 10000

Last line: ``analysis runs=N seconds=S cpu_s=C views_s=V`` (wall, CPU; best of the repeats).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RUNS_PER_CELL = 3.44  # what random_data averages (grid runs, live trials, reruns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from benchclaw.analysis import summarise, view_run
    from tests.test_analysis_golden import random_data

    t0 = time.perf_counter()
    data = random_data(max(1, round(args.runs / RUNS_PER_CELL)), 11)
    print(f"built {len(data.runs)} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    best = views = cpu = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for run_id, records in data.runs.items():
            try:
                view_run(run_id, records, data.reservations)
            except Exception:  # noqa: BLE001 - the unreadable run the fixture plants
                pass
        views = min(views, time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.process_time()
        summarise(data)
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    print(f"summarise: {best:.3f} s wall, {cpu:.3f} s CPU (view_run alone {views:.3f} s) "
          f"over {len(data.runs)} runs; load average {os.getloadavg()[0]:.2f}")
    print(f"analysis runs={len(data.runs)} seconds={best:.3f} cpu_s={cpu:.3f} views_s={views:.3f}")


if __name__ == "__main__":
    main()
