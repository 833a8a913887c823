"""A plain-text progress line for the grid runner (stderr).

Why it is built this way: a grid can run for hours, in a terminal or in CI logs. On a tty
one line is rewritten in place (``\\r``); anywhere else a full line is written every N
units, so logs stay short and readable. No dependency, no colour, no threads: the runner
calls ``update`` when a unit finishes, and ``tick`` may be called on a timer.
"""

from __future__ import annotations

import time
from collections import deque
from decimal import Decimal
from typing import TextIO

from ..formats.money import fmt_usd

__all__ = ["Progress", "fmt_eta"]


def fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


RECENT_CALLS = 50  # the tokens/s shown per tier is over its last this many finished runs


class Progress:
    """``done/total``, passes, live worst-case spend, ETA, and output tokens per second per
    tier over its recent calls (a provider slowing down shows while the grid runs)."""

    def __init__(self, total: int, stream: TextIO | None, *, label: str = "", every: int | None = None,
                 clock=time.monotonic):
        self.total, self.stream, self.label, self.clock = total, stream, label, clock
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.every = every or max(1, total // 20)
        self.done = self.passes = 0
        self.spend = Decimal(0)
        self.start = clock()
        self._last_width = 0
        self.speed: dict[str, deque] = {}  # tier -> recent (completion tokens, latency ms)

    def calls(self, tier: str, timings) -> None:
        """Note ``(completion tokens, milliseconds)`` pairs of the tier: a finished run's
        output tokens and time (``run.end``), which every executor hands back."""
        recent = self.speed.setdefault(tier, deque(maxlen=RECENT_CALLS))
        recent.extend((tokens, ms) for tokens, ms in timings if ms > 0)

    def _speeds(self) -> str:
        parts = []
        for tier, recent in self.speed.items():
            ms = sum(m for _, m in recent)
            if ms:
                parts.append(f"{tier} {1000 * sum(t for t, _ in recent) / ms:.0f}")
        return f"  tok/s {' '.join(parts)}" if parts else ""

    def update(self, *, done: int = 0, passes: int = 0, spend: Decimal | None = None) -> None:
        """Count finished units and refresh the display."""
        self.done += done
        self.passes += passes
        if spend is not None:
            self.spend = spend
        if self.stream is None:
            return
        if self.tty:
            self._draw()
        elif done and (self.done % self.every == 0 or self.done == self.total):
            self._line()

    def note(self, text: str) -> None:
        """One message line (on a terminal above the in-place progress line, redrawn)."""
        if self.stream is None:
            return
        if self.tty:
            self.stream.write("\r" + " " * self._last_width + "\r")
            self._last_width = 0
        self.stream.write(text + "\n")
        if self.tty:
            self._draw()
        self.stream.flush()

    def line(self) -> str:
        elapsed = self.clock() - self.start
        eta = None
        if self.done and self.total > self.done:
            eta = elapsed / self.done * (self.total - self.done)
        elif self.total and self.done >= self.total:
            eta = 0.0
        pct = (100 * self.done // self.total) if self.total else 100
        return (f"{self.label}[{self.done}/{self.total} {pct:3d}%] passes {self.passes}  "
                f"spend ${fmt_usd(self.spend)}  elapsed {fmt_eta(elapsed)}  ETA {fmt_eta(eta)}{self._speeds()}")

    def _draw(self) -> None:
        text = self.line()
        pad = max(0, self._last_width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._last_width = len(text)

    def _line(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the in-place line (tty) so later output starts on a fresh line."""
        if self.stream is None:
            return
        if self.tty:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        elif self.done % self.every != 0 and self.done != self.total:
            self._line()
