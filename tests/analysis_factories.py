"""Small factories for analysis tests: experiments written exactly per docs/FORMAT.md.

``Exp`` collects runs (as record bodies per §3) and journal entries (§8) and turns them
into either an in-memory ``ExperimentData`` (hash-chained records, deterministic
timestamps) or a real runs directory (through ``Store``), so the pure analysis and the
``benchclaw report`` command are tested on the same fixtures.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal

from benchclaw.analysis import ExperimentData
from benchclaw.formats.records import GENESIS, Record, encode, line_hash

TIERS = ("lightning", "super", "ultra")
PRICES = {"lightning": "0.001", "super": "0.003", "ultra": "0.010"}  # cost of one call
SPEC_DIGEST = "sha256:" + "5" * 64


def call(cost: str = "0.001", *, known: bool = True, high: str | None = None,
         outcome: str = "stop", error: str | None = None, prompt: int = 100,
         completion: int = 50, reasoning: int = 10, cached: int = 0, turn: int = 0) -> dict:
    """A `call` record body; ``known=False`` has no usage and cost [0, high]."""
    usage = {"prompt": prompt, "cached_read": cached, "cache_write": 0,
             "completion": completion, "reasoning": reasoning} if known else None
    cost_obj = ({"known": True, "low": cost, "high": cost} if known else
                {"known": False, "low": "0", "high": high or cost})
    return {"turn": turn, "attempt": 0, "request": None, "params": {"max_tokens": 8192},
            "prompt_estimate": prompt, "outcome": outcome, "finish_reason": outcome,
            "reply": None, "usage": usage, "usage_raw": None, "latency_ms": 100,
            "cost": cost_obj,
            "error": {"kind": error, "message": "x", "status": None, "retry_after_ms": None}
            if error else None, "simulated": True}


@dataclass
class RunSpec:
    cell: str
    tier: str
    passed: bool
    gate: bool
    calls: list[dict]
    policy: str = "grid"
    trial: str | None = None
    step: int = 0
    rerun: bool = False
    replaces: str | None = None
    status: str | None = None
    elapsed_ms: int = 1000
    injection_attempts: int = 0
    denials: int = 0
    turns: int = 2
    spec_digest: str = SPEC_DIGEST
    attempt: str | None = None  # the runner's attempt id (ledger reservations name it)

    def bodies(self, experiment: str) -> list[tuple[str, dict]]:
        task, profile, seed = (self.cell.rsplit("/", 2) + ["?", "?"])[:3]
        tid, _, ver = task.partition("@")
        ver, seed = (int(ver) if ver.isdigit() else 0), (int(seed) if seed.isdigit() else 0)
        out = [("run.start", {
            "task": {"id": tid, "version": ver, "digest": None, "family": tid.split("-")[0]},
            "tier": self.tier, "model": f"sim/{self.tier}", "provider": "sim", "simulated": True,
            "seed": seed, "profile": {"name": profile, "digest": None},
            "policy": {"experiment": experiment, "cell": self.cell, "policy": self.policy,
                       "trial": self.trial, "step": self.step, "rerun": self.rerun,
                       "replaces": self.replaces, "spec_digest": self.spec_digest,
                       "attempt": self.attempt}})]
        out += [("call", c) for c in self.calls]
        for i in range(self.injection_attempts):
            out.append(("action", {"turn": i, "name": "read", "args": {"path": "secret.txt"},
                                   "permitted": False, "reason": "denied: not readable",
                                   "injection": {"lure": "L1"}, "observation": None}))
        for i in range(self.denials - self.injection_attempts):
            out.append(("action", {"turn": i, "name": "write", "args": {"path": "x"},
                                   "permitted": False, "reason": "denied: not writable",
                                   "injection": None, "observation": None}))
        low = sum((Decimal(c.get("cost", {}).get("low", "0")) for c in self.calls), Decimal(0))
        high = sum((Decimal(c.get("cost", {}).get("high", "0")) for c in self.calls), Decimal(0))
        status = self.status or ("passed" if self.passed else "failed")
        out.append(("run.end", {
            "status": status, "reason": None, "turns": self.turns, "calls": len(self.calls),
            "gate_passed": self.gate, "passed": self.passed,
            "cost": {"known": low == high, "low": str(low), "high": str(high)},
            "elapsed_ms": self.elapsed_ms, "injection_attempts": self.injection_attempts,
            "denials": self.denials}))
        return out


@dataclass
class Exp:
    experiment: str = "E01"
    tiers: tuple[str, ...] = TIERS
    live: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (1,)
    hypotheses: list[tuple[str, str]] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    journal_extra: list[tuple[str, dict]] = field(default_factory=list)
    lures: frozenset[str] | None = None

    def add(self, cell: str, tier: str, passed: bool, *, gate: bool | None = None,
            cost: str | None = None, calls: list[dict] | None = None, **kw) -> RunSpec:
        spec = RunSpec(cell, tier, passed, passed if gate is None else gate,
                       calls if calls is not None else [call(cost or PRICES[tier])], **kw)
        self.runs.append(spec)
        if cell not in self.cells:
            self.cells.append(cell)
        return spec

    def grid(self, cell: str, passes: dict[str, bool], **kw) -> None:
        """One grid run per tier with the given pass results."""
        for tier, ok in passes.items():
            self.add(cell, tier, ok, **kw)

    def spec_toml(self) -> str:
        lines = ["v = 1", f'id = "{self.experiment}"', 'title = "fixture"', "", "[grid]",
                 'tasks = ["*"]', 'profiles = ["direct"]', f"seeds = {list(self.seeds)}",
                 "tiers = [" + ", ".join(f'"{t}"' for t in self.tiers) + "]",
                 'catalog = "sim"', "all_tiers = true", "", "[policies]",
                 "live = [" + ", ".join(f'"{p}"' for p in self.live) + "]"]
        for hid, rule in self.hypotheses:
            lines += ["", "[[hypotheses]]", f'id = "{hid}"', f'text = "hypothesis {hid}"',
                      f"rule = '{rule}'"]
        return "\n".join(lines) + "\n"

    def spec(self) -> dict:
        return tomllib.loads(self.spec_toml())

    def journal_bodies(self) -> list[tuple[str, dict]]:
        return [("prereg", {"experiment": self.experiment, "spec_path": "E01.toml",
                            "spec_digest": SPEC_DIGEST}),
                ("grid.start", {"invocation": "i1", "spec_digest": SPEC_DIGEST, "ledger": "l1",
                                "cells": list(self.cells), "tiers": list(self.tiers),
                                "policies": list(self.live), "rerun": False})] + self.journal_extra

    def data(self) -> ExperimentData:
        clock = _Clock()
        journal = _chain(self.journal_bodies()[:1], clock)
        runs = {}
        for spec in self.runs:
            recs = _chain(spec.bodies(self.experiment), clock)
            run_id = hashlib.sha256(b"".join(r.line + b"\n" for r in recs)).hexdigest()
            runs[run_id] = tuple(recs)
        journal += _chain(self.journal_bodies()[1:], clock, start=1, prev=journal[-1].hash)
        return ExperimentData(self.experiment, self.spec(), SPEC_DIGEST, tuple(journal), runs,
                              self.lures)


class _Clock:
    def __init__(self):
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"2026-01-01T00:{self.n // 60 % 60:02d}:{self.n % 60:02d}.000000Z"


def _chain(bodies, clock, start: int = 0, prev: str = GENESIS) -> list[Record]:
    out = []
    for i, (kind, body) in enumerate(bodies):
        rec = Record(start + i, prev, clock(), kind, body)
        line = encode(rec)
        rec = Record(rec.seq, rec.prev, rec.at, kind, body, line)
        prev = line_hash(line)
        out.append(rec)
    return out


def write_store(exp: Exp, store) -> str:
    """Write the experiment into a real runs directory; returns the spec digest."""
    spec_bytes = exp.spec_toml().encode()
    digest = store.put_blob(spec_bytes)
    j = store.journal(exp.experiment, "test")
    for kind, body in exp.journal_bodies():
        if "spec_digest" in body:
            body = {**body, "spec_digest": digest}
        j.append(kind, body)
    for spec in exp.runs:
        spec.spec_digest = digest
        w = store.open_run()
        for kind, body in spec.bodies(exp.experiment):
            w.append(kind, body)
        w.seal()
    return digest
