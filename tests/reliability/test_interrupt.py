"""An interrupt stops spending at once (issue 14), against a zero-latency endpoint.

`benchclaw run` of a 720-run grid on the simulator with its latency scaled to 0 (the
fastest endpoint there is: a call never waits) gets SIGINT or SIGTERM once its ledger
holds some reservations. Every call reserves in the ledger first, so the ledger's
`reserve` records tell when calls started. The suite asserts that no call started more
than a moment after the signal, that the process exited 130 within a second or two (plus
the calls in flight, which take no time here), and that the evidence is whole.

Before the fix the runner ran on for minutes after SIGINT (3,645 calls started after it,
2 minutes on this machine): a cancellation that raced a finished call was lost, and the
drivers never checked that the grid had been interrupted.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchclaw.evidence.check import check_store
from benchclaw.experiments import prereg
from benchclaw.evidence.store import Store

from .helpers import record_figures, write_spec

CLI = "import sys; from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()"
GRACE_S = 1.0      # the handler runs on the event loop: a busy loop may see the signal a little late


def _reserves(root) -> list[float]:
    out = []
    for path in (root / "ledgers").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "reserve":
                at = dt.datetime.strptime(rec["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
                out.append(at.timestamp())
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_stops_new_calls_at_once_on_a_zero_latency_endpoint(tmp_path, sig):
    spec = write_spec(tmp_path / "experiments", "INT", tasks=["*"], profiles=["direct", "checker"],
                      seeds=list(range(1, 11)), tiers=["lightning", "super", "ultra"], usd="500.00",
                      settings={"concurrency": 8})
    store = Store(tmp_path / "runs")
    prereg(store, spec)
    env = {**os.environ, "BENCHCLAW_SIM_LATENCY_SCALE": "0"}
    proc = subprocess.Popen([sys.executable, "-c", CLI, "run", "INT", "--runs", "runs"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(_reserves(store.root)) < 40 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the grid ended before the signal"
    signalled, t0 = time.time(), time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the grid ran on for a minute after the interrupt")
    exit_s = time.monotonic() - t0
    reserves = _reserves(store.root)
    late = [t for t in reserves if t > signalled + GRACE_S]
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err[-500:])
    assert not late, f"{len(late)} calls started more than {GRACE_S} s after {sig.name}"
    assert exit_s < 1 + 2 * GRACE_S, f"exit took {exit_s:.2f} s after {sig.name}"
    report = check_store(Store(store.root))
    assert report.ok and report.open_runs == 0
    record_figures("interrupt", signal=sig.name, calls_before=len(reserves), calls_after_grace=len(late),
                   exit_s=round(exit_s, 2), runs=report.runs, grid_runs=720)
