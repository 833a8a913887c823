"""The ledger: fail-closed reservations, settlements, unknown usage, crash replay, CLI."""

import multiprocessing
import threading
from decimal import Decimal as D

import pytest
from click.testing import CliRunner

from benchclaw.cli import cli
from benchclaw.errors import BudgetError, IntegrityError
from benchclaw.experiments.ledger import Ledger, Limits, read_ledger
from benchclaw.evidence.store import Store


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "runs", fsync=False)


def make(store, usd="1", tokens=None, per_call=None, lid="L1"):
    return Ledger.create(store, lid, Limits(D(usd), tokens, None if per_call is None else D(per_call)),
                         experiment="E", invocation="inv")


def test_settle_with_usage_counts_the_reported_cost(store):
    led = make(store)
    r = led.reserve(run="r1", key="t0", tokens=1000, usd=D("0.2"))
    assert led.state().spent_usd == D("0.2")
    led.settle(r, tokens=300, usd=D("0.05"))
    st = read_ledger(store, "L1")
    assert (st.settled_calls, st.settled_usd, st.spent_usd, st.remaining_usd) == (1, D("0.05"), D("0.05"), D("0.95"))


def test_call_with_no_usage_is_counted_at_its_upper_bound(store):
    led = make(store)
    r = led.reserve(run="r1", key="t0", tokens=1000, usd=D("0.2"))
    led.settle(r, tokens=None, usd=None, reason="timeout")
    st = read_ledger(store, "L1")
    assert (st.unknown_calls, st.unknown_tokens, st.unknown_usd) == (1, 1000, D("0.2"))
    assert st.spent_usd == D("0.2") and not st.open


def test_reservation_past_the_limit_is_refused_and_recorded(store):
    led = make(store, usd="0.5", tokens=5000, per_call="0.3")
    led.reserve(run="r", key="a", tokens=100, usd=D("0.3"))
    with pytest.raises(BudgetError, match="above the limit of \\$0.5"):
        led.reserve(run="r", key="b", tokens=100, usd=D("0.25"))
    with pytest.raises(BudgetError, match="per-call stop"):
        led.reserve(run="r", key="c", tokens=100, usd=D("0.31"))
    with pytest.raises(BudgetError, match="tokens would reach"):
        led.reserve(run="r", key="d", tokens=4950, usd=D("0"))
    led.reserve(run="r", key="e", tokens=100, usd=D("0.2"))  # exactly reaching the limit is allowed
    st = read_ledger(store, "L1")
    assert st.refused == 3 and st.spent_usd == D("0.5")


def test_settling_twice_is_an_error(store):
    led = make(store)
    r = led.reserve(run="r", key="a", tokens=1, usd=D("0.1"))
    led.settle(r, tokens=1, usd=D("0.1"))
    with pytest.raises(IntegrityError, match="not open"):
        led.settle(r, tokens=1, usd=D("0.1"))


def test_replay_after_crash_counts_open_reservations_as_spent(store):
    led = make(store, usd="1")
    done = led.reserve(run="r", key="a", tokens=10, usd=D("0.1"))
    led.settle(done, tokens=10, usd=D("0.01"))
    led.reserve(run="r", key="b", tokens=500, usd=D("0.4"))  # the process "dies" here
    del led
    st = read_ledger(store, "L1")
    assert len(st.open) == 1 and st.spent_usd == D("0.41")
    again = Ledger.open(store, "L1")  # a second writer after the crash sees the same
    with pytest.raises(BudgetError):
        again.reserve(run="r2", key="c", tokens=1, usd=D("0.6"))
    again.reserve(run="r2", key="c", tokens=1, usd=D("0.59"))


def test_torn_ledger_fails_closed(store):
    led = make(store)
    led.reserve(run="r", key="a", tokens=10, usd=D("0.1"))
    with open(led.path, "ab") as f:
        f.write(b'{"v":1,"seq":2')
    with pytest.raises(IntegrityError, match="torn"):
        Ledger.open(store, "L1").reserve(run="r", key="b", tokens=1, usd=D("0"))


def test_concurrent_threads_never_pass_the_limit(store):
    make(store, usd="1")
    granted = []

    def worker():
        led = Ledger.open(store, "L1")  # one object per thread: the flock must serialise them
        while True:
            try:
                led.reserve(run="t", key="k", tokens=1, usd=D("0.03"))
            except BudgetError:
                return
            granted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = read_ledger(store, "L1")
    assert len(granted) == 33 and st.spent_usd == D("0.99") and st.spent_usd <= D("1")


def _proc_worker(root, n_out):
    led = Ledger.open(Store(root, fsync=False), "L1")
    n = 0
    while True:
        try:
            r = led.reserve(run="p", key=str(n), tokens=1, usd=D("0.07"))
        except BudgetError:
            break
        led.settle(r, tokens=None, usd=None)  # unknown: stays at its upper bound
        n += 1
    n_out.put(n)


def test_concurrent_processes_never_pass_the_limit(store):
    make(store, usd="2")
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_proc_worker, args=(str(store.root), q)) for _ in range(4)]
    for p in procs:
        p.start()
    counts = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    st = read_ledger(store, "L1")
    assert sum(counts) == 28 == st.unknown_calls  # 28 * 0.07 = 1.96; a 29th would pass 2
    assert st.spent_usd == D("1.96")


def test_carried_spend_counts_against_the_limit(store):
    led = Ledger.create(store, "L2", Limits(D("1")), carried_usd=D("0.9"), carried_tokens=5)
    with pytest.raises(BudgetError):
        led.reserve(run="r", key="a", tokens=1, usd=D("0.2"))
    assert read_ledger(store, "L2").spent_usd == D("0.9")


def test_cli_ledger_show_prints_reserved_settled_unknown_remaining(store):
    led = make(store, usd="1", tokens=10000)
    led.settle(led.reserve(run="r", key="a", tokens=100, usd=D("0.1")), tokens=50, usd=D("0.02"))
    led.settle(led.reserve(run="r", key="b", tokens=200, usd=D("0.2")), tokens=None, usd=None)
    led.reserve(run="r", key="c", tokens=300, usd=D("0.3"))
    res = CliRunner().invoke(cli, ["ledger", "show", "L1", "--runs", str(store.root)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "reserved    usd 0.3" in out and "settled     usd 0.02" in out
    assert "unknown     usd 0.2" in out and "remaining   usd 0.48  tokens 9450" in out
    res = CliRunner().invoke(cli, ["ledger", "show", "L1", "--json", "--runs", str(store.root)])
    assert '"usd": "0.52"' in res.output


def test_cli_ledger_show_missing_names_the_file(tmp_path):
    Store(tmp_path / "runs").ensure()  # an empty runs directory
    res = CliRunner().invoke(cli, ["ledger", "show", "nope", "--runs", str(tmp_path / "runs")])
    assert res.exit_code != 0 and "no ledger nope" in str(res.exception)
