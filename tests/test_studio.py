"""The studio's parts without HTTP: config, the paired budgets, sessions, events, and
its runs as evidence (``benchclaw build`` replays them, ``runs check`` is clean)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from decimal import Decimal

import pytest
from click.testing import CliRunner

from benchclaw.evidence.check import check_store
from benchclaw.cli import cli, run_cli
from benchclaw.errors import BudgetError, FormatError, UsageError
from benchclaw.experiments.ledger import read_ledger
from benchclaw.formats.records import Record, parse_line
from benchclaw.evidence.store import Store
from benchclaw.studio import Refusal, Studio, load_config
from benchclaw.studio.budgets import StudioBudgets
from benchclaw.studio.config import Budgets
from benchclaw.studio.jobs import record_event
from benchclaw.studio.sessions import RateLimiter, SessionKeys, load_secret

from .studio_helpers import write_config


# ------------------------------------------------------------------------------ config

def test_config_defaults_serve_the_simulator():
    cfg = load_config(None)
    assert cfg.catalog == "sim" and cfg.budgets.session_usd == Decimal("0.02")


@pytest.mark.parametrize("text,match", [
    ('v = 1\n[budget.session]\nusd = 0.5\n', r"budget\.session\.usd: money is written as a string"),
    ('v = 1\n[budget.day]\nusdd = "1"\n', r"budget\.day\.usdd: unknown key"),
    ('v = 1\npolicies = ["cheapest"]\n', r"policies\[0\]: unknown policy"),
    ('v = 1\nlabel = "../x"\n', r"label: expected letters"),
    ('v = 2\n', r"v: this BenchClaw reads studio config v = 1"),
    ('v = 1\n[limits]\nglobal_concurrency = 0\n', r"limits\.global_concurrency: expected an integer >= 1"),
    ('v = 1\ntasks = [', r"not valid TOML"),
])
def test_bad_config_names_file_and_key(tmp_path, text, match):
    p = tmp_path / "studio.toml"
    p.write_text(text)
    with pytest.raises(FormatError, match=match):
        load_config(p)


def test_cli_bad_config_exits_2_without_traceback(tmp_path, capsys):
    p = tmp_path / "studio.toml"
    p.write_text('v = 1\n[budget.session]\nusd = 0.5\n')
    assert run_cli(cli, ["studio", "--config", str(p), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "budget.session.usd" in err and "Traceback" not in err and not (tmp_path / "runs").exists()


def test_unknown_task_in_config_is_refused_at_start_up(tmp_path):
    cfg = load_config(write_config(tmp_path / "s.toml", tasks=("no-such-task",)))
    with pytest.raises(Exception, match="no-such-task"):
        Studio(cfg, tmp_path / "runs")


# ------------------------------------------------------------------------------ budgets

def _budgets(tmp_path, **kw) -> StudioBudgets:
    b = Budgets(**{"session_usd": Decimal("0.010"), "day_usd": Decimal("0.015"), "per_call_usd": Decimal("1"),
                   **kw})
    return StudioBudgets(Store(tmp_path / "runs"), b, "t", today=lambda: "20261201")


def test_a_call_is_reserved_in_both_ledgers_and_settled_in_both(tmp_path):
    bud = _budgets(tmp_path)
    cb = bud.for_run("aaaa")
    res = cb.reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.004"))
    assert bud.session_standing("aaaa").spent_usd == Decimal("0.004") == bud.day_standing().spent_usd
    cb.settle(res, tokens=10, usd=Decimal("0.001"))
    assert bud.session_standing("aaaa").spent_usd == Decimal("0.001") == bud.day_standing().spent_usd


def test_session_refusal_never_touches_the_day_ledger(tmp_path):
    bud = _budgets(tmp_path)
    cb = bud.for_run("aaaa")
    with pytest.raises(BudgetError, match="this session's budget is spent"):
        cb.reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.011"))
    assert cb.refused_by == "session"
    assert bud.day_standing().spent_usd == 0 and bud.day_standing().refused == 0
    assert bud.session_standing("aaaa").exhausted


def test_day_refusal_releases_the_session_reservation(tmp_path):
    bud = _budgets(tmp_path)
    a, b = bud.for_run("aaaa"), bud.for_run("bbbb")
    a.reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.009"))
    with pytest.raises(BudgetError, match="budget for today is spent"):
        b.reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.009"))
    assert b.refused_by == "day"
    assert bud.session_standing("bbbb").spent_usd == 0       # released at zero: never called
    assert bud.day_standing().spent_usd == Decimal("0.009")  # only a's worst case
    assert bud.day_standing().exhausted


def test_recover_settles_what_a_killed_studio_left_open(tmp_path):
    bud = _budgets(tmp_path)
    bud.for_run("aaaa").reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.004"))
    bud.close()
    again = _budgets(tmp_path)  # a new process: the reservation is still open on disk
    assert again.session_standing("aaaa").spent_usd == Decimal("0.004")
    assert again.recover() == 2  # one in each ledger
    st = read_ledger(Store(tmp_path / "runs"), "studio-t-s-aaaa")
    assert not st.open and st.unknown_usd == Decimal("0.004") and st.spent_usd == Decimal("0.004")


class _Killed(BaseException):
    """A SIGKILL at a chosen point: nothing after it runs, nothing is settled."""


def _killing(*a, **kw):
    raise _Killed()


def _books(tmp_path, label: str) -> tuple[Decimal, Decimal]:
    store = Store(tmp_path / "runs")
    ledgers = [p.stem for p in (tmp_path / "runs" / "ledgers").glob(f"studio-{label}-*.jsonl")]
    states = {lid: read_ledger(store, lid) for lid in ledgers}
    assert not any(st.open for st in states.values())
    return (sum((st.spent_usd for lid, st in states.items() if "-s-" in lid), Decimal(0)),
            sum((st.spent_usd for lid, st in states.items() if "-day-" in lid), Decimal(0)))


def test_a_kill_between_the_session_and_the_day_reservation_costs_nothing_after_restart(tmp_path):
    """The call is made only once both reservations are on disk: a session reservation
    whose day partner was never written is a call that never started (settled at 0), so
    after the restart the sessions' spend still sums to the day's."""
    studio = _studio(tmp_path)
    cb = studio.budgets.for_run("aaaaaaaaaaaaaaaa", "att1")
    done = cb.reserve(run="r1", key="0.0", tokens=100, usd=Decimal("0.004"))
    cb.settle(done, tokens=40, usd=Decimal("0.001"))
    cb.reserve(run="r1", key="0.1", tokens=100, usd=Decimal("0.004"))  # the same call key again (a retry)
    cb.day.reserve = _killing                                             # the kill, before the day's reserve
    with pytest.raises(_Killed):
        cb.reserve(run="r1", key="0.1", tokens=100, usd=Decimal("0.004"))
    studio.budgets.close()
    store = Store(tmp_path / "runs")
    assert read_ledger(store, "studio-public-s-aaaaaaaaaaaaaaaa").spent_usd == Decimal("0.009")  # open, upper bound

    again = _studio(tmp_path)  # the restarted service
    again.open()
    asyncio.run(again.close())
    opened = [e.body for e in store.read_journal("studio-public") if e.kind == "studio.open"]
    assert opened[-1]["settled_reservations"] == 3  # the full pair, and the orphan
    sessions, day = _books(tmp_path, "public")
    assert sessions == day == Decimal("0.005")       # 0.001 settled + 0.004 cut off + 0 never made
    st = read_ledger(store, "studio-public-s-aaaaaaaaaaaaaaaa")
    assert st.settled_usd == Decimal("0.001") and st.unknown_usd == Decimal("0.004") and st.settled_calls == 2


def test_a_paired_reservation_waits_for_no_fsync_and_the_commit_makes_it_durable(
        tmp_path, monkeypatch):
    """The studio's event loop never blocks on a ledger fsync: both reservations are only
    written, and the group commit the agent awaits before the call makes them durable."""
    from benchclaw.evidence import _commit

    b = Budgets(session_usd=Decimal("0.010"), day_usd=Decimal("0.015"), per_call_usd=Decimal("1"))
    bud = StudioBudgets(Store(tmp_path / "runs", fsync=True), b, "t", today=lambda: "20261201")
    cb = bud.for_run("aaaa")
    _commit.committer().wait()  # the ledgers' creation is behind us
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    cb.reserve(run="r", key="0.0", tokens=100, usd=Decimal("0.004"))
    assert synced == []                      # written, not waited for
    _commit.committer().wait()               # what Store.commit awaits before the call
    assert len(synced) >= 2                  # both ledgers' files (and their directory) synced
    assert bud.session_standing("aaaa").spent_usd == Decimal("0.004") == bud.day_standing().spent_usd


def test_a_day_reservation_whose_session_partner_a_power_cut_lost_is_released_at_zero(tmp_path):
    """Written together and made durable by one commit, the pair can lose one half to a
    power cut (not to a kill): a lone day reservation is a call never made, settled at 0."""
    studio = _studio(tmp_path)
    cb = studio.budgets.for_run("aaaaaaaaaaaaaaaa", "att1")
    cb.reserve(run="r1", key="0.0", tokens=100, usd=Decimal("0.004"))
    studio.budgets.close()
    session = tmp_path / "runs" / "ledgers" / "studio-public-s-aaaaaaaaaaaaaaaa.jsonl"
    lines = session.read_bytes().splitlines(keepends=True)
    assert b'"reserve"' in lines[-1]
    session.write_bytes(b"".join(lines[:-1]))  # the power cut: the session's reserve never reached the disk

    again = _studio(tmp_path)
    again.open()
    asyncio.run(again.close())
    sessions, day = _books(tmp_path, "public")
    assert sessions == day == Decimal(0)
    day_ledger = next((tmp_path / "runs" / "ledgers").glob("studio-public-day-*.jsonl"))
    settles = [parse_line(line, day_ledger.name) for line in day_ledger.read_bytes().splitlines()]
    settles = [r for r in settles if r.kind == "settle"]
    assert "session budget's reservation of this call was lost" in settles[-1].body["reason"]


def test_a_kill_between_the_two_settles_settles_the_other_with_the_same_usage(tmp_path):
    bud = _budgets(tmp_path)
    cb = bud.for_run("aaaa", "att1")
    pair = cb.reserve(run="r1", key="0.0", tokens=100, usd=Decimal("0.004"))
    cb.day.settle = _killing                    # the kill after the session's settle, before the day's
    with pytest.raises(_Killed):
        cb.settle(pair, tokens=30, usd=Decimal("0.0007"))
    bud.close()
    again = _budgets(tmp_path)
    assert again.day_standing().spent_usd == Decimal("0.004")  # open: counted at the upper bound
    assert again.recover() == 1
    sessions, day = _books(tmp_path, "t")
    assert sessions == day == Decimal("0.0007")
    assert read_ledger(Store(tmp_path / "runs"), "studio-t-day-20261201").unknown_calls == 0


# ------------------------------------------------------------------------------ sessions

def test_session_cookie_and_form_token_cannot_be_forged():
    keys, other = SessionKeys(b"k" * 32), SessionKeys(b"x" * 32)
    sid, cookie = keys.new_session()
    assert keys.session_of(cookie) == sid
    assert other.session_of(cookie) is None                      # another secret
    forged = ("0" * 16) + cookie[16:]
    assert keys.session_of(forged) is None                       # another id, same mac
    for bad in (None, "", "x", cookie + "0", "../" + cookie[3:], cookie.upper()):
        assert keys.session_of(bad) is None
    assert keys.csrf_ok(sid, keys.csrf_token(sid))
    assert not keys.csrf_ok(sid, keys.csrf_token("0" * 16)) and not keys.csrf_ok(sid, None)
    assert keys.csrf_token(sid) != cookie.split(".")[1]          # the form token is not the cookie


def test_secret_file_is_created_private_and_reused(tmp_path):
    p = tmp_path / "secret"
    first = load_secret(str(p))
    assert load_secret(str(p)) == first and (p.stat().st_mode & 0o777) == 0o600
    assert load_secret(None) != load_secret(None)


def test_rate_limiter_slides():
    now = [0.0]
    rl = RateLimiter(2, 60, clock=lambda: now[0])
    assert rl.allow("a") and rl.allow("a") and not rl.allow("a") and rl.allow("b")
    now[0] = 61
    assert rl.allow("a")


# ------------------------------------------------------------------------------ events

def test_events_carry_only_whitelisted_fields():
    body = {"turn": 0, "name": "read", "args": {"path": "a.md", "content": "SECRET CONTENT"}, "permitted": False,
            "reason": "denied: " + "x" * 1000, "observation": "sha256:" + "0" * 64, "injection": {"lure": "L1"}}
    kind, ev = record_event(Record(0, "0" * 64, "t", "action", body))
    assert kind == "action" and ev["path"] == "a.md" and ev["injection"] == "L1"
    assert "SECRET CONTENT" not in str(ev) and len(ev["reason"]) == 300
    assert record_event(Record(0, "0" * 64, "t", "run.start", {})) is None


# ------------------------------------------------------------------------------ the service

def _studio(tmp_path, **kw) -> Studio:
    cfg = load_config(write_config(tmp_path / "s.toml", **kw))
    return Studio(cfg, tmp_path / "runs", sim_options={"latency_scale": 0}, fsync=False)


def test_jobs_run_sealed_journaled_and_replayable_by_build(tmp_path):
    # The job's seed is random (a visitor's job), and some seeds climb the whole ladder: the
    # budgets cover that worst case (3 tiers x 12 turns x the $0.05 per-call stop), so this
    # test of a job's evidence never meets a budget refusal (budgets have their own tests).
    studio = _studio(tmp_path, policies=("ladder",), session_usd="1.80", day_usd="1.80")
    assert len(studio.tiers) * studio.config.turns * studio.config.budgets.per_call_usd <= Decimal("1.80")
    studio.open()

    async def go():
        job = studio.start("aaaaaaaaaaaaaaaa", "quotes-incident", "ladder", "direct")
        while job.running:
            await asyncio.sleep(0.01)
        await studio.close()
        return job

    job = asyncio.run(go())
    assert job.status in ("passed", "failed") and job.runs
    kinds = [k for _, k, _ in job.events]
    assert kinds[0] == "job" and kinds[-1] == "done" and "call" in kinds and "check" in kinds
    assert kinds.count("run") == len(job.runs) and kinds.count("escalate") == len(job.runs) - 1
    if len(job.runs) > 1:  # the ladder moved up because the cheaper tier failed its gate
        assert not job.runs[0]["gate_passed"] and job.runs[1]["tier"] != job.runs[0]["tier"]
    store = Store(tmp_path / "runs")
    assert check_store(store).ok
    day = read_ledger(store, f"studio-public-day-{dt.datetime.now(dt.timezone.utc):%Y%m%d}")
    assert day.settled_calls == sum(len(store.read_run(r["run_id"]).of_kind("call")) for r in job.runs)
    for r in job.runs:
        run = store.read_run(r["run_id"])
        attempts = {rec.body["attempt"] for rec in Store(tmp_path / "runs").read_journal("studio-public")
                    if rec.kind == "studio.run" and rec.body["run_id"] == r["run_id"]}
        assert attempts == {run.start["policy"]["attempt"]}
        reserves = [ln for ln in (tmp_path / "runs" / "ledgers" / f"{run.start['ledger']}.jsonl").read_text().splitlines()
                    if '"reserve"' in ln and run.start["policy"]["attempt"] in ln]
        assert len(reserves) == len(run.of_kind("call"))  # each call reserved under the run's attempt
        assert run.start["policy"]["studio"] == "studio-public" and run.start["policy"]["exploratory"] is True
        assert "experiment" not in run.start["policy"]          # never part of an experiment
    journal = store.read_journal("studio-public")
    assert all(e.body.get("exploratory") is True for e in journal)
    out = tmp_path / "site"
    res = CliRunner().invoke(cli, ["build", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    from benchclaw.site._render import run_url

    for r in job.runs:
        assert (out / run_url(r["run_id"])).is_file()


def test_start_refuses_ids_off_the_lists_and_spent_sessions(tmp_path):
    studio = _studio(tmp_path, session_runs=1)
    studio.open()

    async def go():
        with pytest.raises(Refusal) as e:
            studio.start("aaaaaaaaaaaaaaaa", "../tasks/quotes-incident", "always:lightning", "direct")
        assert e.value.status == 400
        job = studio.start("aaaaaaaaaaaaaaaa", "quotes-incident", "always:lightning", "direct")
        while job.running:
            await asyncio.sleep(0.01)
        with pytest.raises(Refusal) as e:   # one run allowed, one used
            studio.start("aaaaaaaaaaaaaaaa", "quotes-incident", "always:lightning", "direct")
        assert e.value.reason == "budget" and e.value.status == 402
        assert studio.session_view("bbbbbbbbbbbbbbbb").runs_left == 1
        await studio.close()

    asyncio.run(go())


def test_a_second_studio_on_the_same_runs_directory_is_refused(tmp_path):
    first = _studio(tmp_path)
    first.open()
    try:
        with pytest.raises(UsageError, match="being run by another process"):
            _studio(tmp_path).open()
    finally:
        asyncio.run(first.close())


def test_starts_are_rate_limited_and_jobs_capped_per_session_and_in_total(tmp_path):
    studio = _studio(tmp_path, starts_per_minute=2, session_concurrency=2, global_concurrency=3)
    studio.open()
    a, b, c = "a" * 16, "b" * 16, "c" * 16

    async def go():
        pick = ("quotes-incident", "always:lightning", "direct")
        jobs = [studio.start(a, *pick), studio.start(a, *pick)]
        with pytest.raises(Refusal) as e:            # a third job while two run: per-session cap
            studio.start(a, *pick)
        assert e.value.reason == "busy" and e.value.status == 429
        jobs.append(studio.start(b, *pick))
        with pytest.raises(Refusal) as e:            # three running in the studio: global cap
            studio.start(c, *pick)
        assert e.value.reason == "busy"
        while any(j.running for j in jobs):
            await asyncio.sleep(0.01)
        with pytest.raises(Refusal) as e:            # a's two starts this minute are used up
            studio.start(a, *pick)
        assert e.value.reason == "rate" and e.value.status == 429
        await studio.close()

    asyncio.run(go())
