"""Peak memory of ``benchclaw export``, ``benchclaw-verify`` and ``benchclaw build`` against
the number of runs.

For each size it builds a runs directory the way ``bench/verify.py`` does (a registered
grid run by the real runner on the zero-latency simulator, fsync off, every tier on every
cell of the shipped tasks), then runs each command through its real CLI entry point in a
fresh interpreter and reads that process's own high-water mark (``VmHWM``) when the
command returns. The verifier's and the site builder's forked workers are reported
separately (``*_worker_mb``, the largest one; most of a worker's pages are shared
copy-on-write with its parent).

Target (issue 17): at the larger size each peak <= 500 MB and within 1.3x of the smaller
size's. One line per size:
``memory runs=N export_peak_mb=A verify_peak_mb=B build_peak_mb=C``

    python bench/memory.py                       # 5,000 and 20,000 runs
    python bench/memory.py --sizes 500,2000      # a quick run
    python bench/memory.py --workdir /tmp/bm     # keep the runs (runs-N/) and reuse them
    python bench/memory.py --workdir /tmp/bm --only verify   # one command (verify: the kept bundle.zip)

Building the grid takes most of the time (about 10-30 ms of CPU per run); with
``--workdir`` a second measurement reuses it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify import EXP, build_runs  # noqa: E402  (the same grid bench/verify.py builds)

# Runs a console-script entry point in this interpreter and prints its own VmHWM (and
# its children's largest ru_maxrss) as JSON on stderr's last line. ``SystemExit`` is
# the CLI's normal way out.
_WRAP = r"""
import json, resource, sys
mod, fn = sys.argv[1].split(":")
sys.argv = [sys.argv[1]] + sys.argv[2:]
def own_peak_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
code = 0
try:
    getattr(__import__(mod, fromlist=[fn]), fn)()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
print(json.dumps({"exit": code, "peak_mb": own_peak_mb(),
                  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}),
      file=sys.stderr)
"""


def measure(entry: str, *args: str) -> dict:
    """Run ``entry`` (``module:function``) with ``args`` in a fresh interpreter."""
    t0 = time.perf_counter()
    # -P: the benchclaw on sys.path, not one in the current folder
    res = subprocess.run([sys.executable, "-P", "-c", _WRAP, entry, *args], capture_output=True, text=True)
    lines = res.stderr.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"{entry} {' '.join(args)} failed:\n{res.stderr[-2000:]}") from None
    if got["exit"] != 0:
        raise SystemExit(f"{entry} {' '.join(args)} exited {got['exit']}:\n{res.stderr[-2000:]}")
    got["seconds"] = time.perf_counter() - t0
    return got


COMMANDS = ("export", "verify", "build")


def one_size(workdir: Path, runs: int, only: tuple[str, ...] = COMMANDS) -> dict:
    """Measure the commands in ``only`` at this size (verify without export: the bundle
    an earlier measurement left in the workdir)."""
    wd = workdir / f"runs-{runs}"
    wd.mkdir(parents=True, exist_ok=True)
    root = build_runs(wd, runs)
    n = sum(1 for _ in (root / "runs").glob("*/*.jsonl"))
    bundle, site = wd / "bundle.zip", wd / "site"
    got: dict[str, dict] = {}
    if "export" in only:
        got["export"] = measure("benchclaw.cli:main", "export", EXP, "--runs", str(root), "-o", str(bundle))
    if "verify" in only:
        if not bundle.is_file():
            raise SystemExit(f"{bundle} is missing: measure export first (without --only)")
        got["verify"] = measure("benchclaw.verify.cli:main", str(bundle))
    if "build" in only:
        subprocess.run(["rm", "-rf", str(site)], check=True)  # a full build, not an incremental one
        got["build"] = measure("benchclaw.cli:main", "build", "--runs", str(root), "-o", str(site))
    for name, one in got.items():
        print(f"  {name}: {one['seconds']:.1f} s wall, own peak {one['peak_mb']:.0f} MB, "
              f"largest child {one['worker_mb']:.0f} MB", file=sys.stderr)
    if bundle.is_file():
        print(f"  bundle {bundle.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
    peaks = " ".join(f"{k}_peak_mb={v['peak_mb']:.0f}" for k, v in got.items())
    workers = " ".join(f"{k}_worker_mb={v['worker_mb']:.0f}" for k, v in got.items() if k != "export")
    print(f"memory runs={n} {peaks} {workers}".rstrip(), flush=True)
    return {"runs": n, **{k: v["peak_mb"] for k, v in got.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,20000", help="comma-separated run counts (at least this many each)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the runs here and reuse them")
    ap.add_argument("--only", default=",".join(COMMANDS),
                    help="comma-separated commands to measure (export, verify, build); default all")
    args = ap.parse_args()
    only = tuple(c.strip() for c in args.only.split(",") if c.strip())
    if not only or set(only) - set(COMMANDS):
        ap.error(f"--only takes some of {', '.join(COMMANDS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory() as tmp_s:
        workdir = args.workdir or Path(tmp_s)
        got = [one_size(workdir, n, only) for n in sizes]
    if len(got) >= 2:
        small, big = got[0], got[-1]
        ratios = {k: big[k] / small[k] for k in only}
        print("growth " + " ".join(f"{k}={v:.2f}x" for k, v in ratios.items())
              + f" (target: <= 1.3x from {small['runs']} to {big['runs']} runs, each <= 500 MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
