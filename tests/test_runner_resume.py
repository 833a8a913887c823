"""Resume after SIGKILL: a grid killed halfway (in a subprocess) finishes on the next
invocation with every earlier sealed run intact and a consistent ledger."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_runner import FakeAgent, journal, run, setup

from benchclaw.evidence.check import check_store
from benchclaw.experiments.ledger import read_ledger

HERE = Path(__file__).resolve().parent

CHILD = """
import asyncio, sys
sys.path.insert(0, {here!r})
from tests.test_runner import FakeAgent, fake_backends
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store
asyncio.run(run_experiment(Store({root!r}, fsync=False), "R1", backends=fake_backends(FakeAgent(latency=0.02)),
                           concurrency=4, handle_signals={signals}))
"""


def _start(store, signals=False):
    code = CHILD.format(here=str(HERE.parent), root=str(store.root), signals=signals)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_runs(store, n, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list((store.root / "runs").glob("*/*.jsonl"))) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"child ended early: {proc.stderr.read().decode()}")
        time.sleep(0.01)
    raise AssertionError("child made no progress")


def test_resume_after_sigkill_completes_with_earlier_runs_intact(tmp_path):
    store, _ = setup(tmp_path)
    proc = _start(store)
    _wait_for_runs(store, 30, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {p.name: p.read_bytes() for p in (store.root / "runs").glob("*/*.jsonl")}
    killed_ledger = journal(store, "grid.start")[0]["ledger"]
    killed = read_ledger(store, killed_ledger)
    assert not killed.closed  # cut off: no ledger.close

    res = run(store, FakeAgent())
    assert res.status == "complete"
    after = {p.name: p.read_bytes() for p in (store.root / "runs").glob("*/*.jsonl")}
    assert all(after[n] == b for n, b in before.items())
    assert not store.open_run_paths() and check_store(store).ok
    runs = journal(store, "run")
    assert {r["run_id"] for r in runs} == {n.removesuffix(".jsonl") for n in after}  # every sealed run is journaled (adopted)
    recovered = [r for r in runs if r.get("adopted_by") and r["status"] == "aborted"]
    assert any(r["called_model"] for r in recovered)  # cut off mid-call: its reservation says so
    grid = [(r["cell"], r["tier"]) for r in runs if r["policy"] == "grid" and r["called_model"]]
    assert len(grid) == len(set(grid)) == 54
    assert len(journal(store, "trial")) == 18
    # Ledger: the killed invocation's open reservations count at their upper bound and are
    # carried into the resumed invocation's ledger.
    resumed = read_ledger(store, res.ledger)
    assert resumed.carried_usd == killed.spent_usd and resumed.closed and not resumed.open


def test_sigterm_seals_open_runs_as_aborted(tmp_path):
    store, _ = setup(tmp_path)
    proc = _start(store, signals=True)
    _wait_for_runs(store, 10, proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not store.open_run_paths()
    ends = journal(store, "grid.end")
    assert ends and ends[-1]["status"] == "interrupted"
    led = read_ledger(store, journal(store, "grid.start")[0]["ledger"])
    assert led.closed and not led.open
    assert journal(store, "stop")[-1]["rule"] == "interrupted"
