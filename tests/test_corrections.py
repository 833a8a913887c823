"""Corrections (`benchclaw correct`): a journal record that an earlier claim was wrong, and why.

Written after the result it corrects, hash-chained with the journal, carried in the bundle
and checked by the verifier's step 8 (its fields, and that it follows the runs it names).
"""

from __future__ import annotations

import json

import pytest

from benchclaw.evidence.check import check_store
from benchclaw.bundle import export_bundle
from benchclaw.cli import cli, run_cli
from benchclaw.errors import RegistrationError, UsageError
from benchclaw.experiments import correct
from benchclaw.evidence.store import Store
from benchclaw.verify import verify_bundle

from tests.test_bundle_support import EXP, Forger, grid_runs

TEXTS = {"claim": "The ladder passes 89% at 33% lower cost.",
         "wrong": "The cost average left out one cell whose cost was unknown.",
         "why": "An independent review found the cell; its last call returned no usage.",
         "corrected": "The ladder passes 83% (vs 78%) and is 1.5% to 5.5% cheaper."}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A real grid (runner + simulator), copied per test by ``runs``."""
    root = tmp_path_factory.mktemp("grid") / "runs"
    grid_runs(root)
    return root


@pytest.fixture
def runs(grid, tmp_path):
    import shutil

    dest = tmp_path / "runs"
    shutil.copytree(grid, dest)
    return dest


def _run_ids(store: Store) -> list[str]:
    return sorted(e.body["run_id"] for e in store.read_journal(EXP) if e.kind == "run")


def test_a_correction_is_journaled_exported_and_verified(runs, tmp_path):
    store = Store(runs, fsync=False)
    run_id = _run_ids(store)[0]
    body = correct(store, EXP, hypothesis="H1", runs=[run_id[:10]], **TEXTS)  # a unique prefix will do
    last = store.read_journal(EXP)[-1]
    assert last.kind == "correction" and last.body == body
    assert body == {"experiment": EXP, **TEXTS, "hypothesis": "H1", "runs": [run_id]}
    assert check_store(store).ok
    export_bundle(runs, EXP, tmp_path / "b.zip")
    rep = verify_bundle(tmp_path / "b.zip")
    assert rep.exit_code == 0, [str(f) for _, f in rep.failures()]
    assert rep.section("complete").counts["corrections"] == 1


def test_the_cli_records_a_correction_and_refuses_bad_ones(runs, capsys):
    args = ["correct", EXP, "--runs", str(runs)] + [x for k, v in TEXTS.items() for x in (f"--{k}", v)]
    code = run_cli(cli, args, prog="benchclaw")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == TEXTS["corrected"] and "correction recorded" in err
    for extra, words in ((["--run", "f" * 64], "not a run of"), (["--hypothesis", "H99"], "H99")):
        code = run_cli(cli, args + extra, prog="benchclaw")
        _, err = capsys.readouterr()
        assert code == 2 and words in err, err
    code = run_cli(cli, ["correct", EXP, "--runs", str(runs), "--claim", " ", "--wrong", "w", "--why", "y",
                         "--corrected", "c"], prog="benchclaw")
    _, err = capsys.readouterr()
    assert code == 2 and "--claim" in err
    kinds = [e.kind for e in Store(runs).read_journal(EXP)]
    assert kinds.count("correction") == 1  # the refused ones wrote nothing


def test_no_correction_before_registration_or_before_any_result(tmp_path):
    from benchclaw.experiments import prereg

    store = Store(tmp_path / "runs", fsync=False)
    with pytest.raises(RegistrationError, match="not registered"):
        correct(store, "E01", **TEXTS)
    spec = tmp_path / "E01.toml"
    from tests.test_bundle_support import GRID_SPEC

    spec.write_text(GRID_SPEC)
    prereg(store, spec)
    with pytest.raises(RegistrationError, match="no run"):
        correct(store, EXP, **TEXTS)
    with pytest.raises(UsageError, match="--why"):
        correct(store, EXP, **{**TEXTS, "why": ""})


# -- the verifier: a forged or misplaced correction is caught in step 8 ------------------------

@pytest.fixture
def corrected_bundle(runs, tmp_path) -> bytes:
    store = Store(runs, fsync=False)
    correct(store, EXP, runs=[_run_ids(store)[-1]], **TEXTS)
    export_bundle(runs, EXP, tmp_path / "c.zip")
    return (tmp_path / "c.zip").read_bytes()


def _caught(data: bytes, *words: str) -> None:
    rep = verify_bundle(data)
    assert rep.exit_code == 1, rep.to_dict()
    texts = [str(f) for _, f in rep.failures()]
    assert any(all(w in t for w in words) for t in texts), texts


def _edit_correction(f: Forger, edit) -> None:
    def go(objs):
        for o in objs:
            if o["kind"] == "correction":
                edit(o)
        return objs
    f.edit_journal(go)


def test_a_correction_moved_before_every_run_is_caught(corrected_bundle, tmp_path):
    f = Forger.of(corrected_bundle)

    def early(o):
        o["at"] = "2000-01-01T00:00:00.000000Z"
        o["body"]["runs"] = []
    _edit_correction(f, early)
    _caught(f.pack(tmp_path), "precedes")


def test_a_correction_naming_a_run_journaled_after_it_is_caught(corrected_bundle, tmp_path):
    f = Forger.of(corrected_bundle)

    def move(objs):  # the correction, placed right after the first run record, names the last run
        corr = next(o for o in objs if o["kind"] == "correction")
        objs.remove(corr)
        runs = [o for o in objs if o["kind"] == "run"]
        i = objs.index(runs[0]) + 1
        corr["at"], corr["body"]["runs"] = objs[i - 1]["at"], [runs[-1]["body"]["run_id"]]
        assert runs[-1]["at"] > corr["at"]
        return objs[:i] + [corr] + objs[i:]
    f.edit_journal(move)
    _caught(f.pack(tmp_path), "precedes the run", "journaled at")


@pytest.mark.parametrize("edit,words", [
    (lambda o: o["body"].update(experiment="E99"), ("correction names experiment",)),
    (lambda o: o["body"].update(why="  "), ("empty 'why'",)),
    (lambda o: o["body"].update(claim=["not", "text"]), ("field claim",)),
    (lambda o: o["body"].update(runs=["0" * 64]), ("which the journal does not",)),
])
def test_a_malformed_correction_is_caught(corrected_bundle, tmp_path, edit, words):
    f = Forger.of(corrected_bundle)
    _edit_correction(f, edit)
    _caught(f.pack(tmp_path), *words)


def test_the_bundle_carries_the_correction(corrected_bundle):
    import io
    import zipfile

    z = zipfile.ZipFile(io.BytesIO(corrected_bundle))
    journals = [n for n in z.namelist() if n.startswith(f"journals/{EXP}/")]
    kinds = [json.loads(line)["kind"] for n in journals for line in z.read(n).splitlines()]
    assert "correction" in kinds
