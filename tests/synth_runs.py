"""Synthetic evidence for the site's tests and benchmark (FORMAT.md §3, §7-8). Test-only:
it fabricates evidence, so it lives in tests/, never in the shipped package.

The site must be built and measured before the agent runtime and grid runner exist, and
its benchmark needs 10,000 runs in seconds. So this module writes run logs that follow the
record format exactly (written by the one chain writer, ``Store.open_run`` and
``Journal``, with a synthetic clock, and blobs through ``Store.put_blob``) but fabricates their content from a seeded RNG instead of calling
a model. Every run is marked ``simulated`` and its provider is ``synth``: it is evidence
about nothing, and the site shows it as simulated.

Timestamps are synthetic too (a fixed epoch plus a counter), so the same arguments give
the same run ids: a benchmark run and its rebuild are reproducible.

The runs are realistic on purpose: tasks with inputs, checks, held-out cases and a
reference (stored as the task listing and its blobs), planted injection lures that some
tiers follow and the runtime denies, replies cut off by ``max_tokens``, a 429 retried,
rows dropped from a CSV, a missed pricing boundary, and one reply carrying an XSS probe.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from benchclaw.formats import jsonio
from benchclaw.formats.money import CostBounds, Prices, Usage, call_cost
from benchclaw.evidence.store import Journal, Store

from .synth_tasks import TASKS, XSS_PROBE, task_files

__all__ = ["synth_runs", "add_run", "SynthInfo", "XSS_PROBE", "TIERS"]

TIERS = ("lightning", "super", "ultra")
_PRICES = {
    "lightning": {"input": "0.05", "cached_input": "0.01", "cache_write": None, "output": "0.20"},
    "super": {"input": "0.30", "cached_input": "0.075", "cache_write": None, "output": "1.20"},
    "ultra": {"input": "1.00", "cached_input": "0.25", "cache_write": "1.25", "output": "4.00"},
}
_PASS_P = {"lightning": 0.45, "super": 0.7, "ultra": 0.88}
_INJECT_P = {"lightning": 0.15, "super": 0.06, "ultra": 0.02}
_LENGTH_P = {"lightning": 0.08, "super": 0.03, "ultra": 0.01}
_LATENCY = {"lightning": 300, "super": 900, "ultra": 2200}
# The first cells always hold one of each kind of run the gallery shows, so even a small
# synthetic grid has them: (cell index, tier) -> scenario.
_FORCED = {
    (0, "lightning"): {"length": True},
    (0, "super"): {"mistake": ""},
    (1, "lightning"): {"inject": True, "mistake": "dropped-row"},
    (2, "lightning"): {"mistake": ""},
    (2, "ultra"): {"mistake": "boundary-miss"},
    (3, "super"): {"retry": True, "mistake": ""},
    (4, "lightning"): {"inject": True, "mistake": "paraphrase"},
}
_EPOCH = _dt.datetime(2026, 11, 30, 3, 0, 0, tzinfo=_dt.timezone.utc)
_SYSTEM = "You are a careful agent. Answer with one JSON object naming one action."


@dataclass(frozen=True)
class SynthInfo:
    """What ``synth_runs`` wrote: the experiment id, run ids, and the XSS probe's run."""

    experiment: str
    run_ids: tuple[str, ...]
    xss_run: str


class _Clock:
    """Synthetic, strictly increasing timestamps (FORMAT.md time format)."""

    def __init__(self, start: _dt.datetime):
        self.t = start

    def tick(self, ms: int = 1) -> str:
        self.t += _dt.timedelta(milliseconds=ms)
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _RunBuilder:
    """One run written through the store's run writer, stamped by the synthetic clock."""

    def __init__(self, store: Store, clock: _Clock):
        self.ms = 1
        self.writer = store.open_run(clock=lambda: clock.tick(self.ms))

    def add(self, kind: str, body: dict, ms: int = 1) -> None:
        self.ms = ms
        self.writer.append(kind, body)

    def seal(self) -> str:
        return self.writer.seal()


def _rng(*parts) -> random.Random:
    return random.Random(hashlib.sha256(repr(parts).encode()).digest())


def _put_task(store: Store, name: str) -> dict:
    files = task_files(name)
    listing = b"".join(f"{hashlib.sha256(b).hexdigest()}  {p}\n".encode() for p, b in sorted(files.items()))
    for data in files.values():
        store.put_blob(data)
    spec = TASKS[name]
    return {"id": name, "version": 1, "digest": store.put_blob(listing), "family": spec["family"]}


class _Run:
    """One synthetic agent run: turns of call + action, then checks, artifact, run.end."""

    def __init__(self, store, clock, start: dict, rng: random.Random, scenario: dict):
        self.store, self.rng, self.sc = store, rng, scenario
        self.b = _RunBuilder(store, clock)
        self.tier = start["tier"]
        self.prices = Prices.from_dict(start["prices"])
        self.usage, self.cost = Usage(), CostBounds.zero()
        self.calls = self.turns = self.denials = self.injections = 0
        self.elapsed = 0
        self.messages = [{"role": "system", "content": _SYSTEM},
                         {"role": "user", "content": TASKS[start["task"]["id"]]["prompt"]}]
        self.b.add("run.start", start)

    def call(self, turn: int, reply: str, *, outcome: str = "stop", attempt: int = 0, error=None) -> None:
        prompt = 600 + 350 * turn + self.rng.randrange(60)
        request = self.store.put_json_blob({"model": f"sim/{self.tier}", "messages": self.messages,
                                            "max_tokens": 8192, "temperature": "0", "seed": 1})
        latency = _LATENCY[self.tier] + self.rng.randrange(400)
        body = {"turn": turn, "attempt": attempt, "request": request,
                "params": {"model": f"sim/{self.tier}", "max_tokens": 8192, "temperature": "0",
                           "seed": 1, "json_mode": True, "timeout_ms": 180000},
                "prompt_estimate": prompt, "outcome": outcome, "error": error, "simulated": True,
                "model_echoed": f"sim/{self.tier}", "model_mismatch": False, "latency_ms": latency,
                "request_id": f"req_{self.rng.getrandbits(48):012x}"}
        if error:
            cost = CostBounds(False, Decimal(0), call_cost(Usage(prompt=prompt, completion=8192), self.prices))
            body.update(finish_reason=None, reply=None, usage=None, usage_raw=None, response_id=None,
                        cost=cost.to_dict())
        else:
            reasoning = {"lightning": 0, "super": 120, "ultra": 400}[self.tier] + self.rng.randrange(80)
            completion = reasoning + (8192 - reasoning if outcome == "length" else 40 + len(reply) // 4)
            usage = Usage(prompt=prompt, cached_read=min(prompt, 512) if turn else 0,
                          completion=completion, reasoning=reasoning)
            raw = {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                   "prompt_tokens_details": {"cached_tokens": usage.cached_read},
                   "completion_tokens_details": {"reasoning_tokens": usage.reasoning}}
            cost = CostBounds(True, call_cost(usage, self.prices), call_cost(usage, self.prices))
            self.usage = self.usage + usage
            self.messages.append({"role": "assistant", "content": reply})
            body.update(finish_reason=outcome, reply=self.store.put_blob(reply.encode()),
                        usage=usage.to_dict(), usage_raw=self.store.put_json_blob(raw),
                        response_id=f"chatcmpl-{self.rng.getrandbits(40):010x}", cost=cost.to_dict())
        self.cost = self.cost + cost
        self.calls += 1
        self.elapsed += latency
        self.b.add("call", body, latency)

    def action(self, turn: int, name: str, args: dict, obs: dict, *, permitted=True, reason=None,
               injection=None) -> None:
        obs_text = jsonio.dumps(obs).decode()
        self.messages.append({"role": "user", "content": obs_text})
        self.denials += not permitted and name != "invalid"  # an invalid reply is no denial
        self.injections += injection is not None
        self.turns = turn + 1
        self.b.add("action", {"turn": turn, "name": name, "args": args, "permitted": permitted,
                              "reason": reason, "injection": injection,
                              "observation": self.store.put_blob(obs_text.encode())})

    def finish(self, status: str, reason: str | None, checks: list[dict], artifacts: dict[str, bytes]) -> str:
        for c in checks:
            self.b.add("check", c)
        for path, data in sorted(artifacts.items()):
            self.b.add("artifact", {"path": path, "digest": self.store.put_blob(data), "size": len(data)})
        gate = all(c["passed"] for c in checks if c["gate"]) and bool(checks)
        passed = all(c["passed"] for c in checks) and bool(checks)
        self.b.add("run.end", {"status": status, "reason": reason, "turns": self.turns, "calls": self.calls,
                               "gate_passed": gate, "passed": passed, "usage": self.usage.to_dict(),
                               "cost": self.cost.to_dict(), "elapsed_ms": self.elapsed + 5,
                               "injection_attempts": self.injections, "denials": self.denials})
        return self.b.seal()


def _play(run: _Run, task: str, profile: str, xss: bool) -> str:
    """Script one run's turns from its scenario; returns the sealed run id."""
    spec, sc, turn = TASKS[task], run.sc, 0
    src = spec["input"]
    if sc.get("retry"):
        run.call(turn, "", outcome="error", error={"kind": "rate_limited", "message": "429 Too Many Requests",
                                                    "status": 429, "retry_after_ms": 1000})
        run.call(turn, _reply("read", path=src), attempt=1)
    else:
        run.call(turn, _reply("read", path=src))
    run.action(turn, "read", {"path": src}, {"ok": True, "action": "read", "path": src,
                                            "content": task_files(task)["inputs/" + src].decode()})
    turn += 1
    if sc.get("inject"):
        lure = spec["lure"]
        run.call(turn, _reply("read", path=lure["target"]))
        reason = f"path {lure['target']!r} is outside the workspace"
        run.action(turn, "read", {"path": lure["target"]},
                   {"ok": False, "action": "read", "error": f"denied: {reason}", "denied": True},
                   permitted=False, reason=reason, injection={"lure": lure["id"]})
        turn += 1
    if sc.get("length"):
        run.call(turn, '{"action": "write", "path": "' + spec["output"] + '", "content": "' + "x" * 400,
                 outcome="length")
        run.action(turn, "invalid", {}, {"ok": False, "action": None,
                                         "error": "invalid reply: ran out of tokens mid-JSON"},
                   permitted=False, reason="invalid reply: not one JSON object (the reply was cut off "
                                           "at max_tokens = 4096)")
        return run.finish("failed", "no artifact written", _checks(task, None), {})
    content = spec["bad"][sc["mistake"]] if sc.get("mistake") else spec["good"]
    run.call(turn, _reply("write", path=spec["output"], content=content.decode()))
    run.action(turn, "write", {"path": spec["output"], "content": run.store.put_blob(content),
                               "bytes": len(content)},
               {"ok": True, "action": "write", "path": spec["output"], "bytes": len(content)})
    turn += 1
    results = _checks(task, sc.get("mistake"))
    if profile == "checker":
        run.call(turn, _reply("check"))
        gate = [{"id": c["id"], "passed": c["passed"], "detail": c["detail"]} for c in results if c["gate"]]
        run.action(turn, "check", {}, {"ok": True, "action": "check", "results": gate})
        turn += 1
    summary = XSS_PROBE if xss else "Wrote " + spec["output"] + "."
    run.call(turn, _reply("finish", summary=summary))
    run.action(turn, "finish", {"summary": summary}, {"ok": True, "action": "finish"})
    failed = [c["id"] for c in results if not c["passed"]]
    status = "failed" if failed else "passed"
    return run.finish(status, f"check {failed[0]} failed" if failed else None, results,
                      {spec["output"]: content})


def _reply(action: str, **kw) -> str:
    return jsonio.dumps({"action": action, **kw}).decode()


def _checks(task: str, mistake: str | None) -> list[dict]:
    """Check records: ``None`` = no artifact (all fail), ``""`` = a good one, else the
    named mistake fails the checks it breaks, with their details."""
    fails = {} if not mistake else TASKS[task]["fails"][mistake]
    out = []
    for c in TASKS[task]["checks"]:
        detail = "no artifact" if mistake is None else fails.get(c["id"], "ok")
        out.append({"id": c["id"], "type": c["type"], "gate": c["gate"], "heldout": c["heldout"],
                    "passed": mistake is not None and c["id"] not in fails, "detail": detail})
    return out


def _scenario(rng: random.Random, tier: str, task: str) -> dict:
    sc: dict = {}
    if rng.random() < _LENGTH_P[tier]:
        return {"length": True}
    sc["inject"] = rng.random() < _INJECT_P[tier]
    sc["retry"] = rng.random() < 0.03
    if rng.random() >= _PASS_P[tier]:
        sc["mistake"] = rng.choice(sorted(TASKS[task]["fails"]))
    else:
        sc["mistake"] = ""
    return sc


def _write_journal(store: Store, exp: str, clock: _Clock, entries: list[tuple[str, dict]]) -> None:
    journal = Journal(store.root / "journals" / exp / "synth.jsonl", exp, "synth", fsync=False,
                      clock=clock.tick)
    for kind, body in entries:
        journal.append(kind, body)
    journal.release()


def synth_runs(root: Path | str, n_runs: int, *, experiment: str = "E01", seed: int = 0) -> SynthInfo:
    """Write about ``n_runs`` synthetic sealed runs (a full grid: every tier on every cell)
    plus a registered experiment journal into the runs directory ``root``.

    Raises ``ValueError`` when ``n_runs`` < 3 (one cell needs every tier).
    """
    if n_runs < 3:
        raise ValueError("synth_runs needs at least 3 runs (one cell, every tier)")
    store = Store(root, fsync=False)
    store.ensure()
    clock = _Clock(_EPOCH)
    spec = _spec_bytes(experiment)
    spec_digest = store.put_blob(spec)
    journal: list[tuple[str, dict]] = [("prereg", {"experiment": experiment, "spec_path": f"experiments/{experiment}.toml",
                                                   "spec_digest": spec_digest})]
    tasks = {name: _put_task(store, name) for name in TASKS}
    catalog = store.put_blob(b'v = 1\nname = "synth"\nsimulated = true\n')
    profiles = {p: store.put_blob(f"name = \"{p}\"\n".encode()) for p in ("direct", "checker")}
    cells = [(t, p, s) for s in range(1, n_runs // 3 // 6 + 2) for t in sorted(TASKS) for p in ("direct", "checker")]
    cells = cells[: -(-n_runs // 3)]
    journal.append(("grid.start", {"invocation": "synth-1", "spec_digest": spec_digest, "ledger": "synth-ledger",
                                   "cells": [f"{t}@1/{p}/{s}" for t, p, s in cells], "tiers": list(TIERS),
                                   "policies": [], "rerun": False}))
    run_ids, xss_run = [], ""
    for i, (t, p, s) in enumerate(cells):
        cell = f"{t}@1/{p}/{s}"
        for tier in TIERS[: n_runs - len(run_ids)]:
            rng = _rng(seed, cell, tier)
            scenario = _FORCED.get((i, tier)) or _scenario(rng, tier, t)
            start = {"task": tasks[t], "tier": tier, "model": f"sim/{tier}", "provider": "synth", "simulated": True,
                     "catalog": {"name": "synth", "digest": catalog}, "prices": _PRICES[tier],
                     "profile": {"name": p, "digest": profiles[p]}, "seed": s,
                     "limits": {"turns": 12, "seconds": 180, "output_bytes": 32768},
                     "settings": {"max_tokens": 8192, "temperature": "0"},
                     "policy": {"experiment": experiment, "cell": cell, "policy": "grid", "trial": None, "step": 0,
                                "rerun": False, "replaces": None, "spec_digest": spec_digest},
                     "ledger": "synth-ledger"}
            xss = (i, tier) == (0, "super")
            run_id = _play(_Run(store, clock, start, rng, scenario), t, p, xss)
            xss_run = run_id if xss else xss_run
            run_ids.append(run_id)
            end = store.read_run(run_id, verify=False).end
            journal.append(("run", {"invocation": "synth-1", "run_id": run_id, "cell": cell, "tier": tier,
                                    "policy": "grid", "trial": None, "step": 0, "status": end["status"],
                                    "called_model": True, "rerun": False}))
    journal.append(("grid.end", {"invocation": "synth-1", "status": "complete", "runs": len(run_ids)}))
    _write_journal(store, experiment, _Clock(_EPOCH - _dt.timedelta(minutes=5)), journal)
    return SynthInfo(experiment, tuple(run_ids), xss_run)


def add_run(root: Path | str, *, experiment: str | None = "E01", seed: int = 10**6, tier: str = "super") -> str:
    """Write one more synthetic run (a new cell) into an existing runs directory; with
    ``experiment=None`` it belongs to no experiment (like a ``benchclaw try`` run)."""
    store = Store(root, fsync=False)
    task = sorted(TASKS)[seed % len(TASKS)]
    cell = f"{task}@1/direct/{seed}"
    rng = _rng("add", seed, tier)
    start = {"task": _put_task(store, task), "tier": tier, "model": f"sim/{tier}", "provider": "synth",
             "simulated": True, "catalog": {"name": "synth", "digest": store.put_blob(b'v = 1\nname = "synth"\n')},
             "prices": _PRICES[tier], "profile": {"name": "direct", "digest": store.put_blob(b'name = "direct"\n')},
             "seed": seed, "limits": {"turns": 12, "seconds": 180, "output_bytes": 32768},
             "settings": {"max_tokens": 8192, "temperature": "0"},
             "policy": {"experiment": experiment, "cell": cell if experiment else None, "policy": "grid" if experiment else None,
                        "trial": None, "step": 0, "rerun": False, "replaces": None}, "ledger": "synth-ledger"}
    if experiment:
        regs = [e.body["spec_digest"] for e in store.read_journal(experiment) if e.kind == "prereg"]
        start["policy"]["spec_digest"] = regs[-1] if regs else None
    clock = _Clock(_EPOCH + _dt.timedelta(days=1, seconds=seed % 86400))
    return _play(_Run(store, clock, start, rng, _scenario(rng, tier, task)), task, "direct", False)


def _spec_bytes(exp: str) -> bytes:
    return f'''v = 1
id = "{exp}"
title = "Synthetic grid: does a ladder match always-ultra for less?"
notes = """Synthetic runs written by `tests/synth_runs.py` for the site's tests and benchmark.
They follow the record format exactly but **no model was called**."""

[grid]
tasks = ["quotes-*", "cents-*", "pricing-*"]
profiles = ["direct", "checker"]
seeds = [1, 2, 3]
tiers = ["lightning", "super", "ultra"]
catalog = "sim"
all_tiers = true

[[hypotheses]]
id = "H1"
text = "The ladder passes at least as many tasks as always-ultra."
rule = 'pass_rate("ladder") >= pass_rate("always:ultra")'

[[hypotheses]]
id = "H2"
text = "The ladder costs less per task than always-ultra."
rule = 'cost_per_task("ladder") < cost_per_task("always:ultra")'
'''.encode()

