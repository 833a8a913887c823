"""A full disk while the grid appends evidence (issue #10, fifth bullet).

The runs directory lives on a small tmpfs (mounted here when the suite may mount; else a
simulated quota, ``_enospc``, makes writes under it fail with ENOSPC the same way: the
crossing write lands partly, then fails). Experiment A completes first; the disk is then
filled to a few KiB short of full and ``benchclaw run B`` starts in a subprocess. At
several fill levels (so the disk runs out in different places: a blob, a run record, a
ledger line, a journal line) the suite asserts what a user relies on:

- the command fails, non-zero, saying the disk is full, without a traceback;
- nothing earlier is lost: A's sealed runs, journal and ledger are byte for byte intact;
- once space is freed, the next ``benchclaw run B`` recovers (open runs sealed aborted,
  torn lines quarantined) and completes; every chain checks; both experiments' bundles
  export and verify.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchclaw.evidence.store import Store

from .helpers import record_figures, register_and_run, verdict_text, write_spec

REPO = Path(__file__).resolve().parents[2]
CHILD = ("import sys; sys.path.insert(0, {repo!r}); import tests.reliability._enospc as q; q.install(); "
         "from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()")
DISK = 3 * 1024 * 1024
# Bytes left free when B starts. On the tmpfs these run out, in order, in a blob write,
# in a run record (the run file is then closed under the writer), and in a ledger line.
# The simulated quota counts bytes, not pages: its levels are calibrated to hit a blob
# write, a run record and a ledger line too.
LEVELS = {"8KiB": 8 * 1024, "96KiB": 96 * 1024, "128KiB": 128 * 1024}
SIMULATED_LEVELS = {"8KiB": 8 * 1024, "96KiB": 64 * 1024, "128KiB": 32 * 1024}

# (test, level) -> reason, for known bugs (strict xfail; see docs/RELIABILITY.md). Empty:
# the full-disk messages, the torn ledger line and aborted runs' bundles were fixed while
# this suite was written (6a6611f, 08332e7).
KNOWN: dict[tuple[str, str], str] = {}
KNOWN_SIMULATED: dict[tuple[str, str], str] = {}


def _mount(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or os.environ.get("BENCHCLAW_TEST_SIMULATED_ENOSPC") == "1":
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(path)],
                          capture_output=True)
    return proc.returncode == 0


def _cli(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO)), *args], env=env, cwd=cwd,
                          capture_output=True, timeout=120)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.name.endswith(".lock")}


def _fill(mnt: Path, free: int, real: bool, env: dict) -> Path | None:
    if not real:
        env["BENCHCLAW_TEST_ENOSPC"] = f"{mnt}:{free}"
        return None
    st = os.statvfs(mnt)
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - free))
    return filler


def _known(request, test: str, full_disk) -> None:
    reason = (KNOWN if full_disk.real else KNOWN_SIMULATED).get((test, full_disk.level))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture(scope="module", params=list(LEVELS))
def full_disk(request, tmp_path_factory):
    """Experiment A done; the disk filled to LEVELS[level] short of full; `benchclaw run B`;
    space freed; `benchclaw run B` again; `runs check`; both bundles exported and verified."""
    from benchclaw.bundle import export_bundle
    from benchclaw.experiments import prereg
    from benchclaw.verify import verify_bundle

    level, tmp = request.param, tmp_path_factory.mktemp("disk")
    mnt = tmp / "disk"
    real = _mount(mnt)
    try:
        store = Store(mnt / "runs")
        spec_a = write_spec(tmp, "A", tasks=["cents-fees"], tiers=["lightning", "super", "ultra"],
                            profiles=["direct"], settings={"concurrency": 3})
        spec_b = write_spec(tmp, "B", tasks=["quotes-vendor", "cents-refunds"], profiles=["direct"],
                            tiers=["lightning", "super", "ultra"], seeds=[1, 2], settings={"concurrency": 2})
        assert register_and_run(store, spec_a, "A", sim_options={"latency_scale": 0}).status == "complete"
        prereg(store, spec_b)
        before = _snapshot(store.root)
        env = {**os.environ, "BENCHCLAW_SIM_LATENCY_SCALE": "0"}
        filler = _fill(mnt, (LEVELS if real else SIMULATED_LEVELS)[level], real, env)
        first = _cli(["run", "B", "--runs", str(store.root)], env, tmp)
        after = _snapshot(store.root)
        if filler is not None:
            filler.unlink()
        env.pop("BENCHCLAW_TEST_ENOSPC", None)
        resumed = _cli(["run", "B", "--runs", str(store.root)], env, tmp)
        check = _cli(["runs", "check", "--runs", str(store.root)], env, tmp)
        open_left = list(store.open_run_paths())
        verdicts = {}
        for exp in ("A", "B"):
            try:
                export_bundle(store.root, exp, tmp / f"{exp}.zip")
                verdicts[exp] = verdict_text(verify_bundle(tmp / f"{exp}.zip"))
            except Exception as e:  # noqa: BLE001 - an export that fails is a finding, reported below
                verdicts[exp] = f"export failed: {type(e).__name__}: {e}"
    finally:
        if real:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    err = first.stderr.decode("utf-8", "replace")
    record_figures("disk", level=level, real_tmpfs=real, first_exit=first.returncode,
                   message=(err.strip().splitlines() or [""])[-1][:160], resumed_exit=resumed.returncode)
    return SimpleNamespace(level=level, real=real, first=first, err=err, before=before, after=after,
                           resumed=resumed, check=check, open_left=open_left, verdicts=verdicts)


def test_the_full_disk_stops_the_grid_without_a_traceback(full_disk):
    assert full_disk.first.returncode != 0, f"the grid 'completed' on a full disk: {full_disk.first.stdout}"
    assert "Traceback" not in full_disk.err, full_disk.err[-2000:]


def test_the_message_says_the_disk_is_full(full_disk, request):
    _known(request, "message", full_disk)
    last = full_disk.err.strip().splitlines()[-1]
    assert "No space left on device" in last or "disk is full" in last.lower(), last
    assert "internal error" not in last, f"a full disk is not a bug in BenchClaw: {last}"


def test_nothing_written_before_is_lost(full_disk):
    for name, data in full_disk.before.items():
        if name.startswith(("runs/", "objects/")) or "/A/" in name or name.startswith("ledgers/A-"):
            assert full_disk.after.get(name) == data, f"{name} changed while the disk was full"
        else:  # files B appends to (its journal) may only have grown
            assert full_disk.after.get(name, b"").startswith(data), f"{name} lost bytes while the disk was full"


def test_the_next_start_recovers_and_completes(full_disk, request):
    _known(request, "recover", full_disk)
    assert full_disk.resumed.returncode == 0, full_disk.resumed.stderr.decode()[-2000:]
    assert full_disk.check.returncode == 0, (full_disk.check.stdout + full_disk.check.stderr).decode()[-2000:]
    assert not full_disk.open_left


def test_both_experiments_export_and_verify_after_recovery(full_disk, request):
    _known(request, "verify", full_disk)
    assert full_disk.verdicts == {"A": "ok", "B": "ok"}, full_disk.verdicts
