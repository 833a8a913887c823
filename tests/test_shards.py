"""Shards and merge: `run --shard I/N` slices the grid and its budget; `merge` joins the
shards' runs directories into one that checks, reports and exports like a single machine's."""

import asyncio
import hashlib
from decimal import Decimal as D
from pathlib import Path

import pytest

from benchclaw.formats import jsonio
from benchclaw.experiments.grid import Shard, make_cells
from benchclaw.evidence.check import check_store
from benchclaw.evidence.merge import merge_store
from benchclaw.bundle import export_bundle
from benchclaw.cli import cli, run_cli
from benchclaw.errors import IntegrityError, UsageError
from benchclaw.experiments import prereg
from benchclaw.experiments.ledger import read_ledger
from benchclaw.analysis.report import build_summary
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store
from benchclaw.verify import verify_bundle

SPEC = '''v = 1
id = "S1"
title = "shards (simulated)"
[grid]
tasks = ["quotes-incident", "cents-fees", "pricing-seats"]
profiles = ["direct"]
seeds = [1, 2]
tiers = ["lightning", "super", "ultra"]
catalog = "sim"
all_tiers = true
[settings]
max_tokens = 4096
concurrency = 4
[budget]
usd = "{usd}"
per_call_usd = "0.05"
[policies]
live = ["ladder"]
[[hypotheses]]
id = "H1"
text = "the ladder passes as often as ultra"
rule = 'pass_rate("ladder") >= pass_rate("always:ultra")'
'''


def registered(root: Path, spec: Path) -> Store:
    store = Store(root, fsync=False)
    prereg(store, spec)
    return store


def run(store: Store, shard: Shard | None = None):
    return asyncio.run(run_experiment(store, "S1", sim_options={"latency_scale": 0}, handle_signals=False,
                                      shard=shard))


def tree(root: Path) -> dict[str, bytes]:
    """Every evidence file's bytes. Lock files are left out: they are empty, carry no
    evidence (FORMAT.md §1, Locks) and appear wherever a reader took a lock."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix != ".lock"}


def outcomes(store: Store) -> list[tuple]:
    """What must agree between a sharded and an unsharded run (ids and times may not)."""
    out = []
    for e in store.read_journal("S1"):
        if e.kind == "run":
            b = e.body
            out.append((b["cell"], b["policy"], b["tier"], b["status"], b["passed"], b["cost"]["low"],
                        b["cost"]["high"], b["elapsed_ms"]))
    return sorted(out)


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "S1.toml"
    path.write_text(SPEC.format(usd="5"))
    return path


def test_shard_parse_and_budget_shares_are_exact_and_never_exceed_the_whole():
    assert str(Shard.parse("2/3")) == "2/3"
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/2"):
        with pytest.raises(UsageError, match="I/N"):
            Shard.parse(bad)
    shares = [Shard.share_usd(D("5.00"), n, 9) for n in (2, 3, 4)]
    assert shares == [D("1.111111111111"), D("1.666666666666"), D("2.222222222222")]
    assert sum(shares) <= D("5.00")
    assert Shard.share_usd(D("5.00"), 9, 9) == D("5.00")
    assert Shard.share_tokens(1000, 1, 3) == 333 and Shard.share_tokens(None, 1, 3) is None


def test_each_cell_lands_in_exactly_one_shard_by_a_hash_of_its_id(spec):
    from benchclaw.checks.tasks import find_tasks

    tasks = [t for t in find_tasks() if t.id in ("quotes-incident", "cents-fees", "pricing-seats")]
    cells = make_cells(tasks, ["direct"], [1, 2])
    shards = [Shard(i, 3) for i in (1, 2, 3)]
    for c in cells:
        owners = [s for s in shards if s.owns(c, ["ladder"])]
        want = int.from_bytes(hashlib.sha256(c.id.encode()).digest()[:8], "big") % 3 + 1
        assert [s.index for s in owners] == [want]
    # with live memory, a task/profile group (every seed) stays on one machine
    for c in cells:
        same = [d for d in cells if d.task.id == c.task.id]
        assert len({next(s.index for s in shards if s.owns(d, ["memory"])) for d in same}) == 1


def test_three_shards_merged_in_any_order_equal_one_machine(tmp_path, spec):
    # One machine registers; the others get the registration by merging it (one history).
    origin = registered(tmp_path / "origin", spec)
    shards = []
    for i in (1, 2, 3):
        store = Store(tmp_path / f"shard{i}", fsync=False)
        merge_store(store, origin)
        res = run(store, Shard(i, 3))
        assert res.status == "complete"
        ledger = read_ledger(store, res.ledger)
        assert ledger.limits.usd == Shard.share_usd(D("5"), res.units, 18 + 6)  # its share only
        assert ledger.spent_usd <= ledger.limits.usd
        shards.append(store)
    assert all(s.read_journal("S1") for s in shards)
    sizes = [len([e for e in s.read_journal("S1") if e.kind == "run"]) for s in shards]
    assert all(sizes)

    a, b = Store(tmp_path / "merged-a", fsync=False), Store(tmp_path / "merged-b", fsync=False)
    for s in shards:
        merge_store(a, s)
    for s in (shards[2], shards[0], shards[1], shards[2]):  # another order, one merged twice
        merge_store(b, s)
    assert tree(a.root) == tree(b.root)
    again = merge_store(a, shards[1])
    assert again.changed == 0 and tree(a.root) == tree(b.root)  # idempotent

    single = registered(tmp_path / "single", spec)
    assert run(single).status == "complete"
    assert check_store(a).ok
    assert outcomes(a) == outcomes(single)
    assert jsonio.dumps(build_summary(a, "S1")) == jsonio.dumps(build_summary(single, "S1"))

    # spend is each shard's ledger once: the merged total is the sum of the shards'
    merged_ledgers = sorted(p.stem for p in (a.root / "ledgers").glob("*.jsonl"))
    assert len(merged_ledgers) == 3
    total = sum(read_ledger(a, lid).spent_usd for lid in merged_ledgers)
    assert total == read_ledger(single, run_ledger(single)).spent_usd

    report = export_bundle(a.root, "S1", tmp_path / "S1.zip")
    assert verify_bundle(report.path).exit_code == 0

    # a shard resumed on the merged directory carries its own ledgers' spend, not the others'
    own = [e.body["ledger"] for e in shards[0].read_journal("S1") if e.kind == "grid.start"]
    res = run(a, Shard(1, 3))
    assert res.status == "complete" and res.units == 0
    assert read_ledger(a, res.ledger).carried_usd == sum(read_ledger(a, lid).spent_usd for lid in own)
    # resuming the merged directory on one machine finds nothing left to do, and carries every
    # ledger's own spend once (the shard resume above spent nothing of its own)
    res = run(a)
    assert res.status == "complete" and res.units == 0
    assert read_ledger(a, res.ledger).carried_usd == total


def run_ledger(store: Store) -> str:
    return [e.body["ledger"] for e in store.read_journal("S1") if e.kind == "grid.start"][-1]


def test_merge_refuses_what_does_not_verify_and_writes_nothing(tmp_path, spec, monkeypatch):
    origin = registered(tmp_path / "origin", spec)
    one = Store(tmp_path / "one", fsync=False)
    merge_store(one, origin)
    run(one, Shard(1, 3))
    dest = Store(tmp_path / "dest", fsync=False)
    merge_store(dest, origin)
    before = tree(dest.root)

    # a flipped byte in a sealed run
    victim = next((one.root / "runs").glob("*/*.jsonl"))
    data = victim.read_bytes()
    victim.write_bytes(data.replace(b'"tier":"', b'"tier":"x', 1))
    with pytest.raises(IntegrityError, match="does not verify"):
        merge_store(dest, one)
    assert tree(dest.root) == before
    victim.write_bytes(data)

    # an appended file that diverged: two machines with one host name both registered
    with pytest.raises(IntegrityError, match="diverged"):
        merge_store(dest, registered(tmp_path / "elsewhere", spec))
    assert tree(dest.root) == before

    # the same shard run twice (on two machines): its runs and spend would count twice
    twin = Store(tmp_path / "twin", fsync=False)
    merge_store(twin, origin)
    monkeypatch.setenv("BENCHCLAW_WRITER", "another-host")
    run(twin, Shard(1, 3))
    merge_store(dest, one)
    with pytest.raises(IntegrityError, match="ran twice"):
        merge_store(dest, twin)

    # open runs are sealed first
    (one.root / "open" / "x.jsonl").write_bytes(b"")
    with pytest.raises(UsageError, match="recover"):
        merge_store(dest, one)


def test_merge_refuses_two_registration_histories(tmp_path, spec):
    a = registered(tmp_path / "a", spec)
    other = tmp_path / "other.toml"
    other.write_text(SPEC.format(usd="6"))
    b = registered(tmp_path / "b", other)
    with pytest.raises(IntegrityError, match="registration histories"):
        merge_store(a, b)


def test_cli_run_shard_and_merge(tmp_path, spec, monkeypatch, capsys):
    monkeypatch.setenv("BENCHCLAW_SIM_LATENCY_SCALE", "0")
    origin, m2 = str(tmp_path / "origin"), str(tmp_path / "m2")

    def cli_(*args):
        code = run_cli(cli, list(args), prog="benchclaw")
        out, err = capsys.readouterr()
        return code, out + err

    assert cli_("prereg", str(spec), "--runs", origin)[0] == 0
    code, out = cli_("merge", origin, "--runs", m2)
    assert code == 0 and "copied" in out, out
    code, out = cli_("run", "S1", "--spec", str(spec), "--runs", m2, "--shard", "2/3")
    assert code == 0, out
    code, out = cli_("run", "S1", "--runs", m2, "--shard", "4/3")
    assert code == 2 and "I/N" in out
    code, out = cli_("merge", m2, "--runs", origin)
    assert code == 0, out
    assert cli_("runs", "check", "--runs", origin)[0] == 0
    code, out = cli_("merge", str(tmp_path / "nowhere"), "--runs", origin)
    assert code == 2 and "nowhere" in out


def test_cli_address_needs_the_ray_executor(tmp_path, capsys):
    code = run_cli(cli, ["run", "S1", "--runs", str(tmp_path), "--address", "auto"], prog="benchclaw")
    assert code == 2 and "--executor ray" in capsys.readouterr().err
