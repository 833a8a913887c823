"""Experiment specs, pre-registration and deviations (FORMAT.md §8, §9)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from benchclaw.cli import cli
from benchclaw.errors import FormatError, RegistrationError, UsageError
from benchclaw.experiments import deviate, load_spec, prereg, registration, require_registered
from benchclaw.paths import package_data_dir
from benchclaw.evidence.store import Store

REPO = Path(__file__).resolve().parent.parent

MINIMAL = b'''v = 1
id = "X1"
title = "t"
[grid]
tasks = ["quotes-*"]
profiles = ["direct"]
seeds = [1]
tiers = ["lightning", "super"]
catalog = "sim"
all_tiers = true
[budget]
usd = "1.00"
'''


@pytest.fixture
def spec_file(tmp_path):
    p = tmp_path / "experiments" / "X1.toml"
    p.parent.mkdir()
    p.write_bytes(MINIMAL)
    return p


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "runs", fsync=False)


def test_shipped_specs_load():
    e01 = load_spec(REPO / "experiments" / "E01.toml")
    assert len(e01.grid.tasks) >= 3 and len(e01.grid.profiles) == 2 and len(e01.grid.seeds) >= 3
    assert len(e01.grid.tiers) == 3 and e01.grid.catalog == "sim"
    demo = load_spec(package_data_dir() / "experiments" / "demo.toml")
    assert demo.id == "DEMO" and demo.grid.all_tiers and "ladder" in demo.live


@pytest.mark.parametrize("edit, message", [
    (lambda t: b'colour = "red"\n' + t, r"X1.toml: colour: unknown key"),
    (lambda t: t + b'colour = "red"\n', r"X1.toml: budget.colour: unknown key"),
    (lambda t: t.replace(b'usd = "1.00"', b"usd = 1.0"), r"budget.usd: money is written as a string"),
    (lambda t: t.replace(b'seeds = [1]', b'seeds = [1, 1]'), r"grid.seeds: duplicate"),
    (lambda t: t.replace(b'catalog = "sim"\n', b''), r"grid.catalog: missing"),
    (lambda t: t.replace(b'v = 1', b'v = 9'), r"X1.toml: v: unknown spec version 9"),
    (lambda t: t + b'[policies]\nlive = ["always:ultra"]\n', r"policies.live\[0\]: .*'ultra' is not in the grid"),
    (lambda t: t + b'[[stopping]]\nrule = "vibes"\n', r"stopping\[0\].rule: unknown stopping rule 'vibes'"),
    (lambda t: t + b'[[stopping]]\nrule = "spend"\n', r"stopping\[0\].usd: missing"),
    (lambda t: t + b'[settings]\ntier_concurrency = {ultra = 2}\n', r"tier_concurrency.ultra: not a tier"),
    (lambda t: t + b'[[hypotheses]]\nid = "H1"\nrule = "pass_rate(\\"ladder\\") >"\n', r"hypotheses\[0\].rule"),
    (lambda t: t.replace(b"all_tiers = true", b"all_tiers = false"), r"nothing to run"),
    (lambda t: b"v = [", r"X1.toml: not valid TOML"),
])
def test_bad_specs_name_file_and_key(spec_file, edit, message):
    spec_file.write_bytes(edit(MINIMAL))
    with pytest.raises(FormatError, match=message):
        load_spec(spec_file)


def test_prereg_records_digest_and_blob_and_is_idempotent(store, spec_file):
    reg = prereg(store, spec_file)
    assert reg.fresh and reg.spec_digest == load_spec(spec_file).digest
    assert store.get_blob(reg.spec_digest) == MINIMAL
    again = prereg(store, spec_file)
    assert not again.fresh and again.spec_digest == reg.spec_digest
    kinds = [e.kind for e in store.read_journal("X1")]
    assert kinds == ["prereg"]


def test_changing_one_byte_blocks_run(store, spec_file):
    prereg(store, spec_file)
    assert require_registered(store, "X1").digest == registration(store, "X1").spec_digest
    spec_file.write_bytes(MINIMAL.replace(b'title = "t"', b'title = "T"'))
    with pytest.raises(RegistrationError, match="changed since registration"):
        require_registered(store, "X1")
    with pytest.raises(RegistrationError, match="already registered"):
        prereg(store, spec_file)


def test_unregistered_experiment_is_refused(store, spec_file):
    with pytest.raises(RegistrationError, match="not registered"):
        require_registered(store, "X1", spec_file)


def test_deviation_unblocks_run_and_is_recorded_with_reason(store, spec_file):
    first = prereg(store, spec_file).spec_digest
    spec_file.write_bytes(MINIMAL.replace(b"seeds = [1]", b"seeds = [1, 2]"))
    reg = deviate(store, "X1", "add a seed")
    assert reg.spec_digest != first
    spec = require_registered(store, "X1")
    assert spec.grid.seeds == (1, 2)
    dev = [e for e in store.read_journal("X1") if e.kind == "deviation"][0].body
    assert dev["reason"] == "add a seed" and dev["previous_digest"] == first
    assert store.has_blob(dev["spec_digest"])
    with pytest.raises(UsageError):
        deviate(store, "X1", "  ")


def test_cli_prereg_prints_digest_and_run_refuses_changed_spec(tmp_path, spec_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["prereg", "experiments/X1.toml"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == registration(Store(tmp_path / "runs"), "X1").digest
    assert load_spec(spec_file).digest in res.stderr
    spec_file.write_bytes(MINIMAL + b"\n")
    from benchclaw.cli import run_cli
    assert run_cli(cli, ["run", "X1"]) == 2
    res = runner.invoke(cli, ["deviate", "X1", "--reason", "trailing newline"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == load_spec(spec_file).digest


def test_prereg_pins_catalog_and_tasks_and_run_refuses_a_changed_catalog(tmp_path):
    from benchclaw.experiments.runner import run_experiment_sync
    from benchclaw.verify.experiment import registration_digest

    cat = tmp_path / "cat.toml"
    cat.write_bytes((package_data_dir() / "catalogs" / "sim.toml").read_bytes())
    spec = tmp_path / "exp" / "P1.toml"
    spec.parent.mkdir()
    spec.write_bytes(MINIMAL.replace(b'id = "X1"', b'id = "P1"').replace(b'catalog = "sim"', b'catalog = "../cat.toml"'))
    store = Store(tmp_path / "runs")
    reg = prereg(store, spec)
    body = [e for e in store.read_journal("P1") if e.kind == "prereg"][0].body
    assert body["catalog"]["digest"].startswith("sha256:") and body["tasks"]
    assert all({"id", "version", "digest"} == set(t) for t in body["tasks"])
    assert reg.digest == registration_digest(body)
    cat.write_bytes(cat.read_bytes().replace(b'"0.', b'"0.0', 1))  # one price changed after registration
    with pytest.raises(RegistrationError, match="the catalog .* changed since registration"):
        run_experiment_sync(store, "P1", spec_path=spec)


def test_prereg_refuses_what_run_would_refuse(tmp_path):
    spec = tmp_path / "exp" / "P2.toml"
    spec.parent.mkdir()
    spec.write_bytes(MINIMAL.replace(b'id = "X1"', b'id = "P2"').replace(b'catalog = "sim"', b'catalog = "../../elsewhere.toml"'))
    (tmp_path.parent / "elsewhere.toml").write_bytes((package_data_dir() / "catalogs" / "sim.toml").read_bytes())
    from benchclaw.errors import InputError
    with pytest.raises(InputError, match="outside the project"):
        prereg(Store(tmp_path / "runs"), spec)
    spec.write_bytes(MINIMAL.replace(b'id = "X1"', b'id = "P2"').replace(b'tasks = [', b'tasks = ["nosuch-*", '))
    with pytest.raises(FormatError, match="matches no task"):
        prereg(Store(tmp_path / "runs"), spec)
    assert not (tmp_path / "runs" / "journals" / "P2").exists() or not list((tmp_path / "runs" / "journals" / "P2").glob("*.jsonl"))
