"""Exit codes for bad places, and outputs that would land in evidence (issue 14).

Before: `demo --workdir /dev/null`, `demo --workdir /proc/1/x`, `build -o /proc/x` and a
read-only runs directory were "internal error" (exit 3); `runs check --runs /etc` said
"ok: 0 runs" (exit 0); `build -o .` in a project folder wrote pages into runs/ and
experiments/.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benchclaw.cli import cli, run_cli
from benchclaw.experiments import prereg
from benchclaw.evidence.packs import finish_packs
from benchclaw.evidence.store import Store

from .test_experiments import MINIMAL


def call(capsys, *args: str) -> tuple[int, str, str]:
    code = run_cli(cli, list(args), prog="benchclaw")
    out, err = capsys.readouterr()
    return code, out, err


def one_clear_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder: experiments/X1.toml registered in runs/, as a user has it."""
    (tmp_path / "experiments").mkdir()
    spec = tmp_path / "experiments" / "X1.toml"
    spec.write_bytes(MINIMAL)
    prereg(Store(tmp_path / "runs"), spec)
    # registered by an earlier command, as a user has it: that process's pack was finished
    # when it exited (the commands below run in this process, which would append to it)
    finish_packs(str(tmp_path / "runs" / "objects"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("args, says", [
    (("demo", "--workdir", "/dev/null"), "/dev/null"),
    (("demo", "--workdir", "/proc/1/x"), "/proc/1/x"),
    (("build", "-o", "/proc/x"), "/proc/x"),
    (("runs", "check", "--runs", "/etc"), "not a runs directory"),
    (("runs", "ls", "--runs", "/etc"), "not a runs directory"),
    (("export", "X1", "-o", "/proc/x/X1.zip"), "/proc/x"),
])
def test_unusable_places_are_exit_2_with_one_line(project, capsys, args, says):
    code, _, err = call(capsys, *args)
    assert code == 2 and says in one_clear_line(err)


@pytest.mark.parametrize("args", [
    ("build", "-o", "."),
    ("build", "-o", "runs/site"),
    ("build", "-o", "experiments/site"),
    ("build", "-o", "tasks/site"),
    ("export", "X1", "-o", "runs/X1.zip"),
    ("export", "X1", "-o", "experiments/X1.zip"),
    ("demo", "--workdir", "runs"),
    ("demo", "--workdir", "experiments/demo"),
])
def test_outputs_never_land_in_evidence(project, capsys, args):
    (project / "tasks").mkdir(exist_ok=True)
    before = {d: _listing(project / d) for d in ("runs", "experiments", "tasks")}
    code, _, err = call(capsys, *args)
    assert code == 2 and "evidence" in one_clear_line(err) or "runs directory" in err, err
    assert {d: _listing(project / d) for d in before} == before


def test_interrupt_exit_130_is_documented():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "CLI.md").read_text()
    assert "| **130** | interrupted" in doc


def _read_only(path: Path):
    """Make ``path`` read-only for real: a read-only bind mount as root (permissions do not
    bind root), chmod otherwise. Returns an undo callable."""
    if os.geteuid() != 0:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        return lambda: [p.chmod(0o755) for p in [path, *path.rglob("*")] if p.is_dir()]
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, capture_output=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        subprocess.run(["umount", str(path)], capture_output=True)
        raise
    return lambda: subprocess.run(["umount", str(path)], check=True, capture_output=True)


@pytest.mark.parametrize("args", [
    ("run", "X1"),
    ("deviate", "X1", "--reason", "r"),
    ("try", "cents-fees", "--tier", "super"),
    ("runs", "recover"),
])
def test_a_read_only_runs_directory_is_exit_2_and_loses_nothing(project, capsys, args):
    before = {p: p.read_bytes() for p in (project / "runs").rglob("*") if p.is_file()}
    try:
        undo = _read_only(project / "runs")
    except (subprocess.CalledProcessError, FileNotFoundError) as e:  # no mount here: say so
        pytest.fail(f"cannot make a read-only folder on this machine: {e}")
    try:
        code, _, err = call(capsys, *args, "--runs", "runs")
    finally:
        undo()
    if args[0] == "runs":
        assert code == 0  # nothing to recover: reading a read-only runs directory is fine
    else:
        assert code == 2 and "runs" in one_clear_line(err), err
    assert {p: p.read_bytes() for p in (project / "runs").rglob("*") if p.is_file()} == before
