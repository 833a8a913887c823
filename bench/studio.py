"""The studio under many visitors: time to the first live event, and overspend (must be 0).

Starts a loopback simulator server (a slow simulated endpoint behind ``openai`` tiers)
and one ``benchclaw studio`` process, then N visitor threads each start J jobs in turn
and follow each job's event stream to its end. The day budget is set below what the
visitors ask for, so the shared ledger has to refuse. Afterwards it replays every ledger
from disk and prints, last, one line:

    studio sessions=N runs=M first_event_p50_ms=X first_event_p95_ms=Y overspend_usd=Z

With ``--verify`` it then exports the studio's journal (``benchclaw export studio-public``)
and verifies the bundle offline, and prints before that line (on stderr):

    studio_bundle files=F runs=M export_s=X verify_s=Y exit=E

``first_event`` is from the start POST to the first model call or action arriving on the
event stream (the redirect, the page's stream opening, and the simulated latency of the
first call, scaled); ``overspend_usd`` is what any ledger spent beyond its limit (0 when
the budgets held). SIMULATED: the endpoint is the simulator.

    python bench/studio.py --sessions 60 --jobs 2 [--verify]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchclaw.experiments.ledger import read_ledger  # noqa: E402
from benchclaw.sim.backend import SimBackend  # noqa: E402
from benchclaw.sim.profiles import load_profiles  # noqa: E402
from benchclaw.sim.server import SimServer  # noqa: E402
from benchclaw.evidence.store import Store  # noqa: E402
from tests.studio_helpers import StudioProcess, Visitor, write_config  # noqa: E402
from tests.test_studio_server import CATALOG  # noqa: E402

KEY_ENV = "BENCHCLAW_BENCH_STUDIO_KEY"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=2, help="jobs each visitor starts, one after another")
    ap.add_argument("--latency-scale", type=float, default=0.05, help="the simulator's latency scale")
    ap.add_argument("--session-usd", default="0.003")
    ap.add_argument("--day-usd", default="0.08")
    ap.add_argument("--verify", action="store_true", help="then export the studio journal and verify the bundle")
    args = ap.parse_args()
    session_usd, day_usd = Decimal(args.session_usd), Decimal(args.day_usd)
    with tempfile.TemporaryDirectory(prefix="bench-studio-") as tmp:
        tmp = Path(tmp)
        server = SimServer(backend=SimBackend(load_profiles(), latency_scale=args.latency_scale)).start()
        try:
            (tmp / "loopback.toml").write_text(CATALOG.format(url=server.base_url, env=KEY_ENV))
            cfg = write_config(tmp / "studio.toml", catalog=str(tmp / "loopback.toml"), session_usd=str(session_usd),
                               day_usd=str(day_usd), global_concurrency=max(64, args.sessions), max_tokens=512)
            studio = StudioProcess(cfg, tmp / "runs", env={KEY_ENV: "sk-bench-not-a-real-key-0000"}).start()
            t0 = time.monotonic()
            try:
                with concurrent.futures.ThreadPoolExecutor(args.sessions) as pool:
                    results = list(pool.map(lambda i: _visitor(studio.url, args.jobs), range(args.sessions)))
            finally:
                studio.stop()
            wall = time.monotonic() - t0
        finally:
            server.stop()
        firsts = sorted(ms for r in results for ms in r["firsts"])
        outcomes = [s for r in results for s in r["statuses"]]
        overspend, runs = _overspend(tmp / "runs", session_usd, day_usd)
        if args.verify:
            _export_and_verify(tmp)
    p50 = statistics.median(firsts) if firsts else 0
    p95 = firsts[min(len(firsts) - 1, int(len(firsts) * 0.95))] if firsts else 0
    print(f"jobs: {len(outcomes)}  outcomes: " +
          ", ".join(f"{k}={outcomes.count(k)}" for k in sorted(set(outcomes))) + f"  wall: {wall:.1f} s (SIMULATED)",
          file=sys.stderr)
    print(f"studio sessions={args.sessions} runs={runs} first_event_p50_ms={p50:.0f} "
          f"first_event_p95_ms={p95:.0f} overspend_usd={overspend}")


def _export_and_verify(tmp: Path) -> None:
    """The studio's journal as an exploratory bundle, exported and verified offline."""
    from benchclaw.bundle import export_bundle
    from benchclaw.verify import verify_bundle

    t0 = time.perf_counter()
    rep = export_bundle(tmp / "runs", "studio-public", tmp / "studio.zip")
    t1 = time.perf_counter()
    report = verify_bundle(tmp / "studio.zip")
    t2 = time.perf_counter()
    for _, failure in report.failures()[:5]:
        print(f"  {failure}", file=sys.stderr)
    print(f"studio_bundle files={rep.files} runs={report.section('runs').counts.get('runs', 0)} "
          f"export_s={t1 - t0:.2f} verify_s={t2 - t1:.2f} exit={report.exit_code}", file=sys.stderr)


def _visitor(url: str, jobs: int) -> dict:
    v = Visitor(url)
    v.home()
    firsts, statuses = [], []
    for _ in range(jobs):
        t0 = time.monotonic()
        r = v.start("quotes-incident", "always:lightning")
        if r.status != 303:
            statuses.append(f"http{r.status}")
            continue
        events, first, _ = v.events(r.headers["location"], t0=t0)
        if first is not None:
            firsts.append(first)
        statuses.append(events[-1][1]["status"] if events and events[-1][0] == "done" else "lost")
    return {"firsts": firsts, "statuses": statuses}


def _overspend(runs: Path, session_usd: Decimal, day_usd: Decimal) -> tuple[Decimal, int]:
    """What every ledger spent past its limit (worst case, replayed from disk), and how
    many runs were sealed."""
    store = Store(runs)
    over = Decimal(0)
    for path in sorted((runs / "ledgers").glob("*.jsonl")):
        st = read_ledger(store, path.stem)
        limit = day_usd if "-day-" in path.stem else session_usd
        over += max(st.spent_usd - limit, Decimal(0))
    return over, len(store.run_ids())


if __name__ == "__main__":
    main()
