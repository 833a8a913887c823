"""complete_with_retries: one recorded call per attempt, Retry-After honoured, time bounded."""

from __future__ import annotations

import asyncio

import pytest

from benchclaw.providers import complete_with_retries
from benchclaw.providers.base import ChatRequest, ChatResponse, Provider, error_response

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], timeout_s=10)
OK = ChatResponse(content='{"action": "finish", "summary": "x"}', finish_reason="stop", outcome="stop")


class Scripted(Provider):
    """Replies from a script; records the request each attempt was sent."""

    def __init__(self, *replies):
        self.replies, self.sent = list(replies), []

    async def complete(self, req):
        self.sent.append(req)
        return self.replies.pop(0)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    async def sleep(self, s):
        self.now += s


def _retry(provider, clock, **kw):
    seen = []

    async def on_attempt(i, sent, resp):  # async callbacks are awaited
        seen.append((i, resp.outcome if resp.error is None else resp.error.kind))

    resp = asyncio.run(complete_with_retries(provider, REQ, on_attempt=on_attempt, sleep=clock.sleep, clock=clock, **kw))
    return resp, seen


def test_retry_after_is_honoured_and_each_attempt_reported():
    clock = FakeClock()
    p = Scripted(error_response("rate_limited", "slow down", status=429, retry_after=3.0),
                 error_response("server", "oops", status=502), OK)
    resp, seen = _retry(p, clock, max_attempts=3)
    assert resp is OK and seen == [(0, "rate_limited"), (1, "server"), (2, "stop")]
    assert clock.now == 3.0 + 1.0  # Retry-After, then the backoff of the second retry
    assert [r.timeout_s for r in p.sent] == [10, 7.0, 6.0]  # each attempt gets what is left


def test_not_retried_timeout_bad_request_or_when_attempts_run_out():
    for kind in ("timeout", "bad_request", "auth", "malformed"):
        resp, seen = _retry(Scripted(error_response(kind, "no")), FakeClock(), max_attempts=5)
        assert seen == [(0, kind)]
    resp, seen = _retry(Scripted(*[error_response("server", "x")] * 2), FakeClock(), max_attempts=2)
    assert len(seen) == 2 and resp.error.kind == "server"


def test_a_wait_longer_than_the_time_left_stops():
    resp, seen = _retry(Scripted(error_response("rate_limited", "x", retry_after=30)), FakeClock(), max_attempts=3)
    assert len(seen) == 1 and resp.error.kind == "rate_limited"


def test_on_attempt_can_stop_the_loop():
    class Refused(Exception):
        pass

    def refuse(i, sent, resp):
        raise Refused()

    p = Scripted(error_response("server", "x"), OK)
    with pytest.raises(Refused):
        asyncio.run(complete_with_retries(p, REQ, on_attempt=refuse, sleep=FakeClock().sleep))
    assert len(p.sent) == 1
