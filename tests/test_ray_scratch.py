"""A Ray worker killed mid-run (Ray force-cancels with SIGKILL) cannot clean up its scratch
runs directory; the next worker task on the node sweeps those of dead workers, and never a
live worker's. (No Ray needed: the sweep is plain file work.)"""

import os
import subprocess
import sys

from benchclaw.experiments.ray_executor import sweep_scratch


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_scratch_of_dead_workers_is_swept_and_live_ones_kept(tmp_path):
    dead = tmp_path / f"benchclaw-ray-{_dead_pid()}-abc"
    (dead / "objects" / "ab").mkdir(parents=True)
    (dead / "objects" / "ab" / "blob").write_bytes(b"x")
    live = tmp_path / f"benchclaw-ray-{os.getpid()}-def"
    live.mkdir()
    unnamed = tmp_path / "benchclaw-ray-q505ykfb"  # no pid in the name: not ours to judge
    unnamed.mkdir()
    other = tmp_path / "something-else"
    other.mkdir()

    assert sweep_scratch(str(tmp_path)) == 1
    assert not dead.exists()
    assert live.exists() and unnamed.exists() and other.exists()
    assert sweep_scratch(str(tmp_path)) == 0  # nothing left to sweep


def test_a_missing_temp_folder_sweeps_nothing(tmp_path):
    assert sweep_scratch(str(tmp_path / "absent")) == 0
