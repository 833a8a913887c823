"""A visitor's job (one task, one policy, one profile) and the live events it emits.

Why it is built this way: a page follows a job through *events*, small dicts made from the
run's records as they are appended (``Store.open_run(on_append=...)``), never from the
provider's reply or any other channel. Only whitelisted scalar fields of a record become
an event (tier, token counts, latency, cost, action name, permitted or denied and why,
check ids and results); reasons are capped and redacted. So an event carries nothing the
sealed run does not, and nothing a key could hide in.

Events are numbered from 0 and kept for the job's life, so a reconnecting event stream
(``Last-Event-ID``) and a page rendered with JavaScript off see the same sequence.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ..providers.vault import redact
from ..formats.records import Record

__all__ = ["Job", "record_event", "TEXT_CAP"]

TEXT_CAP = 300


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return redact(str(value))[:TEXT_CAP]


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _cost(cost: Any) -> dict | None:
    if not isinstance(cost, dict):
        return None
    return {"known": bool(cost.get("known")), "low": _text(cost.get("low")), "high": _text(cost.get("high"))}


def _call(b: dict) -> dict:
    u = b.get("usage") if isinstance(b.get("usage"), dict) else {}
    err = b.get("error") if isinstance(b.get("error"), dict) else None
    return {"turn": _int(b.get("turn")), "attempt": _int(b.get("attempt")), "outcome": _text(b.get("outcome")),
            "tokens": {k: _int(u.get(k)) for k in ("prompt", "completion", "reasoning", "cached_read")},
            "latency_ms": _int(b.get("latency_ms")), "cost": _cost(b.get("cost")),
            "error": None if err is None else _text(err.get("kind"))}


def _action(b: dict) -> dict:
    args = b.get("args") if isinstance(b.get("args"), dict) else {}
    path = args.get("resolved") or args.get("path")
    inj = b.get("injection") if isinstance(b.get("injection"), dict) else None
    return {"turn": _int(b.get("turn")), "name": _text(b.get("name")), "path": _text(path) if isinstance(path, str) else None,
            "permitted": bool(b.get("permitted")), "reason": _text(b.get("reason")),
            "injection": None if inj is None else _text(inj.get("lure"))}


def _check(b: dict) -> dict:
    return {"id": _text(b.get("id")), "passed": b.get("passed") is True, "gate": bool(b.get("gate")),
            "heldout": bool(b.get("heldout"))}


def _end(b: dict) -> dict:
    return {"status": _text(b.get("status")), "reason": _text(b.get("reason")), "passed": b.get("passed") is True,
            "gate_passed": b.get("gate_passed") is True, "cost": _cost(b.get("cost")), "turns": _int(b.get("turns"))}


_EVENTS = {"call": _call, "action": _action, "check": _check, "run.end": _end}


def record_event(rec: Record) -> tuple[str, dict] | None:
    """The event a run record becomes, or None for kinds a page does not show."""
    make = _EVENTS.get(rec.kind)
    if make is None or not isinstance(rec.body, dict):
        return None
    return ("end" if rec.kind == "run.end" else rec.kind), make(rec.body)


@dataclass
class Job:
    """One visitor job: its choice, its runs, its events. ``status`` is ``running`` until
    the job is over, then ``passed``, ``failed``, ``refused`` (a budget ended it) or
    ``aborted``."""

    id: str
    session: str
    task: str
    policy: str
    profile: str
    seed: int
    simulated: bool
    status: str = "running"
    detail: str = ""
    taken_tier: str | None = None
    runs: list[dict] = field(default_factory=list)   # {"step", "tier", "run_id", "status", "passed", "cost"}
    events: list[tuple[int, str, dict]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    first_event_ms: int | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def running(self) -> bool:
        return self.status == "running"

    def emit(self, kind: str, data: dict) -> None:
        """Add one event and wake every stream waiting for it."""
        if self.first_event_ms is None and kind in ("call", "action"):
            self.first_event_ms = int((time.monotonic() - self.started) * 1000)
        self.events.append((len(self.events), kind, data))
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, after: int, timeout: float) -> None:
        """Return when there is an event past ``after``, the job ended, or ``timeout`` passed."""
        if len(self.events) > after + 1 or not self.running:
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def turns(self) -> list[dict]:
        """The events grouped for the page: one entry per run, each with its lines."""
        out: list[dict] = []
        for _, kind, data in self.events:
            if kind == "run":
                out.append({**data, "lines": [], "end": None})
            elif kind == "end" and out:
                out[-1]["end"] = data
            elif kind in ("call", "action", "check", "escalate") and out:
                out[-1]["lines"].append((kind, data))
        return out
