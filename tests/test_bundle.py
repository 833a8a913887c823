"""Export: a reproducible bundle of exactly what the runs used; the two CLIs around it."""

import json
import subprocess
import sys
import time
import zipfile

import pytest
from click.testing import CliRunner

from benchclaw.bundle import export_bundle
from benchclaw.cli import cli
from benchclaw.errors import InputError, IntegrityError
from benchclaw.evidence.packs import list_packs, scan_pack
from benchclaw.verify import verify_bundle
from benchclaw.verify.manifest import MANIFEST

from tests.test_bundle_support import EXP, SPEC, entries, honest_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return honest_runs(tmp_path_factory.mktemp("exp") / "runs")


def test_exporting_twice_gives_identical_bytes_and_identity(runs, tmp_path):
    a = export_bundle(runs, EXP, tmp_path / "a.zip")
    b = export_bundle(runs, EXP, tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert a.manifest_digest == b.manifest_digest and a.manifest_digest.startswith("sha256:")
    assert a.files == len(zipfile.ZipFile(tmp_path / "a.zip").namelist())


def test_spilling_the_blob_list_in_small_batches_changes_no_byte(runs, tmp_path, monkeypatch):
    """The blob digests are spilled to disk in sorted batches (``BlobSet``); with batches of
    three (many batches, digests seen again after their batch was written) the bundle is
    the same, every blob packed once."""
    from benchclaw.bundle._collect import BlobSet

    a = export_bundle(runs, EXP, tmp_path / "a.zip")
    monkeypatch.setattr(BlobSet, "BATCH", 3)
    b = export_bundle(runs, EXP, tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert b.files == a.files


def test_blob_set_lists_each_digest_once_in_order(monkeypatch):
    from benchclaw.bundle._collect import BlobSet

    monkeypatch.setattr(BlobSet, "BATCH", 4)
    raws = [bytes([i % 7]) * 32 for i in range(40)] + [bytes([200 - i]) * 32 for i in range(9)]
    bs = BlobSet()
    for raw in raws:
        if raw not in bs:
            bs.add(raw)
    assert list(bs.sorted()) == sorted(set(raws)) and bs.count() == len(set(raws))


def test_entries_are_sorted_with_fixed_time_and_mode(runs, tmp_path):
    export_bundle(runs, EXP, tmp_path / "a.zip")
    infos = zipfile.ZipFile(tmp_path / "a.zip").infolist()
    names = [i.filename for i in infos]
    assert names[0] == MANIFEST and names[1:] == sorted(names[1:], key=str.encode)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}


def test_the_manifest_digest_does_not_depend_on_the_compressor(runs, tmp_path):
    rep = export_bundle(runs, EXP, tmp_path / "a.zip")
    files = entries((tmp_path / "a.zip").read_bytes())
    with zipfile.ZipFile(tmp_path / "stored.zip", "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    again = verify_bundle(tmp_path / "stored.zip")
    assert again.manifest_digest == rep.manifest_digest
    assert again.section("container").ok


def test_the_bundle_holds_what_the_runs_used(runs, tmp_path):
    export_bundle(runs, EXP, tmp_path / "a.zip")
    files = entries((tmp_path / "a.zip").read_bytes())
    manifest = json.loads(files[MANIFEST])
    assert manifest["experiments"] == [EXP] and manifest["format"] == "benchclaw-bundle"
    listed = {f["path"] for f in manifest["files"]}
    assert listed == set(files) - {MANIFEST}
    assert files["experiments/E01.toml"] == SPEC
    assert len([n for n in files if n.startswith("runs/")]) == 4
    task = {n.split("/", 3)[3] for n in files if n.startswith("tasks/quotes-agenttest/v1/")}
    assert {"task.toml", "checks.toml", "heldout/size.json"} <= task and any(p.startswith("reference/") for p in task)
    assert any(n.startswith("catalogs/sim-") for n in files)
    assert json.loads(files["summary.json"])["experiment"] == EXP
    assert files["journals/E01/test.jsonl"].count(b'"kind":"run"') == 4


def test_include_site_packs_the_site_folder(runs, tmp_path):
    site = tmp_path / "site"
    (site / "runs").mkdir(parents=True)
    (site / "index.html").write_text("<h1>E01</h1>")
    (site / "runs" / "a.html").write_text("run")
    export_bundle(runs, EXP, tmp_path / "a.zip", include_site=site)
    files = entries((tmp_path / "a.zip").read_bytes())
    assert files["site/index.html"] == b"<h1>E01</h1>" and "site/runs/a.html" in files
    assert verify_bundle(tmp_path / "a.zip").section("container").ok


def test_export_refuses_an_unknown_experiment_and_damaged_evidence(runs, tmp_path):
    with pytest.raises(InputError, match="experiment 'E99' has no journal"):
        export_bundle(runs, "E99", tmp_path / "x.zip")
    with pytest.raises(InputError, match="no such runs directory"):
        export_bundle(tmp_path / "nope", EXP, tmp_path / "x.zip")
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(runs, broken)
    run_file = sorted((broken / "runs").glob("*/*.jsonl"))[0]
    run_file.write_bytes(run_file.read_bytes().replace(b'"latency_ms":', b'"latency_ms":1', 1))
    with pytest.raises(IntegrityError, match="do not hash to the run id"):
        export_bundle(broken, EXP, tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()


def test_export_cli_prints_the_path_and_identity(runs, tmp_path):
    out = tmp_path / "cli.zip"
    res = CliRunner().invoke(cli, ["export", EXP, "--runs", str(runs), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["path"] == str(out) and rep["manifest_digest"].startswith("sha256:")
    res = CliRunner().invoke(cli, ["export", "--help"])
    assert "Example: benchclaw export E01" in res.output


def _verify_cli(*args):
    return subprocess.run([sys.executable, "-c", "from benchclaw.verify.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=60)


def test_verify_cli_exit_codes_and_outputs(runs, tmp_path):
    export_bundle(runs, EXP, tmp_path / "a.zip")
    (tmp_path / "junk.zip").write_bytes(b"not a zip at all; " * 4)
    res = _verify_cli(str(tmp_path / "junk.zip"))
    assert res.returncode == 2 and "UNREADABLE" in res.stdout and "no end-of-central-directory" in res.stdout
    res = _verify_cli(str(tmp_path / "a.zip"), "--json")
    report = json.loads(res.stdout)
    assert res.returncode == report["exit_code"]
    assert [s["name"] for s in report["sections"]][:4] == ["container", "runs", "checks", "costs"]
    assert all(s["ok"] for s in report["sections"][:4])
    res = _verify_cli(str(tmp_path / "junk.zip"), "--quiet")
    assert res.stdout == "" and "UNREADABLE" in res.stderr and "not run" not in res.stderr
    assert "first failures" in res.stderr


def test_verify_help_is_light_and_documents_exit_codes():
    # Its speed is bench/startup.py's (target 0.3 s; a wall-clock bound here fails on a busy
    # machine): here, that --help loads none of the heavy libraries a start-up would pay for.
    code = ("import sys\nfrom benchclaw.verify.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    print('HEAVY', sorted(m for m in ('openai', 'httpx', 'jinja2', 'ray', 'litellm', 'click', "
            "'multiprocessing', 'asyncio') if m in sys.modules), file=sys.stderr)\n    raise\n")
    res = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "exit codes: 0 verified, 1 evidence does not match" in res.stdout
    assert "HEAVY []" in res.stderr, res.stderr


def test_export_refuses_a_damaged_blob_and_leaves_no_bundle(runs, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(runs, broken)
    # the largest blob, in its pack: its last byte changed (the entry's frame kept)
    pack, (_, offset, size) = max(((p, e) for p in list_packs(str(broken / "objects")) for e in scan_pack(p).entries),
                                  key=lambda pe: pe[1][2])
    with open(pack, "r+b") as f:
        f.seek(offset + size - 1)
        f.write(b"!")
    with pytest.raises(IntegrityError, match="bytes do not match digest"):
        export_bundle(broken, EXP, tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists() and not list(tmp_path.glob(".x.zip*"))
