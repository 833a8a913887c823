"""Start-up time of the two console scripts (target: under 0.3 s each on 2 cores).

Runs each command's --help N times in a fresh interpreter and prints the median and the
worst, then a last line `startup benchclaw_s=X benchclaw_verify_s=Y`.

    python bench/startup.py --repeat 10
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _script(name: str) -> list[str]:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    return [found, "--help"]


def measure(cmd: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    results = {}
    for name in ("benchclaw", "benchclaw-verify"):
        times = measure(_script(name), args.repeat)
        results[name] = statistics.median(times)
        print(f"{name} --help: median {statistics.median(times):.3f} s, worst {max(times):.3f} s "
              f"over {args.repeat} runs (target < 0.3 s)")
    print(f"startup benchclaw_s={results['benchclaw']:.3f} "
          f"benchclaw_verify_s={results['benchclaw-verify']:.3f}")


if __name__ == "__main__":
    main()
