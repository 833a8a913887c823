"""Site build benchmark: N synthetic runs, a full build, then rebuilds after one new run.

Targets (issue #8): 10,000 runs build in at most 20 s and 1 GB peak memory on 2 cores; a
rebuild after one new run takes at most 2 s. The runs are written by
``tests/synth_runs.py`` (the FORMAT.md run format, simulated content) into a temporary
directory. Each build runs in a fresh child process; peak memory is the largest total
PSS of that process and its workers (shared pages counted once), sampled every 20 ms.

    python bench/site_build.py --runs 10000

Prints the figures, then a last line
``site_build runs=N seconds=S peak_mb=M cpu_s=C rebuild_s=R rebuild_exp_s=E``: ``rebuild_s`` after
one run outside any experiment, ``rebuild_exp_s`` after one run inside the 10,000-run
experiment (its analysis is recomputed, so that figure includes ``summarise``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_CHILD = "import sys; from benchclaw.site import build_site; build_site(sys.argv[1], sys.argv[2])"


def _pss_kb(pid: int) -> int:
    """Proportional set size: shared pages (a forked worker's copy-on-write view of its
    parent) count once across processes, so the sum over a tree is its real footprint."""
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                return next((int(ln.split()[1]) for ln in f if ln.startswith(key)), 0)
        except OSError:
            continue
    return 0


def _tree_rss_kb(pid: int) -> int:
    """Total memory (PSS) of ``pid`` and its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        total += _pss_kb(p)
    return total


def timed_build(runs: Path, out: Path) -> tuple[float, float, float]:
    """(wall seconds, peak MB, CPU seconds of the build and its workers) of one build in a
    child process. Other work on the machine inflates the wall time, not the CPU time."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(runs), str(out)])
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            done.wait(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    rc = proc.wait()
    seconds = time.perf_counter() - t0
    done.set()
    t.join()
    if rc != 0:
        raise SystemExit(f"build failed with exit code {rc}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, peak / 1024, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, default=None, help="Use this folder instead of a temporary one.")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root, for tests/
    from tests.synth_runs import add_run, synth_runs

    with tempfile.TemporaryDirectory(prefix="site-bench-") as tmp:
        base = args.keep or Path(tmp)
        runs, out = base / "runs", base / "site"
        t0 = time.perf_counter()
        synth_runs(runs, args.runs)
        print(f"generated {args.runs} synthetic runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        print(f"load average before the build: {os.getloadavg()[0]:.2f} (the figures assume an idle machine)")
        seconds, peak, cpu = timed_build(runs, out)
        print(f"full build: {seconds:.2f} s wall, {cpu:.1f} s CPU, peak {peak:.0f} MB (target: 20 s, 1024 MB)")
        noop, _, noop_cpu = timed_build(runs, out)
        print(f"rebuild, nothing new: {noop:.2f} s wall, {noop_cpu:.2f} s CPU")
        add_run(runs, experiment=None, seed=10**6)
        rebuild, _, rebuild_cpu = timed_build(runs, out)
        print(f"rebuild after one new run outside any experiment: {rebuild:.2f} s wall, {rebuild_cpu:.2f} s CPU "
              "(target: 2 s)")
        add_run(runs, experiment="E01", seed=10**6 + 1)
        rebuild_exp, _, exp_cpu = timed_build(runs, out)
        print(f"rebuild after one new run in the experiment (analysis recomputed): {rebuild_exp:.2f} s wall, "
              f"{exp_cpu:.2f} s CPU")
        print(f"site_build runs={args.runs} seconds={seconds:.2f} peak_mb={peak:.0f} cpu_s={cpu:.1f} "
              f"rebuild_s={rebuild:.2f} rebuild_exp_s={rebuild_exp:.2f}")

if __name__ == "__main__":
    main()
