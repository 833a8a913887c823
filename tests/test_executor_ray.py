"""The Ray executor on a local Ray instance (2 CPUs, loopback, no dashboard): the same
runs as the local executor, a budget that holds with workers in parallel, and a worker
killed mid-call whose run is sealed aborted and whose experiment resumes to completion."""

import asyncio
import os
import signal
import tempfile
from decimal import Decimal as D
from pathlib import Path

import pytest
import ray

from benchclaw.formats import jsonio
from benchclaw.experiments.ray_executor import RayExecutor, _alive
from benchclaw.experiments.executor import Backends, default_backends
from benchclaw.evidence.check import check_store
from benchclaw.bundle import export_bundle
from benchclaw.experiments import prereg
from benchclaw.experiments.ledger import read_ledger
from benchclaw.analysis.report import build_summary
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store
from benchclaw.verify import verify_bundle
from tests.test_shards import SPEC, outcomes

ROOT = Path(__file__).resolve().parent.parent
SIM = {"latency_scale": 0}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # Workers inherit this environment: they import this module's helpers from the checkout.
    # The CLI's simulator reads its latency from the worker's environment.
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "BENCHCLAW_SIM_LATENCY_SCALE")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"]) if p)
    os.environ["BENCHCLAW_SIM_LATENCY_SCALE"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def registered(root: Path, tmp_path: Path, usd: str = "5") -> Store:
    spec = tmp_path / f"S1-{usd}.toml"
    spec.write_text(SPEC.format(usd=usd))
    store = Store(root, fsync=False)
    prereg(store, spec)
    return store


def run(store: Store, executor=None, backends=None):
    return asyncio.run(run_experiment(store, "S1", sim_options=SIM, handle_signals=False, concurrency=4,
                                      executor=executor, backends=backends))


def verifies(store: Store, tmp_path: Path) -> None:
    report = export_bundle(store.root, "S1", tmp_path / f"{store.root.name}.zip")
    result = verify_bundle(report.path)
    assert result.exit_code == 0, [str(f) for s in result.sections for f in s.failures][:5]


def test_ray_makes_the_same_runs_as_the_local_executor(tmp_path):
    local = registered(tmp_path / "local", tmp_path)
    assert run(local).status == "complete"
    remote = registered(tmp_path / "ray", tmp_path)
    res = run(remote, RayExecutor())
    assert res.status == "complete"
    assert outcomes(remote) == outcomes(local)
    assert jsonio.dumps(build_summary(remote, "S1")) == jsonio.dumps(build_summary(local, "S1"))
    assert read_ledger(remote, res.ledger).spent_usd == read_ledger(local, _ledger(local)).spent_usd
    assert not remote.open_run_paths() and check_store(remote).ok
    verifies(remote, tmp_path)


def test_a_budget_that_runs_out_mid_grid_is_never_exceeded_by_parallel_workers(tmp_path):
    store = registered(tmp_path / "ray", tmp_path, usd="0.04")
    res = run(store, RayExecutor())
    assert res.status == "stopped" and res.stop_rule == "budget"
    state = read_ledger(store, res.ledger)
    assert state.refused >= 1 and state.open == {}
    assert D(0) < state.spent_usd <= D("0.04")
    assert not store.open_run_paths() and check_store(store).ok
    verifies(store, tmp_path)  # replays every reservation against the limit


class KillOnce:
    """A provider factory for workers: the first provider built for ``at_start`` kills its
    worker before the run reserves anything; the first ``complete`` on ``mid_call`` kills
    it after its reservation, mid-call. Each once (marker files), then a plain sim tier."""

    def __init__(self, markers: Path, at_start: str, mid_call: str):
        self.markers, self.at_start, self.mid_call = str(markers), at_start, mid_call

    def __call__(self, tier):
        from benchclaw.providers import make_provider

        if tier.name == self.at_start and _take(Path(self.markers) / "at-start"):
            os.kill(os.getpid(), signal.SIGKILL)
        return _Killer(make_provider(tier, sim_options=SIM), Path(self.markers) / "mid-call"
                       if tier.name == self.mid_call else None)


class _Killer:
    def __init__(self, inner, marker):
        self.inner, self.marker = inner, marker

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def complete(self, req):
        if self.marker is not None and _take(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return await self.inner.complete(req)


def _take(marker: Path) -> bool:
    try:
        marker.unlink()
        return True
    except FileNotFoundError:
        return False


def test_a_worker_killed_mid_call_is_sealed_aborted_and_the_experiment_resumes(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "at-start").touch()
    (markers / "mid-call").touch()
    base = default_backends(SIM)
    killing = Backends(base.tasks, base.catalog, base.profile, KillOnce(markers, "ultra", "super"), base.run_agent)
    store = registered(tmp_path / "ray", tmp_path)

    first = run(store, RayExecutor(), killing)
    assert not list(markers.iterdir())  # both workers died
    # the one killed before its run started left nothing (it never reserved, so never called
    # the model) and was made again; the one killed mid-call is a cut-off run of its unit
    assert first.status == "complete"
    aborted = [b for b in first.runs if b["status"] == "aborted"]
    assert len(aborted) == 1 and aborted[0]["called_model"] and aborted[0]["tier"] == "super"
    end = store.read_run(aborted[0]["run_id"]).end
    assert end["recovered"] is True  # sealed by crash recovery, as a local crash would be
    ledger = read_ledger(store, first.ledger)
    assert ledger.unknown_calls == 1 and ledger.open == {}  # the cut-off call, at its bound

    second = run(store, RayExecutor())
    assert second.status == "complete" and second.units == 0  # nothing was left undone
    # the killed workers' scratch directories were swept by the tasks that ran after them
    scratch = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("benchclaw-ray-")]
    assert all(_alive(int(n.split("-")[2])) for n in scratch if n.split("-")[2].isdigit())
    # nothing lost: every grid unit and trial has exactly one run that called the model
    journal = [e.body for e in store.read_journal("S1") if e.kind == "run"]
    called = [(b["cell"], b["policy"], b["tier"], b["trial"]) for b in journal if b["called_model"]]
    assert len(called) == len(set(called))
    assert {(b["cell"], b["tier"]) for b in journal if b["policy"] == "grid" and b["called_model"]} == \
        {(c, t) for c in {b["cell"] for b in journal} for t in ("lightning", "super", "ultra")}
    assert sorted(b["run_id"] for b in journal) == store.run_ids()
    # nothing double-counted: the ledgers' own spend is exactly the journaled runs' cost plus
    # the one call cut off in flight, at its reservation's bound
    ledgers = [e.body["ledger"] for e in store.read_journal("S1") if e.kind == "grid.start"]
    spent = sum(read_ledger(store, lid).spent_usd - read_ledger(store, lid).carried_usd for lid in ledgers)
    assert spent == sum(D(b["cost"]["high"]) for b in journal) + ledger.unknown_usd
    summary = build_summary(store, "S1")
    super_row = next(r for r in summary["primary"]["tiers"] if r["tier"] == "super")
    assert super_row["finish"]["cut_off"] == 1 and super_row["cost"]["unknown_calls"] == 1
    assert not store.open_run_paths() and check_store(store).ok
    verifies(store, tmp_path)


def _ledger(store: Store) -> str:
    return [e.body["ledger"] for e in store.read_journal("S1") if e.kind == "grid.start"][-1]


def test_an_interrupt_kills_the_tasks_in_flight_and_resume_completes(tmp_path, monkeypatch):
    import benchclaw.experiments.runner as runner_mod

    store = registered(tmp_path / "ray", tmp_path)
    record = runner_mod._Grid._record_run

    def interrupting(self, body):
        record(self, body)
        # Once a run in flight has reached the driver (its run.start is mirrored in open/):
        # a task Ray has not started yet leaves nothing to show for the interruption.
        if len(self.result_runs) >= 3 and not self.interrupted and any((store.root / "open").glob("*.jsonl")):
            self.interrupt("interrupted by test")

    monkeypatch.setattr(runner_mod._Grid, "_record_run", interrupting)
    slow = {"latency_scale": 0.05}
    first = asyncio.run(run_experiment(store, "S1", sim_options=slow, handle_signals=False, concurrency=4,
                                       executor=RayExecutor()))
    assert first.status == "interrupted"
    assert not store.open_run_paths()
    cut = [e.body for e in store.read_journal("S1") if e.kind == "run" and e.body.get("cut_off")]
    assert cut and all(b["cut_off"] == "interrupted by test" for b in cut)  # aborted, or it finished first
    assert all(b["status"] != "aborted" or b.get("cut_off") for e in store.read_journal("S1")
               if e.kind == "run" for b in [e.body])
    state = read_ledger(store, first.ledger)
    assert state.open == {} and state.closed
    monkeypatch.setattr(runner_mod._Grid, "_record_run", record)
    second = run(store, RayExecutor())
    assert second.status == "complete"
    journal = [e.body for e in store.read_journal("S1") if e.kind == "run"]
    called = [(b["cell"], b["policy"], b["tier"], b["trial"]) for b in journal if b["called_model"]]
    assert len(called) == len(set(called))
    assert sorted(b["run_id"] for b in journal) == store.run_ids()
    verifies(store, tmp_path)


def test_cli_run_with_the_ray_executor(tmp_path, capsys):
    from benchclaw.cli import cli, run_cli

    spec = tmp_path / "S1.toml"
    spec.write_text(SPEC.format(usd="5"))
    runs = str(tmp_path / "runs")
    assert run_cli(cli, ["prereg", str(spec), "--runs", runs], prog="benchclaw") == 0
    code = run_cli(cli, ["run", "S1", "--spec", str(spec), "--runs", runs, "--executor", "ray"], prog="benchclaw")
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "S1: complete" in out.out and "[24/24 100%]" in out.err  # the same progress line
    assert run_cli(cli, ["runs", "check", "--runs", runs], prog="benchclaw") == 0
