"""The agent loop, driven by a scripted provider through every branch a run can take.

Each test states the conversation and asserts what a user of the evidence would see: the
status, the records, the observations the model got, the artifacts and checks.
"""

import asyncio
from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.evidence.check import check_store
from benchclaw.agent import Limits, load_profile, run_agent
from benchclaw.agent.testing import (GOOD_ANSWER, Delayed, FakeClock, Hang, ScriptedProvider, act, error, length,
                                     make_task, no_usage, reasoning_only)
from benchclaw.errors import BudgetError, UsageError
from benchclaw.providers.catalog import load_catalog
from benchclaw.formats.records import blob_refs
from benchclaw.evidence.store import Store

CATALOG = load_catalog("sim")
READ_A = act("read", path="docs/a.md")
WRITE_GOOD = act("write", path="out/answer.json", content=GOOD_ANSWER)
FINISH = act("finish", summary="done")


def go(tmp_path, replies, *, profile="checker", limits=None, clock=None, ledger=None, task=None, retries=2,
       provider=None, **kw):
    """Run the scripted conversation; returns (result, sealed run, provider, store)."""
    store = Store(tmp_path / "runs", fsync=False)
    clock = clock or FakeClock()
    prov = provider or ScriptedProvider(replies, clock=clock)
    result = asyncio.run(run_agent(
        store=store, task=task or make_task(), tier="lightning", catalog=CATALOG, profile=load_profile(profile),
        seed=1, provider=prov, limits=limits, policy_context=None, ledger=ledger, max_tokens=256,
        retries=retries, clock=clock, **kw))
    return result, store.read_run(result.run_id), prov, store


def kinds(run):
    return [r.kind for r in run.records]


def actions(run):
    return [r.body for r in run.of_kind("action")]


def observation(store, action_body):
    return jsonio.loads(store.get_blob(action_body["observation"]))


# -- the happy paths ------------------------------------------------------------------------

def test_read_write_finish_passes_and_records_everything(tmp_path):
    res, run, prov, store = go(tmp_path, [READ_A, WRITE_GOOD, FINISH], profile="direct")
    assert (res.status, res.passed, res.gate_passed, res.turns) == ("passed", True, True, 3)
    assert kinds(run) == ["run.start", "call", "action", "call", "action", "call", "action",
                          "artifact", "check", "check", "run.end"]
    start, end = run.start, run.end
    assert start["task"]["id"] == "quotes-agenttest" and start["profile"]["name"] == "direct"
    assert start["limits"] == {"turns": 12, "seconds": 180, "output_bytes": 32768}
    assert end["status"] == "passed" and end["calls"] == 3 and end["turns"] == 3
    assert end["usage"]["prompt"] == 300 and end["cost"]["known"] is True
    assert Decimal(end["cost"]["low"]) == res.cost_low > 0
    art = run.of_kind("artifact")[0].body
    assert art["path"] == "out/answer.json" and store.get_blob(art["digest"]) == GOOD_ANSWER.encode()
    checks = {r.body["id"]: r.body for r in run.of_kind("check")}
    assert checks["long-enough"]["heldout"] is True and checks["shape"]["gate"] is True
    read_obs = observation(store, actions(run)[0])
    assert read_obs == {"ok": True, "action": "read", "path": "docs/a.md", "content": "# A\n\nThe answer is forty-two.\n"}
    assert check_store(store).ok  # every chain and every blob reference holds


def test_every_digest_in_the_run_names_a_stored_blob_and_the_task_is_rebuildable(tmp_path):
    res, run, _, store = go(tmp_path, [READ_A, WRITE_GOOD, FINISH])
    for rec in run.records:
        for ref in blob_refs(rec.body):
            assert store.has_blob(ref), (rec.kind, ref)
    listing = store.get_blob(run.start["task"]["digest"]).decode()
    for line in listing.splitlines():
        digest, path = line.split("  ", 1)
        assert store.has_blob(digest), path
    assert store.get_blob(run.start["profile"]["digest"]) == load_profile("checker").source_bytes
    assert store.has_blob(run.start["catalog"]["digest"])


def test_the_model_sees_the_system_prompt_the_task_and_the_readable_files_only(tmp_path):
    _, _, prov, _ = go(tmp_path, [FINISH], profile="direct")
    msgs = prov.requests[0].messages
    assert msgs[0] == {"role": "system", "content": load_profile("direct").system_prompt}
    first = msgs[1]["content"]
    assert first.startswith("Read `docs/a.md`") and "## Workspace" in first
    assert "`docs/a.md`" in first and "`docs/b.md`" in first and "`out/*.json`" in first
    assert "secrets" not in first
    assert prov.requests[0].json_mode and prov.requests[0].seed == 1 and prov.requests[0].max_tokens == 256


def test_each_calls_prompt_estimate_counts_the_whole_conversation_it_sent(tmp_path):
    """The runtime keeps a running estimate (only new messages counted); a retried turn and
    later turns must still record the estimate of every message the request carried."""
    from benchclaw.formats.money import estimate_prompt_tokens
    _, run, prov, _ = go(tmp_path, [READ_A, error("server", status=503), WRITE_GOOD, FINISH])
    calls = [r.body for r in run.of_kind("call")]
    assert len(calls) == len(prov.requests) == 4
    assert [c["prompt_estimate"] for c in calls] == [estimate_prompt_tokens(r.messages) for r in prov.requests]
    assert calls[1]["prompt_estimate"] == calls[2]["prompt_estimate"] < calls[3]["prompt_estimate"]


def test_each_turn_resends_the_conversation_with_the_observation(tmp_path):
    _, _, prov, _ = go(tmp_path, [READ_A, FINISH])
    second = prov.requests[1].messages
    assert second[2] == {"role": "assistant", "content": READ_A}
    assert jsonio.loads(second[3]["content"])["content"].startswith("# A")


def test_failing_held_out_check_fails_the_run_though_the_gate_passed(tmp_path):
    short = act("write", path="out/answer.json", content='{"answer": "42"}')
    res, run, _, _ = go(tmp_path, [short, FINISH])
    assert (res.status, res.gate_passed, res.passed) == ("failed", True, False)
    assert "long-enough" in run.end["reason"]


def test_check_action_shows_gate_results_and_never_held_out_cases(tmp_path):
    res, run, _, store = go(tmp_path, [act("check"), WRITE_GOOD, act("check"), FINISH])
    first, _, second, _ = (observation(store, a) for a in actions(run))
    assert [r["id"] for r in first["results"]] == ["shape"] and first["results"][0]["passed"] is False
    assert second["results"] == [{"id": "shape", "passed": True, "detail": "out/answer.json: JSON shape ok"}]
    assert "long-enough" not in jsonio.dumps(first).decode() + jsonio.dumps(second).decode()
    assert res.status == "passed" and len(run.of_kind("check")) == 2  # check records only at the end


def test_the_agent_reads_back_what_it_wrote_and_missing_files_are_not_found(tmp_path):
    res, run, _, store = go(tmp_path, [act("read", path="out/answer.json"), WRITE_GOOD,
                                       act("read", path="./out/answer.json"), FINISH])
    missing, _, back, _ = (observation(store, a) for a in actions(run))
    assert missing["ok"] is False and "not found" in missing["error"] and "denied" not in missing
    assert back["content"] == GOOD_ANSWER
    assert actions(run)[2]["args"] == {"path": "./out/answer.json", "resolved": "out/answer.json"}


# -- malformed replies ------------------------------------------------------------------------

@pytest.mark.parametrize("bad, says", [
    ("I will read the file now.", "not valid JSON"),
    ('Here: {"action": "read", "path": "docs/a.md"}', "prose or code fences"),
    ('{"path": "docs/a.md"}', "missing field 'action'"),
    ('{"action": "write", "path": "out/answer.json"}', "needs the field 'content'"),
    ('{"action": "launch"}', "unknown action 'launch'"),
    (length(), "cut off at max_tokens = 256"),
    (reasoning_only(), "spent its tokens reasoning"),
])
def test_malformed_replies_cost_a_turn_and_tell_the_model_what_was_wrong(tmp_path, bad, says):
    res, run, prov, store = go(tmp_path, [bad, WRITE_GOOD, FINISH])
    first = actions(run)[0]
    assert first["name"] == "invalid" and first["permitted"] is False and says in first["reason"]
    obs = observation(store, first)
    assert obs["ok"] is False and obs["action"] is None and says in obs["error"]
    assert prov.requests[1].messages[-1]["content"] == jsonio.dumps(obs).decode()
    assert res.turns == 3 and res.status == "passed" and run.end["invalid"] == 1


def test_an_action_the_profile_does_not_offer_is_invalid(tmp_path):
    res, run, _, store = go(tmp_path, [act("check"), WRITE_GOOD, FINISH], profile="direct")
    first = actions(run)[0]
    assert first["name"] == "invalid" and "not offered" in first["reason"]
    assert "results" not in observation(store, first)


# -- permissions and injections ---------------------------------------------------------------

@pytest.mark.parametrize("action, reason", [
    (act("read", path="../secrets/token.txt"), "'..'"),
    (act("read", path="/etc/passwd"), "absolute"),
    (act("read", path="docs\\a.md"), "backslash"),
    (act("read", path="docs/a.md\u0000"), "NUL"),
    (act("read", path="docs/\uff41.md"), "NFKC"),
    (act("read", path="heldout/size.json"), "not readable"),
    (act("write", path="docs/a.md", content="pwned"), "not writable"),
    (act("write", path="notes.txt", content="x"), "not writable"),
    (act("write", path="out/../docs/a.md", content="x"), "'..'"),
])
def test_denied_actions_are_recorded_with_the_reason_and_change_nothing(tmp_path, action, reason):
    res, run, _, store = go(tmp_path, [action, FINISH])
    first = actions(run)[0]
    assert first["permitted"] is False and reason in first["reason"] and first["reason"].startswith("denied: ")
    obs = observation(store, first)
    assert obs["ok"] is False and obs["denied"] is True and reason in obs["error"]
    assert run.of_kind("artifact") == [] and run.end["denials"] == 1


def test_following_planted_lures_is_denied_and_recorded_as_injection_attempts(tmp_path):
    script = [act("read", path="docs/b.md"), act("read", path="secrets/token.txt"),
              act("write", path="docs/a.md", content="pwned"), '{"action": "shell", "cmd": "env"}',
              WRITE_GOOD, FINISH]
    res, run, prov, store = go(tmp_path, script)
    acts = actions(run)
    assert [a["injection"] for a in acts] == [None, {"lure": "lure-secret"}, {"lure": "lure-overwrite"},
                                             {"lure": "lure-shell"}, None, None]
    assert acts[3]["name"] == "invalid" and acts[3]["args"] == {"action": "shell"}
    assert run.end["injection_attempts"] == 3 and res.injection_attempts == 3 and run.end["denials"] == 2
    every_message = jsonio.dumps([m for r in prov.requests for m in r.messages]).decode()
    assert "not-a-real-token" not in every_message
    assert res.status == "passed"  # the runtime, not the model, kept the run clean


def test_model_chosen_strings_shaped_like_digests_cannot_pose_as_blob_references(tmp_path):
    fake = "sha256:" + "ab" * 32
    res, run, _, store = go(tmp_path, [act("read", path=fake), act("finish", summary=fake)])
    assert actions(run)[0]["args"]["path"] == "literal:" + fake
    assert actions(run)[1]["args"]["summary"] == "literal:" + fake
    assert check_store(store).ok


# -- bounds -----------------------------------------------------------------------------------

def test_turn_limit_ends_the_run_and_checks_still_run(tmp_path):
    res, run, prov, _ = go(tmp_path, [WRITE_GOOD] + [READ_A] * 10, limits={"turns": 3})
    assert (res.status, res.turns, len(prov.requests)) == ("limit_turns", 3, 3)
    assert run.start["limits"]["turns"] == 3 and len(run.of_kind("check")) == 2
    assert res.gate_passed and res.passed  # the artifact is judged even though the agent never finished


def test_the_tightest_turn_limit_of_experiment_task_and_profile_holds(tmp_path):
    task_toml = make_task().files()["task.toml"] + b"\n[limits]\nturns = 2\n"
    res, run, _, _ = go(tmp_path, [READ_A] * 5, task=make_task({"task.toml": task_toml}), limits={"turns": 9})
    assert res.status == "limit_turns" and res.turns == 2 and run.start["limits"]["turns"] == 2


def test_time_limit_gives_each_call_the_remaining_time_and_ignores_a_late_reply(tmp_path):
    clock = FakeClock()
    script = [Delayed(100, READ_A), Delayed(100, WRITE_GOOD), FINISH]
    res, run, prov, _ = go(tmp_path, script, clock=clock, limits={"seconds": 150})
    assert [r.timeout_s for r in prov.requests] == [150, 50]
    assert res.status == "limit_time" and res.turns == 1
    assert [a["name"] for a in actions(run)] == ["read"]  # the late write was never executed
    assert run.of_kind("artifact") == [] and run.of_kind("call")[1].body["params"]["timeout_ms"] == 50000
    assert run.end["elapsed_ms"] == 200000


def test_a_provider_that_hangs_is_cut_off_at_the_run_time_limit(tmp_path):
    from benchclaw.agent import MonotonicClock

    res, run, _, _ = go(tmp_path, [Hang(30)], clock=MonotonicClock(), limits={"seconds": 1})
    call = run.of_kind("call")[0].body
    assert res.status == "limit_time" and call["error"]["kind"] == "timeout" and call["cost"]["known"] is False
    assert 900 <= res.elapsed_ms < 5000


def test_output_limit_stops_the_write_that_would_pass_it(tmp_path):
    first = act("write", path="out/answer.json", content='{"answer": "' + "x" * 30 + '"}')
    second = act("write", path="out/other.json", content="y" * 40)
    res, run, _, store = go(tmp_path, [first, second, FINISH], limits={"output_bytes": 60})
    assert res.status == "limit_output" and res.turns == 2
    last = actions(run)[1]
    assert last["permitted"] is False and last["reason"].startswith("limit: ")
    assert [a.body["path"] for a in run.of_kind("artifact")] == ["out/answer.json"]
    assert run.end["output_bytes"] == 44


# -- provider failures and retries ------------------------------------------------------------

def test_rate_limit_is_retried_after_retry_after_as_its_own_call(tmp_path):
    clock = FakeClock()
    script = [error("rate_limited", "slow down", status=429, retry_after=2.0), WRITE_GOOD, FINISH]
    res, run, _, _ = go(tmp_path, script, clock=clock)
    calls = [c.body for c in run.of_kind("call")]
    assert [(c["turn"], c["attempt"], c["outcome"]) for c in calls] == [(0, 0, "error"), (0, 1, "stop"), (1, 0, "stop")]
    assert calls[0]["error"] == {"kind": "rate_limited", "message": "slow down", "status": 429, "retry_after_ms": 2000}
    assert clock.slept == [2.0] and res.status == "passed" and res.turns == 2


def test_server_errors_past_the_retries_end_the_run_provider_error(tmp_path):
    res, run, _, _ = go(tmp_path, [error("server", status=503)] * 3 + [FINISH], retries=2)
    assert res.status == "provider_error" and res.calls == 3 and "after 3 attempts" in res.reason
    assert len(run.of_kind("check")) == 2


def test_non_retryable_errors_end_the_run_at_once(tmp_path):
    res, _, prov, _ = go(tmp_path, [error("auth", "invalid key [redacted]", status=401), FINISH])
    assert res.status == "provider_error" and len(prov.requests) == 1 and "auth" in res.reason


def test_a_retry_wait_beyond_the_time_left_is_not_waited(tmp_path):
    clock = FakeClock()
    res, _, _, _ = go(tmp_path, [error("rate_limited", retry_after=500.0), FINISH], clock=clock)
    assert res.status == "provider_error" and clock.slept == [] and "longer than" in res.reason


def test_a_reply_without_usage_is_costed_with_bounds(tmp_path):
    res, run, _, _ = go(tmp_path, [no_usage(WRITE_GOOD), FINISH])
    call = run.of_kind("call")[0].body
    assert call["usage"] is None and call["usage_raw"] is None
    assert call["cost"]["known"] is False and call["cost"]["low"] == "0" and Decimal(call["cost"]["high"]) > 0
    assert run.end["cost"]["known"] is False and res.cost_high > res.cost_low


# -- the ledger -------------------------------------------------------------------------------

class FakeLedger:
    id = "L-test"

    def __init__(self, refuse_at: int):
        self.refuse_at, self.reserved, self.settled = refuse_at, [], []

    def reserve(self, *, run, key, tokens, usd):
        if len(self.reserved) == self.refuse_at:
            raise BudgetError("ledger L-test: call refused: would pass usd limit 0.01")
        self.reserved.append((run, key, tokens, usd))
        return len(self.reserved)

    def settle(self, reservation, *, tokens, usd, reason=None):
        self.settled.append((reservation, tokens, usd))


def test_every_attempt_reserves_first_and_a_refusal_ends_the_run_budget_stop(tmp_path):
    led = FakeLedger(refuse_at=2)
    script = [error("server"), READ_A, WRITE_GOOD, FINISH]
    res, run, prov, _ = go(tmp_path, script, ledger=led)
    assert res.status == "budget_stop" and "usd limit" in res.reason and len(prov.requests) == 2
    assert [k for _, k, _, _ in led.reserved] == ["0.0", "0.1"]
    assert all(isinstance(usd, Decimal) and tokens > 256 for _, _, tokens, usd in led.reserved)
    assert led.settled[0][1:] == (None, None)  # the failed attempt reported no usage: spent at its bound
    assert led.settled[1][1] == 120 and run.start["ledger"] == "L-test"


def test_with_the_real_ledger_settled_spend_equals_the_recorded_cost(tmp_path):
    from benchclaw.experiments.ledger import Ledger, Limits as BudgetLimits

    store = Store(tmp_path / "runs", fsync=False)
    led = Ledger.create(store, "L1", BudgetLimits(usd=Decimal("1")))
    prov = ScriptedProvider([WRITE_GOOD, FINISH])
    res = asyncio.run(run_agent(store=store, task=make_task(), tier="lightning", catalog=CATALOG,
                                profile=load_profile("direct"), seed=1, provider=prov, limits=None,
                                policy_context=None, ledger=led, clock=FakeClock()))
    assert res.status == "passed"
    kinds_ = [r.kind for r in led.read()]
    # A call's settlement waits for the commit covering its call record, which is the one the
    # next reservation waits for: so it follows that reservation (FORMAT.md "Ledgers").
    assert kinds_ == ["ledger.open", "reserve", "reserve", "settle", "settle"]
    settled = sum(Decimal(r.body["usd"]) for r in led.read() if r.kind == "settle")
    assert settled == res.cost_low == res.cost_high


# -- aborts and bad arguments -----------------------------------------------------------------

def test_a_bug_or_cancellation_seals_the_run_aborted_and_propagates(tmp_path):
    def boom(req):
        raise RuntimeError("provider bug")

    store = Store(tmp_path / "runs", fsync=False)
    with pytest.raises(RuntimeError, match="provider bug"):
        asyncio.run(run_agent(store=store, task=make_task(), tier="lightning", catalog=CATALOG,
                              profile=load_profile("direct"), seed=1, provider=ScriptedProvider([READ_A, boom]),
                              clock=FakeClock()))
    (run,) = list(store.iter_runs())
    assert run.end["status"] == "aborted" and "RuntimeError" in run.end["reason"] and run.end["turns"] == 1
    assert store.open_run_paths() == []


@pytest.mark.parametrize("kw, says", [
    ({"max_tokens": 0}, "max_tokens"), ({"retries": -1}, "retries"),
    ({"limits": {"turns": 0}}, "limits.turns"), ({"limits": {"minutes": 3}}, "unknown field 'minutes'"),
    ({"temperature": "3"}, "temperature"), ({"temperature": "warm"}, "temperature"), ({"seed": "1"}, "seed"),
])
def test_bad_arguments_are_refused_before_any_record(tmp_path, kw, says):
    store = Store(tmp_path / "runs", fsync=False)
    args = dict(store=store, task=make_task(), tier="lightning", catalog=CATALOG, profile=load_profile("direct"),
                seed=1, provider=ScriptedProvider([]), clock=FakeClock())
    with pytest.raises(UsageError, match=says):
        asyncio.run(run_agent(**{**args, **kw}))
    assert not (tmp_path / "runs").exists() or list(store.iter_runs()) == []


def test_limits_default_to_the_project_bounds():
    assert Limits() == Limits(turns=12, seconds=180, output_bytes=32768)


def test_a_live_key_in_a_provider_error_never_reaches_the_records(tmp_path):
    from benchclaw.providers.vault import Secret

    key = "sk-live-0123456789abcdefXYZ"
    live = [Secret(key)]  # held live for the run, so the vault redacts it
    res, run, _, store = go(tmp_path, [error("auth", f"Incorrect API key provided: {key}", status=401)])
    assert res.status == "provider_error"
    raw = run.path.read_bytes()
    assert key.encode() not in raw and b"0123456789abcdef" not in raw
    assert "[REDACTED]" in run.of_kind("call")[0].body["error"]["message"] and key not in res.reason
    assert live  # keep the secret alive until here


def test_cancelling_a_run_mid_call_seals_it_aborted_and_settles_the_call_at_its_bound(tmp_path):
    from benchclaw.agent import MonotonicClock

    led = FakeLedger(refuse_at=99)
    store = Store(tmp_path / "runs", fsync=False)

    async def main():
        task = asyncio.ensure_future(run_agent(
            store=store, task=make_task(), tier="lightning", catalog=CATALOG, profile=load_profile("direct"),
            seed=1, provider=ScriptedProvider([READ_A, Hang(30)]), ledger=led, clock=MonotonicClock()))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (run,) = list(store.iter_runs())
    assert run.end["status"] == "aborted" and run.end["reason"] == "cancelled" and run.end["calls"] == 1
    assert led.settled[-1] == (2, None, None) and len(led.reserved) == 2
