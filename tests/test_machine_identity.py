"""No machine identity in published evidence (issue 14): journal writer names and recorded
spec paths reveal no host name, user name or absolute path, in runs/ as in bundles.

Before: the journal was `journals/<id>/<hostname>.jsonl` and `prereg` recorded the spec
path as given (absolute when given so), and both went into the bundle.
"""

from __future__ import annotations

import asyncio
import socket
import zipfile

from benchclaw.bundle import export_bundle
from benchclaw.experiments import prereg
from benchclaw.experiments.runner import run_experiment
from benchclaw.evidence.store import Store, default_writer

from .test_experiments import MINIMAL


def test_journals_and_bundles_name_no_host_and_no_absolute_path(tmp_path):
    project = tmp_path / "alice-home" / "project"
    (project / "experiments").mkdir(parents=True)
    spec = (project / "experiments" / "X1.toml").resolve()
    spec.write_bytes(MINIMAL)
    store = Store(project / "runs", fsync=False)
    prereg(store, spec)  # an absolute path, as a user may type it
    asyncio.run(run_experiment(store, "X1", handle_signals=False, sim_options={"latency_scale": 0}))
    bundle = tmp_path / "X1.zip"
    export_bundle(store.root, "X1", bundle)

    host = socket.gethostname()
    writers = {p.stem for p in store.journal_paths("X1")}
    assert writers == {default_writer()} and default_writer().startswith("w-") and host not in default_writer()
    assert [e.body["spec_path"] for e in store.read_journal("X1") if e.kind == "prereg"] == ["experiments/X1.toml"]
    secret_bits = [str(tmp_path).encode(), b"alice-home"]
    for path in store.root.rglob("*"):
        if path.is_file():
            assert not any(b in path.read_bytes() for b in secret_bits), path
    with zipfile.ZipFile(bundle) as z:
        for name in z.namelist():
            assert host not in name.split("/")[-1] or not name.startswith("journals/"), name
            assert not any(b in z.read(name) for b in secret_bits), name


def test_a_spec_outside_the_project_is_recorded_by_its_file_name_only(tmp_path):
    elsewhere = tmp_path / "private" / "X1.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(MINIMAL)
    store = Store(tmp_path / "project" / "runs")
    reg = prereg(store, elsewhere)
    assert reg.spec_path == "X1.toml"
