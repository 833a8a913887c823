"""The static replay site: pages, safety, determinism, incremental rebuilds (issue #8)."""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from benchclaw.errors import InputError, IntegrityError, UsageError
from benchclaw.site import build_site
from benchclaw.site._render import object_url, run_url
from tests.synth_runs import XSS_PROBE, add_run, synth_runs
from benchclaw.evidence.store import Store


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("runs") / "runs"
    info = synth_runs(root, 36)
    return root, info


@pytest.fixture(scope="module")
def site(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(runs[0], out)
    return out


def pages(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.html"))}


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.refs += [v for k, v in attrs if k in ("href", "src", "action", "srcset", "data") and v]


def test_build_writes_every_kind_of_page(runs, site):
    root, info = runs
    assert (site / "index.html").is_file()
    assert (site / "experiments" / "E01.html").is_file()
    assert (site / "gallery.html").is_file() and (site / "verify.html").is_file()
    assert (site / "static" / "style.css").is_file()
    assert all((site / run_url(r)).is_file() for r in info.run_ids)
    assert sorted(p.name for p in (site / "tasks").glob("*.html")) == [
        "cents-invoice-v1.html", "index.html", "pricing-rules-v1.html", "quotes-incident-v1.html"]
    assert len(list((site / "experiments" / "E01" / "cells").glob("*.html"))) == 12
    exp = (site / "experiments" / "E01.html").read_text()
    assert "always:ultra" in exp and "<svg" in exp and "SIMULATED" in exp
    assert "sha256:" in exp and "2026-11-30T02:55" in exp  # the pre-registration digest and time
    families = exp.split("<h2>Families</h2>")[1].split("<h2>Cells</h2>")[0]  # one row per family
    for fam in ("quotes", "cents", "pricing"):
        assert f'<td class="mono">{fam}</td>' in families
    assert "first tier that passes" in families and "ultra: cost per task" in families


def test_run_page_replays_turns_checks_and_artifact(runs, site):
    root, info = runs
    store = Store(root)
    run = next(r for r in store.iter_runs() if r.end["status"] == "failed" and r.of_kind("artifact"))
    html = (site / run_url(run.run_id)).read_text()
    for rec in run.of_kind("call"):
        if rec.body.get("request_id"):
            assert rec.body["request_id"] in html
    for rec in run.of_kind("check"):
        assert rec.body["id"] in html
    failed = [c.body for c in run.of_kind("check") if not c.body["passed"]]
    assert failed[0]["detail"].replace("'", "&#39;") in html
    assert "diff: reference (expected) vs artifact (got)" in html
    assert 'class="d-del"' in html and 'class="d-add"' in html


def test_xss_probe_in_a_reply_is_escaped_text(runs, site):
    html = (site / run_url(runs[1].xss_run)).read_text()
    assert "&lt;script&gt;window.__xss = 1" in html
    assert "<script" not in html and "onerror=\"window" not in html
    for rel, data in pages(site).items():
        assert b"<script" not in data, rel
    assert XSS_PROBE  # the probe is the synthetic reply the browser test also checks


def test_every_link_is_relative_and_nothing_external(site):
    for rel, data in pages(site).items():
        parser = _Refs()
        parser.feed(data.decode())
        assert not parser.tags & {"script", "iframe", "object", "embed", "form", "base"}, rel
        for ref in parser.refs:
            assert not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//|^/", ref), (rel, ref)
            target = (site / rel).parent / ref.split("#")[0]
            assert ref.startswith("#") or target.resolve().is_file(), (rel, ref)
    css = (site / "static" / "style.css").read_text()
    assert "url(" not in css and "@import" not in css


def test_no_absolute_path_of_the_build_machine(runs, site):
    spec_path = str(runs[0].resolve().parent / "experiments")  # recorded absolute by prereg
    files = {p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*") if p.is_file()
             and not p.parts[-2:-1] == ("objects",) and "/objects/" not in p.as_posix()}
    assert any(rel.startswith(".benchclaw-build/") for rel in files)
    for rel, data in files.items():
        for path in (str(runs[0]), str(site), str(Path.cwd()), spec_path):
            assert path.encode() not in data, (rel, path)


def test_same_inputs_give_the_same_bytes(runs, site, tmp_path):
    other = tmp_path / "elsewhere" / "site"
    build_site(runs[0], other)
    assert pages(other) == pages(site)
    objects = lambda out: sorted(p.relative_to(out).as_posix() for p in (out / "objects").rglob("*.txt"))  # noqa: E731
    assert objects(other) == objects(site)


def test_rebuild_rewrites_only_what_changed(tmp_path):
    root, out = tmp_path / "runs", tmp_path / "site"
    info = synth_runs(root, 12)
    first = build_site(root, out)
    assert first.pages_written > 0 and first.runs_rendered == 12
    page = out / run_url(info.run_ids[0])
    before = page.stat().st_mtime_ns
    again = build_site(root, out)
    assert again.pages_written == 0 and again.runs_rendered == 0
    new = add_run(root, experiment="E01", seed=99)
    third = build_site(root, out)
    assert third.runs_rendered == 1 and (out / run_url(new)).is_file()
    assert 0 < third.pages_written < 15
    assert page.stat().st_mtime_ns == before
    assert new[:12] in (out / "runs" / "page-1.html").read_text()
    assert pages(out) == pages(_fresh(root, tmp_path / "fresh"))


def _fresh(root: Path, out: Path) -> Path:
    build_site(root, out)
    return out


def test_public_build_leaves_out_full_prompts(runs, site, tmp_path):
    store = Store(runs[0])
    run = store.read_run(runs[1].run_ids[0])
    request = run.of_kind("call")[0].body["request"]
    full = (site / run_url(run.run_id)).read_text()
    assert object_url(request) in full and (site / object_url(request)).is_file()
    public = tmp_path / "public"
    build_site(runs[0], public, public=True)
    html = (public / run_url(run.run_id)).read_text()
    assert object_url(request) not in html and "request as sent" not in html
    assert not (public / object_url(request)).exists()
    assert "public build" in html


def test_switching_to_public_removes_private_blobs(runs, tmp_path):
    out = tmp_path / "site"
    build_site(runs[0], out)
    request = Store(runs[0]).read_run(runs[1].run_ids[0]).of_kind("call")[0].body["request"]
    assert (out / object_url(request)).is_file()
    build_site(runs[0], out, public=True)
    assert not (out / object_url(request)).exists()


def test_api_key_value_never_reaches_a_page(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("EXAMPLE_API_KEY", "Boundaries matter")  # a string the task prompt holds
    out = tmp_path / "site"
    build_site(runs[0], out)
    task = (out / "tasks" / "pricing-rules-v1.html").read_text()
    assert "[REDACTED]" in task
    assert all(b"Boundaries matter" not in data for data in pages(out).values())


def test_huge_reply_is_cut_and_its_blob_linked(tmp_path):
    root = tmp_path / "runs"
    store = Store(root, fsync=False)
    reply = store.put_blob(b'{"action": "finish", "summary": "' + b"z" * 200_000 + b'"}')
    w = store.open_run()
    w.append("run.start", {"task": {"id": "t", "version": 1}, "tier": "ultra", "simulated": True})
    w.append("call", {"turn": 0, "attempt": 0, "outcome": "stop", "finish_reason": "stop", "reply": reply,
                      "usage": None, "cost": {"known": False, "low": "0", "high": "0.1"}})
    w.append("mystery.kind", {"note": "<b>kept</b>"})
    w.append("run.end", {"status": "failed", "reason": "no artifact"})
    run_id = w.seal()
    out = tmp_path / "site"
    build_site(root, out)
    page = out / run_url(run_id)
    assert page.stat().st_size < 60_000
    html = page.read_text()
    assert object_url(reply) in html and (out / object_url(reply)).read_bytes() == store.get_blob(reply)
    assert "mystery.kind" in html and "&lt;b&gt;kept&lt;/b&gt;" in html


def test_damaged_run_log_is_an_error_naming_the_file(tmp_path):
    root = tmp_path / "runs"
    info = synth_runs(root, 3)
    path = Store(root).run_path(info.run_ids[0])
    path.write_bytes(path.read_bytes().replace(b'"seed":1', b'"seed":2', 1))
    with pytest.raises(IntegrityError, match=info.run_ids[0]):
        build_site(root, tmp_path / "site")


def test_bad_arguments_are_clear_errors(runs, tmp_path):
    with pytest.raises(InputError, match="no such runs directory"):
        build_site(tmp_path / "nope", tmp_path / "site")
    with pytest.raises(UsageError, match="inside the runs directory"):
        build_site(runs[0], runs[0] / "site")
    with pytest.raises(InputError, match="no such bundle"):
        build_site(runs[0], tmp_path / "site", bundle_path=tmp_path / "missing.zip")


def test_verify_page_names_bundle_digest_and_command(runs, tmp_path):
    bundle = tmp_path / "bundle.zip"
    bundle.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    out = tmp_path / "site"
    build_site(runs[0], out, bundle_path=bundle)
    html = (out / "verify.html").read_text()
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() in html
    assert "benchclaw-verify bundle.zip" in html
    assert (out / "bundle.zip").read_bytes() == bundle.read_bytes()


def test_gallery_shows_the_runs_worth_seeing(site):
    html = (site / "gallery.html").read_text()
    for title in ("Ran out of tokens", "Denied injection attempts", "A dropped row", "An invented or altered quote",
                  "A boundary miss", "A smaller tier passed where a bigger one failed"):
        section = html.split(title, 1)[1].split("</section>", 1)[0]
        assert "runs/" in section, title
    quote = html.split('id="quote"', 1)[1].split("</section>", 1)[0]
    assert "claim c1 quote 1:" in quote and "is not on incident.md:4" in quote  # which claim, which line


def test_a_reply_cut_off_at_the_length_limit_is_not_labelled_denied(runs, site):
    import re

    cut = [p for p in (site / "runs").glob("*/*.html") if "cut off at max_tokens" in p.read_text()]
    assert cut, "the synthetic runs hold a reply cut off by the length limit"
    html = cut[0].read_text()
    assert "the reply was cut off at the length limit" in html
    turn = html.split("the reply was cut off at the length limit", 1)[0].rsplit('class="turn"', 1)[1]
    assert not re.search(r'<span class="bad">denied</span>', turn)
    assert "why denied" not in html.split("the reply was cut off at the length limit", 1)[1].split("</section>", 1)[0]


def test_verify_page_without_a_bundle_suggests_commands_that_work(tmp_path, monkeypatch):
    import html as html_mod
    import shlex

    from click.testing import CliRunner

    from benchclaw.cli import cli
    from benchclaw.verify import verify_bundle

    from .test_bundle_support import grid_runs

    grid_runs(tmp_path / "runs")  # a real grid: runner, simulator and ledger
    build_site(tmp_path / "runs", tmp_path / "site")
    page = (tmp_path / "site" / "verify.html").read_text()
    cmds = html_mod.unescape(page.split('<pre class="cmd">', 1)[1].split("</pre>", 1)[0]).splitlines()
    assert cmds[0].startswith("benchclaw export E01 ")
    monkeypatch.chdir(tmp_path)  # the commands run in the folder that holds runs/
    for cmd in cmds:
        argv = shlex.split(cmd)
        if argv[0] == "benchclaw-verify":
            assert verify_bundle(tmp_path / argv[1]).exit_code == 0
            continue
        res = CliRunner().invoke(cli, argv[1:])
        assert res.exit_code == 0, (cmd, res.output)
    assert "E01.zip" in (tmp_path / "site" / "verify.html").read_text()


def test_runs_list_is_paginated(tmp_path, monkeypatch):
    from benchclaw.site import _pages

    monkeypatch.setattr(_pages, "RUNS_PER_PAGE", 5)
    root = tmp_path / "runs"
    synth_runs(root, 12)
    out = tmp_path / "site"
    build_site(root, out)
    assert sorted(p.name for p in (out / "runs").glob("page-*.html")) == ["page-1.html", "page-2.html", "page-3.html"]
    assert 'href="page-2.html"' in (out / "runs" / "page-1.html").read_text()


def test_secondary_analysis_is_on_the_site_labelled_next_to_the_primary(tmp_path):
    from benchclaw.analysis import summarise
    from benchclaw.analysis.report import load_experiment
    from benchclaw.evidence.store import Store

    from .analysis_factories import Exp, RunSpec, call, write_store

    cell = "quotes-a@1/direct/1"
    e = Exp(hypotheses=[("H1", 'pass_rate("always:ultra") >= 1')])
    e.grid(cell, {"lightning": True, "super": True})
    e.add(cell, "ultra", False, status="provider_error", calls=[call(outcome="error", error="server")])
    store = Store(tmp_path / "runs", fsync=False)
    digest = write_store(e, store)
    failed = next(r.run_id for r in store.iter_runs() if r.start["tier"] == "ultra")
    rerun = RunSpec(cell, "ultra", True, True, [call("0.010")], rerun=True, replaces=failed, spec_digest=digest)
    w = store.open_run()
    for kind, body in rerun.bodies("E01"):
        w.append(kind, body)
    w.seal()
    summary = summarise(load_experiment(store, "E01"))
    assert summary["secondary"] is not None
    build_site(tmp_path / "runs", tmp_path / "site")
    html = (tmp_path / "site" / "experiments" / "E01.html").read_text()
    primary = html.split('id="policies"', 1)[1].split('id="secondary"', 1)[0]
    second = html.split('id="secondary"', 1)[1].split("</section>", 1)[0]
    assert "secondary analysis" in second and "reruns stand in for the runs they replace" in second
    assert "0/1" in primary.split("always:ultra", 1)[1].split("</tr>", 1)[0]   # primary: the failed run
    assert "1/1" in second.split("always:ultra", 1)[1].split("</tr>", 1)[0]    # secondary: the rerun
    decisions = second.split("secondary decision", 1)[1]
    assert 'dec-supported' in decisions and 'dec-refuted' in decisions  # side by side
