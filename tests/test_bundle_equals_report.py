"""A bundle's claimed ``summary.json`` is exactly what ``benchclaw report --json`` writes from
the runs directory it was exported from: byte for byte, on the demo and on a grid with
deviations, a spend stop, unknown usage, provider errors and reruns. (A bundle that left out
the task files' blobs or an earlier spec claimed other numbers than the project's report.)"""

import json
import zipfile

import pytest
from click.testing import CliRunner

from benchclaw.bundle import export_bundle
from benchclaw.cli import cli
from benchclaw.verify import verify_bundle

from tests.test_bundle_support import EXP, eventful_runs


def _report_json(runs, experiment) -> bytes:
    res = CliRunner().invoke(cli, ["report", experiment, "--runs", str(runs), "--json", "-"])
    assert res.exit_code in (0, 1), res.output
    return res.stdout_bytes if hasattr(res, "stdout_bytes") else res.output.encode()


def _journal_kinds(runs, experiment) -> list:
    out = []
    for p in sorted((runs / "journals" / experiment).glob("*.jsonl")):
        out += [json.loads(line) for line in p.read_text().splitlines()]
    return out


@pytest.fixture(scope="module")
def eventful(tmp_path_factory):
    root = tmp_path_factory.mktemp("eventful")
    runs = eventful_runs(root / "runs")
    export_bundle(runs, EXP, root / "b.zip")
    return runs, root / "b.zip"


def test_the_eventful_grid_has_what_the_equality_test_is_about(eventful):
    runs, _ = eventful
    recs = _journal_kinds(runs, EXP)
    kinds = [r["kind"] for r in recs]
    first_run = kinds.index("run")
    assert "deviation" in kinds[:first_run]
    assert any(r["kind"] == "stop" and r["body"]["rule"] == "spend" for r in recs)
    assert any(r["kind"] == "run" and r["body"]["rerun"] for r in recs)
    summary = json.loads(zipfile.ZipFile(eventful[1]).read("summary.json"))
    text = json.dumps(summary)
    assert summary["lures_known"] is True
    assert '"known": false' in text  # unknown usage reached the tables


def test_the_eventful_bundle_summary_equals_the_report_byte_for_byte(eventful):
    runs, bundle = eventful
    claimed = zipfile.ZipFile(bundle).read("summary.json")
    assert claimed == _report_json(runs, EXP)
    assert verify_bundle(bundle).exit_code == 0


def test_the_demo_bundle_summary_equals_the_report_byte_for_byte(demo_result):
    res = demo_result
    claimed = zipfile.ZipFile(res.bundle).read("summary.json")
    exp = json.loads(zipfile.ZipFile(res.bundle).read("manifest.json"))["experiments"][0]
    assert json.loads(claimed)["lures_known"] is True
    assert claimed == _report_json(res.runs, exp)
