"""Across experiments: `benchclaw compare`, the comparison page, and `analysis.compare`.

Three experiments test the same hypothesis text with the same rule, and the data make its
decision differ: supported in E01 (the ladder stops at a cheap passing tier), refuted in
E02 (every cheap attempt fails and is paid for), inconclusive in E03 (a call of unknown
cost whose worst case straddles the baseline). The comparison must repeat each
experiment's own summary figure for figure.
"""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from benchclaw.analysis import compare, experiment_facts, render_compare_markdown, render_compare_terminal
from benchclaw.analysis.compare import movement
from benchclaw.cli import cli, run_cli
from benchclaw.experiments import correct
from benchclaw.analysis.report import build_summary
from benchclaw.evidence.store import Store

from .analysis_factories import Exp, call, write_store

A, B = "quotes-a@1/direct", "cents-b@1/direct"
RULE = 'cost_per_task("ladder") < cost_per_task("always:ultra")'
CLAIM = "hypothesis H1"  # the fixture's text for H1, the same in every experiment


def _exp(name: str, seeds=(1,)) -> Exp:
    return Exp(experiment=name, seeds=seeds, hypotheses=[("H1", RULE)])


def _supported() -> Exp:  # lightning passes: the ladder pays 0.001 where ultra pays 0.010
    e = _exp("E01")
    e.grid(f"{A}/1", {"lightning": True, "super": True, "ultra": True})
    e.grid(f"{B}/1", {"lightning": True, "super": False, "ultra": True})
    return e


def _refuted() -> Exp:  # every cheap attempt fails: the ladder pays 0.014 where ultra pays 0.010
    e = _exp("E02", seeds=(1, 2))
    for cell in (f"{A}/1", f"{A}/2", f"{B}/1"):
        e.grid(cell, {"lightning": False, "super": False, "ultra": True})
    return e


def _inconclusive() -> Exp:  # lightning's cost is unknown, at most 0.05: either side of 0.010
    e = _exp("E03")
    e.add(f"{A}/1", "lightning", True, calls=[call(known=False, high="0.05")])
    e.add(f"{A}/1", "super", True)
    e.add(f"{A}/1", "ultra", True)
    return e


def _journal_runs(store: Store, exp: str) -> list[str]:
    """`run` journal records for every sealed run of ``exp`` (write_store writes none)."""
    j = store.journal(exp, "test")
    ids = []
    for run in store.iter_runs():
        if run.start["policy"]["experiment"] == exp:
            p = run.start["policy"]
            j.append("run", {"invocation": "i1", "run_id": run.run_id, "cell": p["cell"],
                             "tier": run.start["tier"], "policy": p["policy"], "trial": p["trial"],
                             "status": run.end["status"]})
            ids.append(run.run_id)
    return sorted(ids)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp") / "runs"
    store = Store(root, fsync=False)
    runs = {}
    for exp in (_supported(), _refuted(), _inconclusive()):
        write_store(exp, store)
        runs[exp.experiment] = _journal_runs(store, exp.experiment)
    correct(store, "E02", claim="The ladder is 34% cheaper than always-ultra.",
            wrong="The cost average left out a cell of unknown cost.",
            why="An independent review <b>found</b> the missing cell.",
            corrected="The ladder is 40% dearer per task.", hypothesis="H1", runs=runs["E02"][:1])
    return root, runs


def run_main(args, capsys):
    code = run_cli(cli, args, prog="benchclaw")
    out, err = capsys.readouterr()
    return code, out, err


def _row(analysis: dict, policy: str) -> dict:
    rows = {(p["policy"], p["mode"]): p for p in analysis["policies"]}
    return rows.get((policy, "live")) or rows[(policy, "replayed")]


# ---------------------------------------------------------------------------- compare --json

def test_compare_json_repeats_each_experiments_summary(three, capsys):
    root, _ = three
    code, out, err = run_main(["compare", "E01", "E02", "E03", "--runs", str(root), "--json"], capsys)
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["format"] == "benchclaw.compare" and cmp["v"] == 1
    assert [e["experiment"] for e in cmp["experiments"]] == ["E01", "E02", "E03"]
    # no live policy: the one the hypothesis names, then the baseline
    assert [p["policy"] for p in cmp["policies"]] == ["ladder", "always:ultra"]
    store = Store.existing(root)
    summaries = [build_summary(store, e) for e in ("E01", "E02", "E03")]
    code, out, err = run_main(["compare", "E01", "E02", "E03", "--runs", str(root), "--json",
                               "--policy", "ladder", "--policy", "always:ultra"], capsys)
    cmp = json.loads(out)
    for policy in cmp["policies"]:
        for s, fig in zip(summaries, policy["results"]):
            row = _row(s["primary"], policy["policy"])
            assert fig["pass_rate"] == row["pass_rate"]
            assert fig["cost_per_task"] == row["cost"]["per_task"]
            assert fig["mean_time_s"] == row["time_s"]["mean"]
            assert (fig["mode"], fig["samples"]) == (row["mode"], row["samples"])
    [claim] = cmp["hypotheses"]
    assert claim["text"] == CLAIM and claim["ids"] == ["H1"]
    assert [r["decision"] for r in claim["results"]] == ["supported", "refuted", "inconclusive"]
    assert [r["decision"] for r in claim["results"]] == [s["primary"]["decisions"][0]["decision"]
                                                           for s in summaries]
    assert claim["results"][1]["terms"] == summaries[1]["primary"]["decisions"][0]["terms"]
    assert claim["movement"] == "flipped"
    ladder = cmp["policies"][0]["results"]
    assert ladder[0]["vs_baseline"] == {"low": "-0.9000", "high": "-0.9000"}  # 0.001 vs 0.010
    assert ladder[1]["vs_baseline"] == {"low": "0.4000", "high": "0.4000"}    # 0.014 vs 0.010
    assert ladder[2]["vs_baseline"] == {"low": "-1.0000", "high": "4.0000"}  # [0, 0.05] vs 0.010
    seeds = next(r for r in cmp["spec"] if r["field"] == "seeds")
    assert seeds["values"] == [["1"], ["1", "2"], ["1"]] and seeds["differs"]
    assert next(r for r in cmp["spec"] if r["field"] == "tasks")["values"][2] == ["quotes-a@1"]
    [corr] = cmp["corrections"]
    assert corr["experiment"] == "E02" and corr["hypothesis"] == "H1" and corr["corrected"].endswith("dearer per task.")


def test_compare_terminal_fits_100_columns_and_markdown_keeps_every_column(three, capsys):
    root, _ = three
    code, out, err = run_main(["compare", "E01", "E02", "E03", "--runs", str(root)], capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "SUPPORTED" in out and "REFUTED" in out and "INCONCLUSIVE" in out and "FLIPPED" in out
    code, md, err = run_main(["compare", "E01", "E02", "E03", "--runs", str(root), "--markdown"], capsys)
    assert code == 0, err
    header = next(line for line in md.splitlines() if line.startswith("| hypothesis"))
    assert header == "| hypothesis | E01 | E02 | E03 | moved |"


def test_compare_refuses_fewer_than_two_experiments_and_unknown_ones(three, capsys):
    root, _ = three
    code, _, err = run_main(["compare", "E01", "--runs", str(root)], capsys)
    assert code == 2 and "at least two" in err
    code, _, err = run_main(["compare", "E01", "E02", "E01", "--runs", str(root)], capsys)
    assert code == 2 and "E01 is named twice" in err
    code, _, err = run_main(["compare", "E01", "E09", "--runs", str(root)], capsys)
    assert code == 2 and "E09" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- the site

def test_comparison_page_shows_each_experiments_figures_and_decisions(three, tmp_path):
    from benchclaw.site import build_site

    root, runs = three
    site = tmp_path / "site"
    build_site(root, site)
    html = (site / "compare.html").read_text()
    store = Store.existing(root)
    for exp in ("E01", "E02", "E03"):
        s = build_summary(store, exp)
        row = _row(s["primary"], "always:ultra")
        assert f'href="experiments/{exp}.html#policies"' in html
        assert f'href="experiments/{exp}/cells-1.html"' in html
        assert row["pass_rate"]["fraction"] in html
    claims = html.split('id="hypotheses"', 1)[1].split("</table>", 1)[0]
    decisions = re.findall(r'class="dec dec-(\w+)"', claims)
    assert decisions == ["supported", "refuted", "inconclusive"]
    assert "flipped" in claims
    assert html.split('id="moved"', 1)[1].count("<svg") == 4 and "How each claim moved" in html
    assert "Cost per task against always:ultra" in html
    log = html.split('id="corrections"', 1)[1]
    assert "The ladder is 40% dearer per task." in log
    assert "&lt;b&gt;found&lt;/b&gt;" in log and "<b>found</b>" not in log  # escaped, never markup
    assert f"runs/{runs['E02'][0][:2]}/{runs['E02'][0]}.html" in log
    exp_page = (site / "experiments" / "E02.html").read_text()
    assert "The ladder is 34% cheaper than always-ultra." in unescape(exp_page)
    assert 'href="compare.html"' in (site / "index.html").read_text()


def test_one_experiment_builds_no_comparison_page(tmp_path):
    from benchclaw.site import build_site

    store = Store(tmp_path / "runs", fsync=False)
    write_store(_supported(), store)
    build_site(tmp_path / "runs", tmp_path / "site")
    assert not (tmp_path / "site" / "compare.html").exists()
    assert "compare.html" not in (tmp_path / "site" / "index.html").read_text()


# ---------------------------------------------------------------------------- the pure parts

@pytest.mark.parametrize("decisions,moved", [
    (["supported", "supported"], "held"), (["refuted", None, "refuted"], "held"),
    (["supported", "refuted"], "flipped"), (["supported", "inconclusive"], "became_inconclusive"),
    (["inconclusive", "refuted"], "resolved"), (["inconclusive", "inconclusive"], "unsettled"),
    (["supported"], "single"), (["supported", "error"], "error"),
])
def test_movement_names_how_a_claim_moved(decisions, moved):
    assert movement(decisions) == moved


def test_hypotheses_are_matched_by_text_across_renumbered_ids():
    def summary(exp, hid, text, decision):
        return {"experiment": exp, "tiers": ["a", "b"], "live_policies": [], "primary": {
            "cells": 1, "policies": [], "decisions": [{"id": hid, "text": text, "rule": "r",
                                                       "decision": decision, "terms": [], "error": None}]},
            "secondary": None}
    facts = experiment_facts({}, (), ())
    cmp = compare([(summary("E01", "H1", "Ladder  is cheaper.", "supported"), facts),
                   (summary("E04", "H7", "ladder is cheaper.", "refuted"), facts),
                   (summary("E05", "H1", "Something else.", "supported"), facts)])
    first, other = cmp["hypotheses"]
    assert first["ids"] == ["H1", "H7"] and first["movement"] == "flipped"
    assert [r and r["id"] for r in first["results"]] == ["H1", "H7", None]
    assert other["results"][:2] == [None, None] and other["movement"] == "single"


def test_rendered_comparison_of_the_pure_object(three):
    root, _ = three
    store = Store.existing(root)
    from benchclaw.analysis.report import build_comparison

    cmp = build_comparison(store, ["E03", "E01"], ["ladder", "always:ultra"])
    text = render_compare_terminal(cmp)
    assert text.index("E03") < text.index("E01")
    assert "ladder: vs always:ultra" in text and "-90.00%" in text
    assert "| ladder: vs always:ultra |" in render_compare_markdown(cmp)


def test_secondary_figures_ride_along_labelled_where_reruns_exist():
    from benchclaw.analysis import summarise

    def with_rerun(name: str) -> dict:
        e = Exp(experiment=name, hypotheses=[("H1", 'pass_rate("always:ultra") >= 1')])
        e.grid(f"{A}/1", {"lightning": True, "super": True})
        e.add(f"{A}/1", "ultra", False, status="provider_error", calls=[call(outcome="error", error="server")])
        failed = next(rid for rid, recs in e.data().runs.items() if recs[0].body["tier"] == "ultra")
        e.add(f"{A}/1", "ultra", True, rerun=True, replaces=failed)
        return summarise(e.data())

    plain = summarise(_supported().data())
    rerun = with_rerun("E02")
    cmp = compare([(plain, experiment_facts({}, (), ())), (rerun, experiment_facts({}, (), ()))],
                  ["always:ultra"])
    assert [e["secondary"] for e in cmp["experiments"]] == [False, True]
    first, second = cmp["policies"][0]["results"]
    assert first["secondary"] is None
    assert second["pass_rate"]["fraction"] == "0/1"  # primary: the failed run stands
    assert second["secondary"]["pass_rate"] == _row(rerun["secondary"], "always:ultra")["pass_rate"]
    assert second["secondary"]["pass_rate"]["fraction"] == "1/1"
    text = render_compare_terminal(cmp)
    assert "always:ultra: secondary pass" in text
