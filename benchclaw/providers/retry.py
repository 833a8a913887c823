"""Retries live in BenchClaw, not in the SDK, so that every HTTP attempt is its own call.

The SDK's own retries are off (``max_retries=0``): a retry it made would be an attempt
nobody recorded or costed. ``complete_with_retries`` makes one attempt per loop, hands
each response to ``on_attempt`` (the agent runtime records and costs it there, usage or
bounds), and retries only kinds worth retrying (rate limited, server error, connection
lost), waiting what the provider's ``Retry-After`` asks, or an exponential backoff. Each
attempt's timeout is what is left of the request's: a wait that would not leave time for
another attempt ends the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import replace
from typing import Awaitable, Callable

from .base import ChatRequest, ChatResponse, Provider

__all__ = ["complete_with_retries", "backoff_delay"]

OnAttempt = Callable[[int, ChatRequest, ChatResponse], "Awaitable[None] | None"]


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 8.0) -> float:
    """The wait before attempt ``attempt + 1`` when the provider gave no Retry-After."""
    return min(cap, base * (2 ** attempt))


async def complete_with_retries(
    provider: Provider, req: ChatRequest, *, max_attempts: int = 3, on_attempt: OnAttempt | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, clock: Callable[[], float] = time.monotonic,
    max_wait: float = 60.0,
) -> ChatResponse:
    """Complete ``req``, retrying retryable failures up to ``max_attempts`` attempts in all.

    ``on_attempt(index, request_sent, response)`` (sync or async) is called after every
    attempt, before any wait. Returns the last response (an error response when every
    attempt failed). Raises ``ValueError`` if ``max_attempts < 1``; whatever
    ``on_attempt`` raises propagates (a ledger refusing the next reservation stops here).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    start = clock()
    attempt = 0
    while True:
        sent = _with_time_left(req, start, clock)
        resp = await provider.complete(sent)
        if on_attempt is not None:
            result = on_attempt(attempt, sent, resp)
            if inspect.isawaitable(result):
                await result
        attempt += 1
        if resp.error is None or not resp.error.retryable or attempt >= max_attempts:
            return resp
        wait = resp.error.retry_after if resp.error.retry_after is not None else backoff_delay(attempt - 1)
        if wait > max_wait or not _time_for(req, start, clock, wait):
            return resp
        await sleep(wait)


def _with_time_left(req: ChatRequest, start: float, clock: Callable[[], float]) -> ChatRequest:
    if req.timeout_s is None:
        return req
    return replace(req, timeout_s=max(0.0, req.timeout_s - (clock() - start)))


def _time_for(req: ChatRequest, start: float, clock: Callable[[], float], wait: float) -> bool:
    """Is there time left for a wait and then a useful attempt?"""
    if req.timeout_s is None:
        return True
    return req.timeout_s - (clock() - start) - wait > 0.05
