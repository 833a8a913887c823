"""The import boundary: the verifier and the pure modules import nothing impure.

Each case runs in a fresh interpreter, does its work (for the verifier: a whole
verification of a real bundle, so lazily imported steps are loaded too) and then lists
``sys.modules``. Pure means: the standard library, ``orjson`` and BenchClaw's pure
modules only; never the providers, the agent, the runner, the store, the ledger, the
site, the CLI, nor ``openai``/``jinja2``/``click``/``markdown_it``; and for the verifier,
no networking module either.
"""

import json
import subprocess
import sys

import pytest

from benchclaw.bundle import export_bundle

from tests.test_bundle_support import EXP, honest_runs

IMPURE = ("benchclaw.providers", "benchclaw.agent", "benchclaw.experiments.runner", "benchclaw.site",
          "benchclaw.evidence.store", "benchclaw.evidence.check", "benchclaw.experiments.ledger", "benchclaw.sim",
          "benchclaw.cli", "benchclaw.bundle", "benchclaw.experiments", "benchclaw.analysis.report",
          "openai", "jinja2", "click", "markdown_it", "httpx")
NETWORK = ("socket", "ssl", "http", "urllib.request", "asyncio")

_PROBE = r"""
import json, sys
before = set(sys.modules)
{setup}
mods = sorted(set(sys.modules) - before)
third = sorted({{m.split(".")[0] for m in mods}} - set(sys.stdlib_module_names) - {{"benchclaw", "orjson", "__main__"}})
print(json.dumps({{"modules": mods, "third_party": third}}))
"""


def _probe(setup: str) -> dict:
    res = subprocess.run([sys.executable, "-c", _PROBE.format(setup=setup)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _bad(modules: list[str], prefixes) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("boundary")
    honest_runs(root / "runs")
    export_bundle(root / "runs", EXP, root / "b.zip")
    return root / "b.zip"


def test_a_whole_verification_imports_nothing_impure_and_no_network(bundle_path):
    got = _probe("from benchclaw.verify import verify_bundle\n"
                 f"rep = verify_bundle({str(bundle_path)!r})\n"
                 "assert rep.section('checks').ran and rep.section('costs').ran\n"
                 "from benchclaw.verify.cli import render_text; render_text(rep)")
    assert _bad(got["modules"], IMPURE) == []
    assert _bad(got["modules"], NETWORK) == []
    assert got["third_party"] == []
    # one definition each: the verifier replays ledgers and reads catalogs with the
    # runtime's own (pure) modules, not with copies of its own
    assert {"benchclaw.formats.ledger", "benchclaw.formats.catalog", "benchclaw.formats.sim_rules"} <= set(got["modules"])


@pytest.mark.parametrize("module", ["benchclaw.analysis", "benchclaw.checks", "benchclaw.formats.money",
                                    "benchclaw.formats.records", "benchclaw.formats.policies", "benchclaw.formats.jsonio",
                                    "benchclaw.checks.digest", "benchclaw.checks.tasks", "benchclaw.formats.names",
                                    "benchclaw.formats.ledger", "benchclaw.formats.catalog",
                                    "benchclaw.formats.spec", "benchclaw.formats.sim_rules"])
def test_pure_module_imports_only_the_standard_library_and_pure_modules(module):
    got = _probe(f"import {module}")
    assert _bad(got["modules"], IMPURE) == [], module
    assert got["third_party"] == [], module


def test_the_probe_would_notice_an_impure_import():
    got = _probe("import benchclaw.evidence.store")
    assert _bad(got["modules"], IMPURE) == ["benchclaw.evidence.store"]


def test_the_writer_modules_use_the_pure_ones_they_share_with_the_verifier():
    from benchclaw.formats import (catalog as catalog_format, ledger as ledger_replay, names,
                                   spec as spec_format)
    from benchclaw.experiments import ledger
    from benchclaw.evidence import store
    from benchclaw.providers import catalog

    assert ledger.LedgerState is ledger_replay.LedgerState and ledger.Limits is ledger_replay.Limits
    assert catalog.Catalog is catalog_format.Catalog and catalog.Tier is catalog_format.Tier
    assert store.safe_name is names.safe_name
    # the simulator's usage rules are the ones the verifier recomputes simulated usage with
    from benchclaw.formats import sim_rules
    from benchclaw.sim import engine, profiles, solvers

    assert profiles.Profile is sim_rules.Profile and solvers.detect_family is sim_rules.detect_family
    assert engine.prompt_tokens is sim_rules.prompt_tokens and engine._Streams is sim_rules.Streams
