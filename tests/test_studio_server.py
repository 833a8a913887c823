"""``benchclaw studio`` as a real process on loopback: security, load, and SIGKILL.

Each test starts its own studio (port 0) and, where it needs a slow or keyed endpoint, a
loopback simulator server (``SimServer``) behind a catalog of ``openai`` tiers, so the
studio's provider path is the real one: the API key travels in a header to loopback.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from benchclaw.experiments.ledger import read_ledger
from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.profiles import load_profiles
from benchclaw.sim.server import SimServer
from benchclaw.evidence.store import Store

from .studio_helpers import CLI, StudioProcess, Visitor, write_config

SENTINEL = "sk-studio-SENTINEL-7f3a9c1e5b2d4068"
KEY_ENV = "BENCHCLAW_STUDIO_TEST_KEY"
CATALOG = """v = 1
name = "loopback"
description = "SIMULATED: the simulator over loopback HTTP, behind a sentinel key"
simulated = true
order = ["lightning", "super"]
[tiers.lightning]
provider = "openai"
model = "sim/lightning"
base_url = "{url}"
key_env = "{env}"
simulated = true
prices = {{ input = "0.05", cached_input = "0.01", output = "0.20" }}
[tiers.super]
provider = "openai"
model = "sim/super"
base_url = "{url}"
key_env = "{env}"
simulated = true
prices = {{ input = "0.30", cached_input = "0.075", output = "1.20" }}
"""


@pytest.fixture
def endpoint(tmp_path):
    """A slow-ish simulated endpoint; one reply in five echoes the Authorization header."""
    server = SimServer(backend=SimBackend(load_profiles(), latency_scale=0.03,
                                          faults=SimFaults(rates={"auth_echo": 0.2}))).start()
    cat = tmp_path / "loopback.toml"
    cat.write_text(CATALOG.format(url=server.base_url, env=KEY_ENV))
    try:
        yield cat
    finally:
        server.stop()


def _studio(tmp_path, catalog, **cfg) -> StudioProcess:
    config = write_config(tmp_path / "studio.toml", catalog=str(catalog), **cfg)
    return StudioProcess(config, tmp_path / "runs", env={KEY_ENV: SENTINEL})


def _journal(runs: Path) -> list:
    return Store(runs).read_journal("studio-public")


def _runs_check(runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, "runs", "check", "--runs", str(runs)],
                          capture_output=True, text=True, timeout=120)


def _assert_books(runs: Path, session_usd: Decimal, day_usd: Decimal) -> dict:
    """Every budget held, every started run is journaled and sealed, nothing left open."""
    store = Store(runs)
    assert store.open_run_paths() == []
    ledgers = sorted(p.stem for p in (runs / "ledgers").glob("*.jsonl"))
    day = [lid for lid in ledgers if "-day-" in lid]
    sessions = [lid for lid in ledgers if "-s-" in lid]
    assert len(day) == 1
    day_state = read_ledger(store, day[0])
    assert day_state.spent_usd <= day_usd and not day_state.open
    total = Decimal(0)
    for lid in sessions:
        st = read_ledger(store, lid)
        assert st.spent_usd <= session_usd, (lid, st.spent_usd)
        assert not st.open
        total += st.spent_usd
    assert total == day_state.spent_usd  # every call reserved in both, released in both
    entries = _journal(runs)
    started = {e.body["attempt"] for e in entries if e.kind == "studio.run.start"}
    finished = {e.body["attempt"]: e.body for e in entries if e.kind == "studio.run"}
    assert started == set(finished)
    sealed = set(store.run_ids())
    for body in finished.values():
        assert body["run_id"] is None or body["run_id"] in sealed
    jobs = {e.body["job"] for e in entries if e.kind == "studio.job"}
    assert jobs == {e.body["job"] for e in entries if e.kind == "studio.job.end"}
    check = _runs_check(runs)
    assert check.returncode == 0, check.stdout + check.stderr
    return {"day": day_state, "sessions": len(sessions), "runs": finished, "jobs": jobs}


# ------------------------------------------------------------------------------ security

def test_security(tmp_path, endpoint):
    studio = _studio(tmp_path, endpoint, tasks=("quotes-incident", "cents-fees"),
                     policies=("always:lightning", "ladder"), starts_per_minute=50)
    with studio:
        v = Visitor(studio.url)
        home = v.home()
        assert home.status == 200
        h = home.headers
        assert "default-src 'none'" in h["content-security-policy"]
        assert "script-src 'self'" in h["content-security-policy"] and "unsafe" not in h["content-security-policy"]
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        cookie = h["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        assert h["x-content-type-options"] == "nosniff"
        assert "SIMULATED" in home.text

        # A legitimate run, followed to its end (live events), then every page it links.
        r = v.start("quotes-incident", "always:lightning")
        assert r.status == 303, r.text
        job = r.headers["location"]
        events, _, raw = v.events(job)
        assert events[-1][0] == "done" and any(k == "call" for k, _ in events)
        v.request("GET", job)
        page = v.home()
        run_links = sorted(set(_links(page.text, "/runs/")))
        assert run_links
        for link in run_links:
            rp = v.request("GET", link)
            assert rp.status == 200 and "Turn by turn" in rp.text
            for obj in sorted(set(_links(rp.text, "/objects/"))):
                assert v.request("GET", obj).headers["content-type"].startswith("text/plain")

        # Forged cross-site POSTs: refused, and none of them started a job.
        jobs_before = sum(1 for e in _journal(studio.runs) if e.kind == "studio.job")
        forged = [
            v.start("quotes-incident", "always:lightning", headers={"Origin": "https://evil.example",
                                                                    "Sec-Fetch-Site": "cross-site"}),
            v.start("quotes-incident", "always:lightning", headers={"Origin": "https://evil.example"}),
            v.start("quotes-incident", "always:lightning", csrf=""),
            v.start("quotes-incident", "always:lightning", csrf="0" * 32),
            Visitor(studio.url).request("POST", "/start", b"task=quotes-incident&policy=ladder&profile=direct",
                                        {"Content-Type": "application/x-www-form-urlencoded"}),
        ]
        assert [f.status for f in forged] == [403] * 5
        assert sum(1 for e in _journal(studio.runs) if e.kind == "studio.job") == jobs_before

        # Oversized and malformed requests: 4xx, never a 5xx or a traceback.
        form = {"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
        bad = [
            v.request("POST", "/start", b"csrf=" + b"a" * 10_000, form),
            v.request("POST", "/start", b'{"task": "quotes-incident"}', {"Content-Type": "application/json"}),
            v.request("POST", "/start", b"csrf=%ZZ&&&task", form),
            v.request("POST", "/start", f"csrf={v.csrf}&csrf={v.csrf}&task=x".encode(), form),
            v.request("POST", "/start", f"csrf={v.csrf}&evil=1".encode(), form),
            v.request("POST", "/start", b"\xff\xfe", form),
            v.request("GET", "/jobs/" + "z" * 32),
            v.request("GET", "/", headers={"X-Big": "a" * 40_000}),
        ]
        for resp in bad:
            assert 400 <= resp.status < 500, (resp.status, resp.text[:200])

        # Path-like inputs: refused; nothing outside the allow-lists is ever read.
        for task, policy, profile in [("../../../etc/passwd", "ladder", "direct"),
                                      ("quotes-incident", "always:lightning", "/etc/passwd"),
                                      ("quotes-incident", "../ladder", "direct"),
                                      ("tasks/quotes-incident/v1", "ladder", "direct"),
                                      ("cents-payouts", "ladder", "direct")]:  # a real task, not allowed
            resp = v.start(task, policy, profile)
            assert resp.status == 400, (task, policy, profile, resp.status)
        for path in ["/runs/../../pyproject.toml", "/runs/ab/..%2f..%2fpyproject.toml.html",
                     "/static/..%2f..%2fpyproject.toml", "/static/../studio/base.html",
                     "/objects/00/" + "0" * 64 + ".txt", "/jobs/..%2f..%2fetc%2fpasswd",
                     "/runs/" + "1" * 2 + "/" + "1" * 64 + ".html"]:
            resp = v.request("GET", path)
            assert resp.status == 404, (path, resp.status)

        # The sentinel key: in no response, header, event or log line.
        for resp in v.seen:
            assert SENTINEL not in resp.text and SENTINEL not in str(resp.headers)
            assert SENTINEL[-12:] not in resp.text
        assert SENTINEL.encode() not in raw
    assert SENTINEL not in studio.output()
    for p in (tmp_path / "runs").rglob("*"):
        if p.is_file():
            assert SENTINEL.encode() not in p.read_bytes(), p


def _links(html: str, prefix: str) -> list[str]:
    import re

    return re.findall(r'href="(' + re.escape(prefix) + r'[^"]+)"', html)


# ------------------------------------------------------------------------------ load

@pytest.mark.slow
def test_fifty_sessions_never_overspend(tmp_path, endpoint):
    """50 visitors at once, two jobs each, on one studio; the day budget is smaller than
    what they ask for, so the shared ledger must refuse some of them."""
    # The day budget is sized for honest costs: a 401 (one reply in five here) is never
    # billed and costs a known zero (FORMAT.md §6), so it no longer fills the budget.
    session_usd, day_usd = Decimal("0.003"), Decimal("0.03")
    studio = _studio(tmp_path, endpoint, session_usd=str(session_usd), day_usd=str(day_usd),
                     global_concurrency=64, max_tokens=512)
    with studio:
        def visitor(i: int) -> list[str]:
            v = Visitor(studio.url)
            v.home()
            statuses = []
            for _ in range(2):
                r = v.start(("quotes-incident",)[0], "always:lightning")
                if r.status != 303:
                    statuses.append(str(r.status))
                    continue
                events, _, _ = v.events(r.headers["location"])
                statuses.append(events[-1][1]["status"])
            return statuses

        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            results = list(pool.map(visitor, range(50)))
    assert studio.proc.returncode == 0, studio.output()
    books = _assert_books(studio.runs, session_usd, day_usd)
    flat = [s for r in results for s in r]
    assert books["sessions"] == 50
    assert len(books["runs"]) >= 50
    assert any(s in ("passed", "failed") for s in flat)
    assert any(s in ("refused", "402") for s in flat), flat  # the day budget did bind
    assert books["day"].refused > 0 or books["day"].spent_usd > day_usd * Decimal("0.5")


# ------------------------------------------------------------------------------ crash

@pytest.mark.slow
def test_sigkill_mid_runs_then_restart(tmp_path):
    """Kill -9 while jobs run; the restarted studio seals them aborted, journals them,
    settles the ledgers, keeps every budget, and the same cookie keeps its spend."""
    session_usd, day_usd = Decimal("0.01"), Decimal("1.00")
    config = write_config(tmp_path / "studio.toml", session_usd=str(session_usd), day_usd=str(day_usd),
                          latency_scale=0.3, secret_file=str(tmp_path / "secret"), policies=("ladder",))
    studio = StudioProcess(config, tmp_path / "runs").start()
    try:
        visitors = [Visitor(studio.url) for _ in range(8)]
        jobs = []
        for v in visitors:
            r = v.start("quotes-incident", "ladder")
            assert r.status == 303, r.text
            jobs.append(r.headers["location"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until every job has made calls
            ledgers = list((tmp_path / "runs" / "ledgers").glob("*-s-*.jsonl"))
            if len(ledgers) == 8 and all(p.read_bytes().count(b'"reserve"') >= 2 for p in ledgers):
                break
            time.sleep(0.1)
    finally:
        studio.kill()
    assert Store(tmp_path / "runs").open_run_paths(), "the kill should leave runs open"
    restarted = StudioProcess(config, tmp_path / "runs").start()
    try:
        books = _assert_books(tmp_path / "runs", session_usd, day_usd)
        aborted = [b for b in books["runs"].values() if b["status"] == "aborted"]
        assert aborted, books["runs"]
        ends = [e.body for e in _journal(tmp_path / "runs") if e.kind == "studio.job.end"]
        assert {b["status"] for b in ends} == {"aborted"}
        # The cookie survives the restart (persistent secret) and its spend is not reset.
        v = Visitor(restarted.url)
        v.cookie = visitors[0].cookie
        assert v.request("GET", jobs[0]).status == 404  # jobs live in memory; the runs stay listed
        sid = v.cookie.split("=", 1)[1].split(".")[0]
        spent = read_ledger(Store(tmp_path / "runs"), f"studio-public-s-{sid}").spent_usd
        assert spent > 0
        page = v.home().text
        from benchclaw.site._render import fmt_usd

        assert f'id="remaining-usd">{fmt_usd(session_usd - spent)}<' in page
        r = v.start("quotes-incident", "ladder")  # and it can go on within what is left
        assert r.status == 303
        events, _, _ = v.events(r.headers["location"])
        assert events[-1][0] == "done"
    finally:
        assert restarted.stop() == 0, restarted.output()
    _assert_books(tmp_path / "runs", session_usd, day_usd)


def test_sigterm_seals_running_jobs_and_exits_0(tmp_path):
    config = write_config(tmp_path / "studio.toml", latency_scale=0.5, policies=("ladder",))
    studio = StudioProcess(config, tmp_path / "runs").start()
    v = Visitor(studio.url)
    r = v.start("quotes-incident", "ladder")
    assert r.status == 303
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((tmp_path / "runs" / "open").glob("*.jsonl")):
        time.sleep(0.05)
    assert studio.stop() == 0, studio.output()
    books = _assert_books(tmp_path / "runs", Decimal("0.01"), Decimal("1.00"))
    assert [b["status"] for b in books["runs"].values()][-1] == "aborted"
    ends = [e.body for e in _journal(tmp_path / "runs") if e.kind == "studio.job.end"]
    assert [b["status"] for b in ends] == ["aborted"]
