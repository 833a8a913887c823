"""`benchclaw demo` end to end (target: under 60 s on 2 cores, with every task family).

Runs the demo in a fresh temporary directory, as a newcomer would, and prints the time of
each stage, the process CPU time (user + system: what the demo itself costs, whatever the
rest of the machine is doing), the load average, and the runs per family. Last line:
`demo wall_s=X cpu_s=Y runs=N families=F`.

    python bench/demo.py
"""

from __future__ import annotations

import collections
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from benchclaw.demo import run_demo


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def runs_by_family(runs: Path) -> dict[str, int]:
    counts: collections.Counter = collections.Counter()
    for log in runs.glob("runs/*/*.jsonl"):
        with log.open(encoding="utf-8") as f:
            counts[json.loads(f.readline())["body"]["task"]["family"]] += 1
    return dict(sorted(counts.items()))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        load0 = os.getloadavg()[0]
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        result = run_demo(Path(tmp) / "demo", say=lambda s: None, note=lambda s: None)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        fams = runs_by_family(result.runs)
    for stage, secs in result.timings.items():
        print(f"{stage:10s} {secs:7.2f} s")
    print(f"load average at start: {load0:.1f} (2 cores: above 2 means other processes compete)")
    print("runs per family:", ", ".join(f"{k} {v}" for k, v in fams.items()))
    print(f"demo wall_s={wall:.1f} cpu_s={cpu:.1f} runs={sum(fams.values())} families={len(fams)}")


if __name__ == "__main__":
    main()
