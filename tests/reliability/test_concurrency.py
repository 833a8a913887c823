"""Many processes, one runs directory (issue 14): the lock protocol under real processes.

Each round registers two experiments in one shared runs directory and starts `benchclaw
run` of the first against a slow simulated endpoint. While it runs, a seeded schedule
fires the other commands that touch the directory, each in its own process, at random
moments: `runs recover`, `try` (two at once), `export`, `build`, `runs check`, a second
`run` of the same experiment (refused) and a `run` of the second experiment (two grid
runners, each with several runs in flight: two machines' worth of writers). After every
round the suite checks, from the files themselves:

- `benchclaw runs check` passes and no run is left open;
- no live run was sealed by another process: no sealed run carries `recovered` or
  `interrupted` in its `run.end` (nothing was killed, so only a protocol breach makes one);
- every command ended as it should: the grids complete, the refused `run` exits 2 naming
  the lock, every `recover` left the live runs alone;
- every exported bundle verifies (`benchclaw-verify`, exit 0).

Before the lock protocol, `recover` sealed the live runs as aborted, the grid died with
"internal error: FileNotFoundError" and `runs check` found them damaged; `run` sealed a
`try` in flight the same way; `export` mid-grid wrote a bundle that did not verify.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchclaw.experiments import prereg
from benchclaw.evidence.store import Store

from .helpers import record_figures, write_spec

CLI = "import sys; from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()"
VERIFY = "import sys; from benchclaw.verify.cli import main; sys.argv[0] = 'benchclaw-verify'; main()"
ROUNDS = 4
SEED = 20261201
LATENCY = "0.08"   # a grid of 12 runs takes a few seconds: every command lands mid-grid
# The first grid is slower still, and the second `run` of its experiment starts only once
# that grid holds an open run: on a loaded machine an interpreter can take seconds to reach
# the lock, and a grid already finished by then would (rightly) let it through.
GRID_LATENCY = "0.2"
OPS = ("recover", "try", "try", "export", "build", "check", "run-same", "run-other", "recover")


def _cli(*args: str, cwd: Path, latency: str = LATENCY) -> subprocess.Popen:
    env = {**os.environ, "BENCHCLAW_SIM_LATENCY_SCALE": latency}
    return subprocess.Popen([sys.executable, "-c", CLI, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _command(op: str, rnd: int, i: int) -> list[str]:
    e, f = f"C{rnd}E", f"C{rnd}F"
    return {"recover": ["runs", "recover", "--runs", "runs"],
            "try": ["try", "cents-fees", "--tier", "super", "--seed", str(100 * rnd + i), "--runs", "runs"],
            "export": ["export", e, "--runs", "runs", "-o", f"{e}-{i}.zip"],
            "build": ["build", "--runs", "runs", "-o", f"site{rnd}-{i}"],
            "check": ["runs", "check", "--runs", "runs"],
            "run-same": ["run", e, "--runs", "runs"],
            "run-other": ["run", f, "--runs", "runs", "--concurrency", "3"]}[op]


def _ends(root: Path) -> list[dict]:
    out = []
    for p in sorted((root / "runs").glob("*/*.jsonl")):
        last = p.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        out.append(json.loads(last)["body"])
    return out


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    work = tmp_path_factory.mktemp("concurrency")
    store = Store(work / "runs")
    done = []
    for rnd in range(ROUNDS):
        rng = random.Random(SEED + rnd)
        for exp in (f"C{rnd}E", f"C{rnd}F"):
            prereg(store, write_spec(work / "experiments", exp, tasks=["cents-fees", "quotes-vendor"],
                                     profiles=["direct"], seeds=[1, 2], tiers=["lightning", "super", "ultra"],
                                     settings={"concurrency": 4}))
        ops = rng.sample(OPS, k=len(OPS))
        at = sorted(round(rng.uniform(0.4, 3.0), 2) for _ in ops)
        t0 = time.monotonic()
        grid = _cli("run", f"C{rnd}E", "--runs", "runs", cwd=work, latency=GRID_LATENCY)
        started = []
        for i, (op, when) in enumerate(zip(ops, at)):
            time.sleep(max(0.0, when - (time.monotonic() - t0)))
            while op == "run-same" and grid.poll() is None and not list((work / "runs" / "open").glob("*")):
                time.sleep(0.02)
            assert op != "run-same" or grid.poll() is None, "the grid ended before its second run started"
            started.append((op, i, _cli(*_command(op, rnd, i), cwd=work)))
        results = [("grid", -1, *grid.communicate(timeout=240), grid.returncode)]
        for op, i, proc in started:
            out, err = proc.communicate(timeout=240)
            results.append((op, i, out, err, proc.returncode))
        check = subprocess.run([sys.executable, "-c", CLI, "runs", "check", "--runs", "runs"], cwd=work,
                               capture_output=True, text=True)
        verified = {}
        for op, i, *_ in results:
            if op == "export":
                bundle = work / f"C{rnd}E-{i}.zip"
                v = subprocess.run([sys.executable, "-c", VERIFY, str(bundle)], capture_output=True, text=True)
                verified[i] = (v.returncode, v.stdout[-2000:] + v.stderr[-2000:])
        done.append({"round": rnd, "ops": list(zip(ops, at)), "results": results, "check": check,
                     "verified": verified, "seconds": time.monotonic() - t0})
    return {"work": work, "rounds": done}


def _of(rnd: dict, op: str) -> list[tuple]:
    return [r for r in rnd["results"] if r[0] == op]


def test_runs_check_passes_and_nothing_is_left_open_after_every_round(rounds):
    for rnd in rounds["rounds"]:
        assert rnd["check"].returncode == 0, (rnd["round"], rnd["check"].stdout, rnd["check"].stderr)
        assert "open run" not in rnd["check"].stdout, rnd["check"].stdout
    assert not list((rounds["work"] / "runs" / "open").glob("*"))


def test_no_live_run_was_sealed_by_another_process(rounds):
    ends = _ends(rounds["work"] / "runs")
    assert ends and not [e for e in ends if e.get("recovered") or e.get("interrupted")]
    for rnd in rounds["rounds"]:
        for _, i, out, err, code in _of(rnd, "recover"):
            assert code == 0, err
            for line in out.splitlines():
                assert "left open: a live process" in line or line == "nothing to recover", line


def test_grids_complete_and_a_second_runner_of_one_experiment_is_refused(rounds):
    for rnd in rounds["rounds"]:
        for op in ("grid", "run-other"):
            for _, _, out, err, code in _of(rnd, op):
                assert code == 0 and ": complete" in out, (rnd["round"], op, out, err)
        for _, _, out, err, code in _of(rnd, "run-same"):
            assert code == 2 and "being run by another process" in err and "\n" not in err.strip(), err


def test_try_build_and_check_in_flight_succeed(rounds):
    for rnd in rounds["rounds"]:
        for op in ("try", "build", "check"):
            for _, _, out, err, code in _of(rnd, op):
                assert code in ((0, 1) if op == "try" else (0,)), (rnd["round"], op, out, err)
                assert "internal error" not in err and "Traceback" not in err, err
        for _, _, out, _, _ in _of(rnd, "try"):
            assert "status: aborted" not in out


def test_every_exported_bundle_verifies(rounds):
    n = 0
    for rnd in rounds["rounds"]:
        for _, i, out, err, code in _of(rnd, "export"):
            assert code == 0, (rnd["round"], err)
            assert rnd["verified"][i][0] == 0, rnd["verified"][i][1]
            n += 1
    assert n == ROUNDS
    waited = sum("waiting: experiment" in r[3] for rnd in rounds["rounds"] for r in _of(rnd, "export"))
    runs = len(list((rounds["work"] / "runs" / "runs").glob("*/*.jsonl")))
    record_figures("concurrency", rounds=ROUNDS, commands=sum(len(r["results"]) for r in rounds["rounds"]),
                   sealed_runs=runs, exports=n, exports_waited=waited,
                   live_runs_left_alone=sum(r[2].count("left open") for rnd in rounds["rounds"]
                                            for r in _of(rnd, "recover")),
                   seconds=round(sum(r["seconds"] for r in rounds["rounds"]), 1))
