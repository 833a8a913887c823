"""Retry timing. Retries live in BenchClaw, not in the SDK (``max_retries=0``), so that every
HTTP attempt is its own recorded, costed call: the agent runtime's turn loop
(``benchclaw.agent.runtime``) makes one attempt at a time, reserving in the ledger before
and recording after each, and retries kinds in ``base.RETRYABLE_KINDS`` while the run has
time left, waiting what the provider's ``Retry-After`` asks or ``backoff_delay``.
"""

from __future__ import annotations

__all__ = ["backoff_delay"]


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 8.0) -> float:
    """The wait before attempt ``attempt + 1`` when the provider gave no Retry-After."""
    return min(cap, base * (2 ** attempt))
