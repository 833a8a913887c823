"""Property: whatever the model replies, nothing outside the task's permissions is executed
and every bound holds.

The oracle here is independent of ``benchclaw.agent.paths``: the test task lets the agent
read ``docs/<name>.md`` and write ``out/<name>.json``, so an executed read or write must
name such a path in plain ASCII, and the secret input must never reach the model.
"""

import asyncio
import re
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from benchclaw.formats import jsonio
from benchclaw.evidence.check import check_store
from benchclaw.agent import STATUSES, load_profile, run_agent
from benchclaw.agent.testing import Delayed, FakeClock, ScriptedProvider, act, error, length, make_task, no_usage
from benchclaw.providers.catalog import load_catalog
from benchclaw.evidence.store import Store

CATALOG = load_catalog("sim")
TASK = make_task()
PROFILES = {name: load_profile(name) for name in ("direct", "checker")}
READ_OK = re.compile(r"^(docs/[A-Za-z0-9_. -]+\.md|out/[A-Za-z0-9_. -]+\.json)$")
WRITE_OK = re.compile(r"^out/[A-Za-z0-9_. -]+\.json$")
RETRIES = 2

HOSTILE = ["docs/a.md", "docs/b.md", "./docs/a.md", "docs//a.md", "out/answer.json", "out/x.json",
           "secrets/token.txt", "../secrets/token.txt", "docs/../secrets/token.txt", "/etc/passwd",
           "docs\\a.md", "docs/a.md\x00", "docs/\uff41.md", "docs/\u0430.md", "out/../docs/a.md",
           "out/a.json/", "heldout/size.json", "reference/out/answer.json", "task.toml", "docs/a.md ",
           "C:/x.json", "out/\u2024\u2024/x.json", "sha256:" + "0" * 64]
paths = st.one_of(st.sampled_from(["out/answer.json", "out/x.json", "docs/a.md"]), st.sampled_from(HOSTILE),
                  st.text(max_size=20))
contents = st.one_of(st.just('{"answer": "forty-two, from docs/a.md"}'), st.text(max_size=60),
                     st.integers(0, 3000).map(lambda n: "z" * n))
actions = st.one_of(
    st.builds(lambda p: act("read", path=p), paths),
    st.builds(lambda p, c: act("write", path=p, content=c), paths, contents),
    st.just(act("check")),
    st.builds(lambda s: act("finish", summary=s), st.text(max_size=20)),
    st.sampled_from(['{"action": "shell", "cmd": "cat secrets/token.txt"}', "not json", "",
                     'ok {"action": "check"}', '{"action": "read", "path": "docs/a.md", "path": "x"}']),
)
faults = st.one_of(
    st.builds(lambda k, ra: error(k, retry_after=ra), st.sampled_from(["rate_limited", "server", "connection",
                                                                        "timeout", "auth", "malformed"]),
              st.none() | st.floats(0, 30)),
    st.builds(length), st.builds(no_usage, actions),
)
replies = st.lists(st.one_of(actions, actions, faults,
                             st.builds(Delayed, st.floats(0, 40), st.one_of(actions, faults))), max_size=14)


class TimedProvider(ScriptedProvider):
    """Remembers the fake time each reply arrived at."""

    def __init__(self, replies, clock):
        super().__init__(replies, clock=clock)
        self.arrivals = []

    async def complete(self, req):
        resp = await super().complete(req)
        self.arrivals.append((self.clock.now, resp.ok))
        return resp


def _run(script, profile, limits):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp, fsync=False)
        clock = FakeClock(start=0.0)
        prov = TimedProvider(script, clock)
        res = asyncio.run(run_agent(store=store, task=TASK, tier="lightning", catalog=CATALOG,
                                    profile=PROFILES[profile], seed=3, provider=prov, limits=limits,
                                    max_tokens=64, retries=RETRIES, clock=clock))
        run = store.read_run(res.run_id)
        observations = [store.get_blob(r.body["observation"]) for r in run.of_kind("action")]
        assert check_store(store).ok
        return res, run, prov, observations


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies, st.sampled_from(["direct", "checker"]),
       st.fixed_dictionaries({"turns": st.integers(1, 8), "seconds": st.integers(5, 60),
                              "output_bytes": st.integers(50, 4000)}))
def test_no_forbidden_action_is_executed_and_every_bound_holds(script, profile, limits):
    res, run, prov, observations = _run(script, profile, limits)
    acts = [r.body for r in run.of_kind("action")]
    assert res.status in STATUSES and run.end["status"] == res.status
    # permissions: every executed read/write names a permitted path; nothing else changed
    for a in acts:
        if a["permitted"] and a["name"] in ("read", "write"):
            path = a["args"].get("resolved", a["args"]["path"])
            assert path.isascii() and (READ_OK if a["name"] == "read" else WRITE_OK).match(path), a
        if a["name"] not in ("read", "write", "check", "finish"):
            assert a["name"] == "invalid" and a["permitted"] is False
        if a["name"] == "check" and a["permitted"]:
            assert "check" in PROFILES[profile].actions
    for art in run.of_kind("artifact"):
        assert WRITE_OK.match(art.body["path"])
    assert all(b"not-a-real-token" not in o for o in observations)
    sent = jsonio.dumps([m for r in prov.requests for m in r.messages])
    assert b"not-a-real-token" not in sent
    # bounds: turns, attempts per turn, written bytes, and no action on a reply that came too late
    assert res.turns <= limits["turns"] and len(acts) == res.turns
    assert res.calls == len(prov.requests) <= limits["turns"] * (RETRIES + 1)
    assert run.end["output_bytes"] <= limits["output_bytes"]
    assert sum(a["args"]["bytes"] for a in acts if a["name"] == "write" and a["permitted"]) <= limits["output_bytes"]
    in_time = [t for t, ok in prov.arrivals if ok and t < limits["seconds"]]
    assert res.turns <= len(in_time)
    for req in prov.requests:
        assert 0 < req.timeout_s <= limits["seconds"]
    if res.status == "limit_output":
        assert acts[-1]["name"] == "write" and acts[-1]["reason"].startswith("limit: ")
