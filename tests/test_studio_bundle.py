"""A studio's journal as evidence: a real session's runs exported (``benchclaw export
studio-public``) into an exploratory bundle that ``benchclaw-verify`` checks offline, and
consistent forgeries of it refused with exit 1 naming what does not follow.

The session is a real ``benchclaw studio`` process driven over HTTP (``studio_helpers``):
two visitors run jobs until their session budget refuses, a third runs ladder jobs until
the day's budget refuses (so a session reservation is released at zero when the day
refuses it).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.bundle._zipwrite import in_bundle_order, write_zip
from benchclaw.formats.records import split_lines
from benchclaw.verify import verify_bundle
from benchclaw.verify.cli import render_text
from benchclaw.verify.manifest import MANIFEST, RUN_PATH, build_manifest, run_path

from .studio_helpers import CLI, StudioProcess, Visitor, write_config
from .test_bundle_support import entries, rewrite_lines

JOURNAL = "journals/studio-public/studio.jsonl"


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _verify_cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from benchclaw.verify.cli import main; sys.argv[0] = 'benchclaw-verify'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def _run_jobs(v: Visitor, policy: str, limit: int = 40) -> list[int]:
    """Start jobs, each followed to its end, until the studio refuses one."""
    statuses = []
    for _ in range(limit):
        r = v.start("quotes-incident", policy)
        statuses.append(r.status)
        if r.status != 303:
            break
        events, _, _ = v.events(r.headers["location"])
        assert events[-1][0] == "done"
    return statuses


@pytest.fixture(scope="module")
def studio_bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("studio-bundle")
    config = write_config(root / "studio.toml", policies=("ladder", "always:lightning"), session_usd="0.012",
                          day_usd="0.03", latency_scale=0)
    with StudioProcess(config, root / "runs") as studio:
        # two visitors spend their session budget in small lightning calls (over 0.011 each),
        # so the third's ladder meets the day's limit (under 0.008 left) before its session's
        refusals = [_run_jobs(Visitor(studio.url), policy)[-1]
                    for policy in ("always:lightning", "always:lightning", "ladder")]
    assert refusals == [402] * 3  # every visitor ran until a budget said no
    out = _cli("export", "studio-public", "--runs", str(root / "runs"), "-o", str(root / "studio.zip"))
    assert out.returncode == 0, out.stderr
    return root, (root / "studio.zip").read_bytes()


# ------------------------------------------------------------------------------ honest

def test_a_real_studio_session_exports_and_verifies_offline(studio_bundle):
    root, data = studio_bundle
    res = _verify_cli(str(root / "studio.zip"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "6 label     ok" in res.stdout and "7 order     ok" in res.stdout and "8 complete  ok" in res.stdout
    assert "studio-public is EXPLORATORY" in res.stdout and "REGISTRATION" not in res.stdout
    files = entries(data)
    assert jsonio.loads(files[MANIFEST])["exploratory"] is True
    assert "summary.json" not in files and not any(n.startswith("experiments/") for n in files)
    ledgers = sorted(n for n in files if n.startswith("ledgers/"))
    assert any("-day-" in n for n in ledgers) and sum("-s-" in n for n in ledgers) == 3
    rep = verify_bundle(data)
    assert rep.section("ledgers").counts["calls tied"] == rep.section("costs").counts["calls"] > 0
    assert rep.to_dict()["registrations"] == {} and rep.to_dict()["exploratory"] is True


def test_the_day_budget_refusal_is_in_the_bundle_and_released_at_zero(studio_bundle):
    files = entries(studio_bundle[1])
    day = next(n for n in files if "-day-" in n)
    refused = [jsonio.loads(ln)["body"] for ln in split_lines(files[day])[0] if b'"refuse"' in ln]
    assert refused, "the fixture should reach the day budget"
    released = [jsonio.loads(ln)["body"] for n in files if "-s-" in n for ln in split_lines(files[n])[0]
                if b"refused by the studio's day budget" in ln]
    assert released and all(b["known"] and b["usd"] == "0" and b["tokens"] == 0 for b in released)


def test_verifying_an_exploratory_bundle_imports_nothing_impure(studio_bundle):
    from .test_boundaries import IMPURE, NETWORK, _bad, _probe

    got = _probe("from benchclaw.verify import verify_bundle\n"
                 f"rep = verify_bundle({str(studio_bundle[0] / 'studio.zip')!r})\n"
                 "assert rep.exit_code == 0 and rep.section('label').ran and rep.section('ledgers').ran\n"
                 "from benchclaw.verify.cli import render_text; render_text(rep)")
    assert "benchclaw.verify._exploratory" in got["modules"]
    assert _bad(got["modules"], IMPURE + ("benchclaw.studio",)) == [] and _bad(got["modules"], NETWORK) == []


def test_exporting_twice_gives_the_same_bytes(studio_bundle, tmp_path):
    root, data = studio_bundle
    out = _cli("export", "studio-public", "--runs", str(root / "runs"), "-o", str(tmp_path / "again.zip"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "again.zip").read_bytes() == data


def test_an_exploratory_bundle_is_not_the_experiment_you_registered(studio_bundle):
    rep = verify_bundle(studio_bundle[1], registered="sha256:" + "0" * 64)
    assert rep.exit_code == 1
    assert any("never pre-registered" in str(f) for f in rep.section("label").failures)


def test_export_refuses_while_the_studio_serves(tmp_path):
    config = write_config(tmp_path / "studio.toml", latency_scale=0)
    with StudioProcess(config, tmp_path / "runs"):
        out = _cli("export", "studio-public", "--runs", str(tmp_path / "runs"), "-o", str(tmp_path / "b.zip"))
    assert out.returncode == 2 and "is serving" in out.stderr and "Stop it (SIGTERM)" in out.stderr, out.stderr
    assert not (tmp_path / "b.zip").exists()


def test_export_refuses_a_studio_killed_and_not_restarted(tmp_path):
    config = write_config(tmp_path / "studio.toml", policies=("ladder",), latency_scale=0.5)
    studio = StudioProcess(config, tmp_path / "runs").start()
    try:
        r = Visitor(studio.url).start("quotes-incident", "ladder")
        assert r.status == 303
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(  # killed mid-call: reservations open
                b'"reserve"' in p.read_bytes() for p in (tmp_path / "runs" / "ledgers").glob("*-s-*.jsonl")):
            time.sleep(0.05)
    finally:
        studio.kill()
    out = _cli("export", "studio-public", "--runs", str(tmp_path / "runs"), "-o", str(tmp_path / "b.zip"))
    assert out.returncode == 2 and "unfinished" in out.stderr and "start it once more" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "b.zip").exists()
    assert StudioProcess(config, tmp_path / "runs").start().stop() == 0  # the restart recovers and journals them
    out = _cli("export", "studio-public", "--runs", str(tmp_path / "runs"), "-o", str(tmp_path / "b.zip"))
    assert out.returncode == 0, out.stderr
    files = entries((tmp_path / "b.zip").read_bytes())  # the recovery's settlements are in it, and verify
    assert any(b"studio restarted" in v for n, v in files.items() if n.startswith("ledgers/"))
    rep = verify_bundle(tmp_path / "b.zip")
    assert rep.exit_code == 0, render_text(rep, 20)


# ------------------------------------------------------------------------------ forgeries

class StudioForgery:
    """Edits an exploratory bundle and redoes what follows: chains, run ids (and the
    journal's references to them) and the manifest, label kept."""

    def __init__(self, data: bytes):
        self.files = entries(data)

    def records(self, name: str) -> list[dict]:
        return [jsonio.loads(ln) for ln in split_lines(self.files[name])[0]]

    def edit_chain(self, name: str, edit) -> None:
        self.files[name] = rewrite_lines(split_lines(self.files[name])[0], edit)

    def run_ids(self) -> list[str]:
        return sorted(m.group(2) for n in self.files if (m := RUN_PATH.match(n)))

    def edit_run(self, run_id: str, edit) -> str:
        data = rewrite_lines(split_lines(self.files.pop(run_path(run_id)))[0], edit)
        new = hashlib.sha256(data).hexdigest()
        self.files[run_path(new)] = data

        def rename(objs):
            for o in objs:
                o["body"] = jsonio.loads(jsonio.dumps(o["body"]).replace(run_id.encode(), new.encode()))
            return objs
        self.edit_chain(JOURNAL, rename)
        return new

    def ledgers(self, part: str) -> list[str]:
        return sorted(n for n in self.files if n.startswith("ledgers/") and part in n)

    def pack(self, tmp) -> bytes:
        body = {k: v for k, v in self.files.items() if k != MANIFEST}
        old = jsonio.loads(self.files[MANIFEST])
        write_zip(tmp / "forged.zip", in_bundle_order(build_manifest(old["experiments"], body, exploratory=True).to_bytes(), body))
        return (tmp / "forged.zip").read_bytes()


def refused(data: bytes, section: str, *words: str) -> None:
    rep = verify_bundle(data)
    assert rep.exit_code == 1, render_text(rep)
    texts = [str(f) for f in rep.section(section).failures]
    assert any(all(w in t for w in words) for t in texts), (section, words, render_text(rep, 20))


def test_the_forgers_kit_without_an_edit_still_verifies(studio_bundle, tmp_path):
    f = StudioForgery(studio_bundle[1])
    rid = f.run_ids()[0]
    f.edit_run(rid, lambda objs: objs)
    assert verify_bundle(f.pack(tmp_path)).exit_code == 0


def test_a_runs_cost_lowered_with_its_ledgers_and_journal_redone(studio_bundle, tmp_path):
    f = StudioForgery(studio_bundle[1])
    rid = next(r for r in f.run_ids() if any(o["kind"] == "call" and o["body"]["cost"]["known"]
                                              and Decimal(o["body"]["cost"]["low"]) > 0 for o in f.records(run_path(r))))
    recs = f.records(run_path(rid))
    attempt = recs[0]["body"]["policy"]["attempt"]
    call = next(o["body"] for o in recs if o["kind"] == "call" and o["body"]["cost"]["known"])
    key, was = f"{call['turn']}.{call['attempt']}", Decimal(call["cost"]["low"])
    cheaper = str(was / 2)

    def lower_run(objs):
        for o in objs:
            b = o["body"]
            if o["kind"] == "call" and f"{b['turn']}.{b['attempt']}" == key:
                b["cost"] = {"known": True, "low": cheaper, "high": cheaper}
        end = objs[-1]["body"]["cost"]
        for k in ("low", "high"):
            end[k] = str(Decimal(end[k]) - was + Decimal(cheaper))
        return objs
    new = f.edit_run(rid, lower_run)
    end_cost = f.records(run_path(new))[-1]["body"]["cost"]

    def lower_settle(objs):
        ids = {o["body"]["id"] for o in objs if o["kind"] == "reserve" and o["body"]["attempt"] == attempt
               and o["body"]["key"] == key}
        for o in objs:
            if o["kind"] == "settle" and o["body"]["id"] in ids:
                o["body"]["usd"] = cheaper
        return objs
    for name in f.ledgers("-s-") + f.ledgers("-day-"):
        f.edit_chain(name, lower_settle)

    def journal(objs):
        for o in objs:
            if o["kind"] == "studio.run" and o["body"]["run_id"] == new:
                o["body"]["cost"] = {"known": end_cost["known"], "low": end_cost["low"], "high": end_cost["high"]}
        return objs
    f.edit_chain(JOURNAL, journal)
    refused(f.pack(tmp_path), "costs", run_path(new), "cost")


def test_a_session_ledger_record_dropped(studio_bundle, tmp_path):
    f = StudioForgery(studio_bundle[1])
    name = f.ledgers("-s-")[0]
    reserve = next(o["body"] for o in f.records(name) if o["kind"] == "reserve")
    f.edit_chain(name, lambda objs: [o for o in objs if o["body"].get("id") != reserve["id"]])
    refused(f.pack(tmp_path), "ledgers", f"call {reserve['key']} has no reservation in ledger", name[8:-6])
    refused(f.pack(tmp_path), "ledgers", "no session ledger reserved it, so the call was never made")


def test_a_jobs_outcome_restated(studio_bundle, tmp_path):
    """A job that failed journaled as passed (or the other way round): its runs say otherwise."""
    f = StudioForgery(studio_bundle[1])
    end = next(o["body"] for o in f.records(JOURNAL) if o["kind"] == "studio.job.end"
               and o["body"]["status"] in ("passed", "failed"))
    flipped = {"passed": "failed", "failed": "passed"}[end["status"]]

    def restate(objs):
        for o in objs:
            if o["kind"] == "studio.job.end" and o["body"]["job"] == end["job"]:
                o["body"]["status"] = flipped
        return objs
    f.edit_chain(JOURNAL, restate)
    refused(f.pack(tmp_path), "complete", f"job {end['job']} ended {flipped}", f"its runs give {end['status']}")


def _settle_a_known_call_unknown(f: StudioForgery, reason: str) -> None:
    """Both settlements of one call the run recorded with its usage, rewritten as unknown at
    the reservation's bound: what a restart leaves after a kill between the call's record
    and its settlement."""
    rid = next(r for r in f.run_ids() if any(o["kind"] == "call" and o["body"]["cost"]["known"]
                                              for o in f.records(run_path(r))))
    recs = f.records(run_path(rid))
    call = next(o["body"] for o in recs if o["kind"] == "call" and o["body"]["cost"]["known"])
    attempt, key = recs[0]["body"]["policy"]["attempt"], f"{call['turn']}.{call['attempt']}"

    def unknown(objs):
        res = {o["body"]["id"]: o["body"] for o in objs if o["kind"] == "reserve"
               and (o["body"]["attempt"], o["body"]["key"]) == (attempt, key)}
        for o in objs:
            if o["kind"] == "settle" and o["body"]["id"] in res:
                r = res[o["body"]["id"]]
                o["body"].update(known=False, tokens=r["tokens"], usd=r["usd"], reason=reason)
        return objs
    for name in f.ledgers("-s-") + f.ledgers("-day-"):
        f.edit_chain(name, unknown)


@pytest.fixture(scope="module")
def roomy_bundle(tmp_path_factory) -> bytes:
    """One ladder job in an in-process studio whose budgets are far from every limit, so a
    settlement raised to its bound leaves every later reservation within them."""
    import asyncio

    from benchclaw.bundle import export_bundle
    from benchclaw.studio import Studio, load_config

    root = tmp_path_factory.mktemp("roomy")
    cfg = load_config(write_config(root / "s.toml", policies=("ladder",), session_usd="5", day_usd="5"))
    studio = Studio(cfg, root / "runs", sim_options={"latency_scale": 0}, fsync=False)
    studio.open()

    async def go():
        job = studio.start("a" * 16, "quotes-incident", "ladder", "direct")
        while job.running:
            await asyncio.sleep(0.01)
        await studio.close()
    asyncio.run(go())
    export_bundle(root / "runs", "studio-public", root / "b.zip")
    return (root / "b.zip").read_bytes()


def test_a_call_a_restart_settled_at_its_bound_still_verifies(roomy_bundle, tmp_path):
    f = StudioForgery(roomy_bundle)
    _settle_a_known_call_unknown(f, "studio restarted: the call was cut off")
    rep = verify_bundle(f.pack(tmp_path))
    assert rep.exit_code == 0, render_text(rep, 20)


def test_a_known_call_settled_as_unknown_without_a_restart(roomy_bundle, tmp_path):
    f = StudioForgery(roomy_bundle)
    _settle_a_known_call_unknown(f, None)
    refused(f.pack(tmp_path), "ledgers", "settled", "the call's usage gives")


def test_a_day_limit_exceeded(studio_bundle, tmp_path):
    """The day's limit lowered below what was reserved, in the ledger and in the studio's
    budgets alike (so the two agree): the replay shows a reservation past the limit."""
    f = StudioForgery(studio_bundle[1])
    day = f.ledgers("-day-")[0]

    def lower_limit(objs):
        objs[0]["body"]["limits"]["usd"] = "0.02"
        return objs

    def lower_budget(objs):
        for o in objs:
            if o["kind"] == "studio.open":
                o["body"]["budgets"]["day"]["usd"] = "0.02"
        return objs
    f.edit_chain(day, lower_limit)
    f.edit_chain(JOURNAL, lower_budget)
    refused(f.pack(tmp_path), "ledgers", day, "past the limit $0.02")


def test_a_day_ledger_whose_limit_was_raised_disagrees_with_the_studio_budgets(studio_bundle, tmp_path):
    f = StudioForgery(studio_bundle[1])
    day = f.ledgers("-day-")[0]

    def raise_it(objs):
        objs[0]["body"]["limits"]["usd"] = "500"
        return objs
    f.edit_chain(day, raise_it)
    refused(f.pack(tmp_path), "ledgers", day, "the studio's budgets in force")


def test_a_studio_bundle_relabelled_as_an_experiment_fails_closed(studio_bundle, tmp_path):
    files = entries(studio_bundle[1])
    body = {k: v for k, v in files.items() if k != MANIFEST}
    write_zip(tmp_path / "x.zip", in_bundle_order(build_manifest(["studio-public"], body).to_bytes(), body))
    rep = verify_bundle(tmp_path / "x.zip")
    assert rep.exit_code == 1
    assert any("never registered" in str(f) for f in rep.section("prereg").failures), render_text(rep, 20)


def test_a_pre_registered_experiments_run_slipped_into_the_studio_bundle(studio_bundle, tmp_path):
    f = StudioForgery(studio_bundle[1])
    rid = f.run_ids()[0]

    def claim(objs):
        objs[0]["body"]["policy"]["experiment"] = "E01"
        return objs
    new = f.edit_run(rid, claim)
    refused(f.pack(tmp_path), "label", run_path(new), "names an experiment")



@pytest.mark.parametrize("what,edit", [
    ("a session reservation's run", lambda f: f.edit_chain(f.ledgers("-s-")[0], lambda objs: [
        {**o, "body": {**o["body"], "run": {"a": 1}}} if o["kind"] == "reserve" else o for o in objs])),
    ("a journaled run's step", lambda f: f.edit_chain(JOURNAL, lambda objs: [
        {**o, "body": {**o["body"], "step": "x"}} if o["kind"] == "studio.run" else o for o in objs])),
    ("the studio's budgets", lambda f: f.edit_chain(JOURNAL, lambda objs: [
        {**o, "body": {**o["body"], "budgets": {"session": []}}} if o["kind"] == "studio.open" else o for o in objs])),
])
def test_malformed_studio_records_are_failures_never_a_crash(studio_bundle, tmp_path, what, edit):
    f = StudioForgery(studio_bundle[1])
    edit(f)
    rep = verify_bundle(f.pack(tmp_path))
    assert rep.exit_code == 1, (what, render_text(rep))
    assert not any("recomputation failed" in str(e) for _, e in rep.failures()), (what, render_text(rep, 20))


# ------------------------------------------------------------------------------ the site

def test_the_site_lists_the_studio_journal_as_exploratory_never_as_an_experiment(studio_bundle, tmp_path):
    from benchclaw.site import build_site
    from benchclaw.site._render import exp_url, run_url

    root, data = studio_bundle
    build_site(root / "runs", tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Exploratory runs" in index and "EXPLORATORY" in index and "studio-public" in index
    assert "No experiment yet" in index                      # the studio journal is not one
    assert not (tmp_path / "site" / exp_url("studio-public")).exists()
    assert not (tmp_path / "site" / "compare.html").exists()
    journal = [jsonio.loads(ln)["body"] for ln in split_lines(entries(data)[JOURNAL])[0] if b'"studio.run"' in ln]
    ran = [b["run_id"] for b in journal if b["run_id"]]
    assert f"{len(ran)} runs in" in index
    assert ran and all(run_url(r) in index for r in ran[-20:])  # the latest link their replay pages
