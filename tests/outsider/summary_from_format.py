"""summary.json recomputed from an unpacked bundle, written from docs/FORMAT.md alone.

This is, on purpose, a *second* implementation of the analysis that FORMAT.md "Summary"
specifies: it was written by reading docs/FORMAT.md (Conventions, §3, §6, §8, §10,
"Ledgers", "Tasks", "Summary", "Bundles"), docs/verify.md, README.md and a bundle's own
files, never the package's source. Where it and `benchclaw report --json` disagreed, or
where the page was silent, FORMAT.md was rewritten until the rule was stated there, and
this file follows the page. Do not simplify it by importing benchclaw: its whole value is
that it shares no code with the package, so a rule that lives only in the code shows up
as a difference (tests/test_outsider_summary.py).

Standard library only.  Usage:  python summary_from_format.py BUNDLE_DIR [EXPERIMENT]
prints the bytes of summary.json (canonical JSON and a newline) to stdout.
"""

from __future__ import annotations

import datetime
import glob
import json
import math
import os
import sys
import tomllib
from decimal import ROUND_HALF_EVEN, Decimal
from decimal import Context as DecimalContext
from fractions import Fraction

__all__ = ["summarise", "summary_bytes", "dumps"]

# -- Conventions: canonical JSON -----------------------------------------------------------


def dumps(obj) -> bytes:
    """Keys sorted, no white space, only '"', '\\' and U+0000-U+001F escaped, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


# -- Summary, "Number conventions" ---------------------------------------------------------

POS, NEG = float("inf"), float("-inf")


def is_inf(x) -> bool:
    return isinstance(x, float) and math.isinf(x)


def digits(x: Fraction, d: int, mode: str) -> str:
    """``x`` with exactly ``d`` fractional digits, rounded 'floor', 'ceil' or 'even'."""
    scaled = Fraction(x) * 10 ** d
    n = {"floor": math.floor, "ceil": math.ceil, "even": round}[mode](scaled)
    sign, n = ("-" if n < 0 else ""), abs(n)
    if d == 0:
        return f"{sign}{n}"
    s = str(n).rjust(d + 1, "0")
    return f"{sign}{s[:-d]}.{s[-d:]}"


def strip_zeros(s: str) -> str:
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


def money_end(x, mode: str) -> str:
    """A money/term end: 12 digits, trailing zeros removed; '-inf'/'inf' when unbounded."""
    if is_inf(x):
        return "inf" if x > 0 else "-inf"
    return strip_zeros(digits(x, 12, mode))


def money(iv) -> dict | None:
    if iv is None or iv == UNKNOWN:
        return None
    lo, hi = iv
    return {"low": money_end(lo, "floor"), "high": money_end(hi, "ceil"), "known": lo == hi}


def bounds(iv) -> list | None:
    if iv is None or is_inf(iv[0]) or is_inf(iv[1]):
        return None
    lo, hi = iv
    if lo == hi:
        s = digits(lo, 4, "even")
        return [s, s]
    return [digits(lo, 4, "floor"), digits(hi, 4, "ceil")]


Z = Decimal("1.959963984540054")
D50 = DecimalContext(prec=50, rounding=ROUND_HALF_EVEN)


def wilson(x: int, n: int) -> list:
    c = D50
    xd, nd = Decimal(x), Decimal(n)
    z2 = c.multiply(Z, Z)
    d = c.add(nd, z2)
    centre = c.divide(c.add(xd, c.divide(z2, 2)), d)
    s = c.add(c.divide(c.multiply(xd, c.subtract(nd, xd)), nd), c.divide(z2, 4))
    h = c.divide(c.multiply(Z, c.sqrt(s)), d)
    lo = max(Decimal(0), c.subtract(centre, h))
    hi = min(Decimal(1), c.add(centre, h))
    return [digits(Fraction(lo), 4, "floor"), digits(Fraction(hi), 4, "ceil")]


def rate(passed: int, n: int) -> dict:
    if n == 0:
        return {"passed": passed, "n": 0, "fraction": None, "value": None, "wilson95": None}
    return {"passed": passed, "n": n, "fraction": f"{passed}/{n}",
            "value": digits(Fraction(passed, n), 4, "even"), "wilson95": wilson(passed, n)}


def median(xs: list):
    xs = sorted(xs)
    m = len(xs) // 2
    return Fraction(xs[m]) if len(xs) % 2 else Fraction(xs[m - 1] + xs[m], 2)


def nearest_rank(xs: list, p: int):
    xs = sorted(xs)
    return Fraction(xs[max(1, math.ceil(Fraction(p * len(xs), 100))) - 1])


# -- §10: intervals --------------------------------------------------------------------------

UNKNOWN = (NEG, POS)


def point(v) -> tuple:
    return (v, v)


def _add(a, b):
    if is_inf(a) and is_inf(b) and a != b:
        raise ArithmeticError
    return a if is_inf(a) else (b if is_inf(b) else a + b)


def _mul(a, b):
    if is_inf(a) or is_inf(b):
        s = (1 if a > 0 else -1 if a < 0 else 0) * (1 if b > 0 else -1 if b < 0 else 0)
        if s == 0:
            raise ArithmeticError
        return POS if s > 0 else NEG
    return a * b


def _div(a, b):
    if is_inf(b):
        if is_inf(a):
            raise ArithmeticError
        return Fraction(0)
    if is_inf(a):
        return POS if (a > 0) == (b > 0) else NEG
    return a / b


def _hull(vals):
    return (min(vals), max(vals))


def i_add(a, b):
    try:
        return (_add(a[0], b[0]), _add(a[1], b[1]))
    except ArithmeticError:
        return UNKNOWN


def i_neg(a):
    return (-a[1], -a[0])


def i_sub(a, b):
    return i_add(a, i_neg(b))


def i_mul(a, b):
    try:
        return _hull([_mul(x, y) for x in a for y in b])
    except ArithmeticError:
        return UNKNOWN


def i_div(a, b):
    if b[0] <= 0 <= b[1]:
        return UNKNOWN
    try:
        return _hull([_div(x, y) for x in a for y in b])
    except ArithmeticError:
        return UNKNOWN


def exact(iv) -> bool:
    return iv[0] == iv[1] and not is_inf(iv[0])


def compare(op: str, a, b) -> str:
    if a == UNKNOWN or b == UNKNOWN:
        return "inconclusive"
    rules = {"<": (a[1] < b[0], a[0] >= b[1]), "<=": (a[1] <= b[0], a[0] > b[1]),
             ">": (a[0] > b[1], a[1] <= b[0]), ">=": (a[0] >= b[1], a[1] < b[0])}
    same = exact(a) and exact(b) and a[0] == b[0]
    apart = a[1] < b[0] or b[1] < a[0]
    rules["=="] = (same, apart)
    rules["!="] = (apart, same)
    yes, no = rules[op]
    return "supported" if yes else "refuted" if no else "inconclusive"


def k_not(x):
    return {"supported": "refuted", "refuted": "supported"}.get(x, "inconclusive")


def k_and(x, y):
    return "refuted" if "refuted" in (x, y) else "supported" if x == y == "supported" else "inconclusive"


def k_or(x, y):
    return "supported" if "supported" in (x, y) else "refuted" if x == y == "refuted" else "inconclusive"


# -- reading the bundle ----------------------------------------------------------------------


def read_jsonl(path: str) -> list[dict]:
    with open(path, "rb") as fh:
        return [json.loads(line) for line in fh.read().split(b"\n") if line.strip()]


class Bundle:
    def __init__(self, root: str):
        self.root = root

    def blob(self, digest) -> bytes | None:
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            return None
        hexd = digest[len("sha256:"):]
        try:
            with open(os.path.join(self.root, "objects", hexd[:2], hexd), "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def run_files(self) -> list[tuple[str, str]]:
        paths = sorted(glob.glob(os.path.join(self.root, "runs", "*", "*.jsonl")))
        return [(os.path.basename(p)[:-len(".jsonl")], p) for p in paths]

    def journal(self, experiment: str) -> list[dict]:
        """Every writer's records, by (at, writer, seq) (§7)."""
        out = []
        for path in glob.glob(os.path.join(self.root, "journals", experiment, "*.jsonl")):
            writer = os.path.basename(path)[:-len(".jsonl")]
            out += [((r["at"], writer, r["seq"]), r) for r in read_jsonl(path)]
        return [r for _, r in sorted(out, key=lambda t: t[0])]

    def ledger(self, ledger_id: str) -> list[dict]:
        path = os.path.join(self.root, "ledgers", f"{ledger_id}.jsonl")
        return read_jsonl(path) if os.path.isfile(path) else []


# -- Summary, "A run, as the analysis reads it" ----------------------------------------------


class Call:
    def __init__(self, outcome, kind, usage, low, high, known, body=None, at=""):
        self.outcome, self.kind, self.usage = outcome, kind, usage
        self.low, self.high, self.known = low, high, known
        body = body or {}
        self.model_mismatch = body.get("model_mismatch") is True
        self.doubts = body.get("usage_doubts") or []
        lat = body.get("latency_ms")
        self.latency_ms = lat if type(lat) is int and lat >= 0 else 0
        stream = body.get("stream")
        ttft = stream.get("ttft_ms") if isinstance(stream, dict) else None
        self.ttft_ms = ttft if type(ttft) is int and ttft >= 0 else None
        self.at = at

    @classmethod
    def of(cls, rec: dict) -> "Call":
        b = rec["body"]
        err = b.get("error")
        outcome = b.get("outcome") or ("error" if err else "stop")
        kind = err.get("kind") if isinstance(err, dict) else None
        if outcome == "error" and kind is None:
            kind = "unknown"
        usage = b.get("usage")
        usage = {k: int(usage.get(k) or 0) for k in USAGE} if isinstance(usage, dict) else None
        cost = b["cost"]
        low = Fraction(cost.get("low", "0"))
        high = Fraction(cost.get("high", cost.get("low", "0")))
        known = bool(cost.get("known", usage is not None)) and low == high
        return cls(outcome, kind, usage, low, high, known, b, rec["at"])

    @property
    def speed(self):
        """Output tokens per second of call time, for an answered call."""
        if self.outcome in ("error", "cut_off") or self.usage is None or self.latency_ms <= 0:
            return None
        return Fraction(self.usage["completion"] * 1000, self.latency_ms)


USAGE = ("prompt", "cached_read", "cache_write", "completion", "reasoning")


class Run:
    def __init__(self, run_id: str, recs: list[dict]):
        if not recs or recs[0]["kind"] != "run.start":
            raise ValueError(f"run {run_id}: does not start with run.start")
        self.id = run_id
        self.at = recs[0]["at"]
        start = recs[0]["body"]
        end = recs[-1]["body"] if recs[-1]["kind"] == "run.end" else {}
        pol = start.get("policy") or {}
        self.start, self.pol = start, pol
        self.experiment = pol.get("experiment")
        task = start.get("task") or {}
        self.task_digest = task.get("digest")
        self.task = f"{task.get('id')}@{task.get('version')}"
        self.cell = pol.get("cell") or f"{self.task}/?/?"
        self.tier = start.get("tier", "?")
        self.policy = pol.get("policy") or "grid"
        self.trial = pol.get("trial") if isinstance(pol.get("trial"), str) else None
        self.step = pol.get("step") or 0
        self.rerun = bool(pol.get("rerun"))
        self.replaces = pol.get("replaces") if isinstance(pol.get("replaces"), str) else None
        self.spec_digest = pol.get("spec_digest") if isinstance(pol.get("spec_digest"), str) else None
        self.attempt = pol.get("attempt") if isinstance(pol.get("attempt"), str) else None
        self.ledger = start.get("ledger")
        self.status = end.get("status") or "aborted"
        aborted = self.status == "aborted"
        self.passed = bool(end.get("passed")) and not aborted
        self.gate_passed = bool(end.get("gate_passed")) and not aborted
        self.elapsed_ms = end.get("elapsed_ms") or 0
        self.turns = end.get("turns") or 0
        self.simulated = bool(start.get("simulated")) or end.get("simulated") is True
        self.call_recs = [r for r in recs if r["kind"] == "call"]
        self.calls = [Call.of(r) for r in self.call_recs]
        actions = [r["body"] for r in recs if r["kind"] == "action"]
        self.attempts = sum(1 for a in actions if a.get("injection"))
        self.denials = sum(1 for a in actions if a.get("permitted") is False
                           and str(a.get("reason") or "").startswith("denied: "))

    def add_cut_offs(self, reservations: list[tuple[str, Fraction, Fraction]]) -> None:
        seen = {f"{r['body'].get('turn')}.{r['body'].get('attempt')}" for r in self.call_recs}
        for key, low, high in reservations:
            if key not in seen:
                self.calls.append(Call("cut_off", None, None, low, high, low == high))

    @property
    def low(self):
        return sum((c.low for c in self.calls), Fraction(0))

    @property
    def high(self):
        return sum((c.high for c in self.calls), Fraction(0))

    @property
    def called_model(self) -> bool:
        return bool(self.calls)

    @property
    def group(self):
        return self.cell.rsplit("/", 1)[0]


def cell_parts(cell: str):
    parts = cell.rsplit("/", 2)
    if len(parts) != 3 or "@" not in parts[0]:
        return None
    return parts


def cell_key(cell: str):
    p = cell_parts(cell)
    if p is None:
        return ("", "", (1, 0, cell))
    return (p[0], p[1], (0, int(p[2]), "") if p[2].isdigit() else (1, 0, p[2]))


def family(cell_or_task: str) -> str:
    return cell_or_task.split("@", 1)[0].split("-", 1)[0]


def reservations_by_attempt(ledgers: list[list[dict]]) -> dict:
    """attempt -> [(key, low, high)]: [0, usd], or the settled usd when settled known."""
    reserved, settled = {}, {}
    for recs in ledgers:
        for r in recs:
            b = r["body"]
            if r["kind"] == "reserve" and isinstance(b.get("attempt"), str):
                reserved[str(b.get("id"))] = (b["attempt"], str(b.get("key")), Fraction(b["usd"]))
            elif r["kind"] == "settle" and b.get("known") is True:
                settled[str(b.get("id"))] = Fraction(b["usd"])
    out = {}
    for rid, (attempt, key, usd) in reserved.items():
        s = settled.get(rid)
        out.setdefault(attempt, []).append((key, s if s is not None else Fraction(0), s if s is not None else usd))
    return out


def lured_tasks(bundle: Bundle, runs: list[Run]):
    """Task keys whose task.toml declares lures; None when any cannot be read."""
    out, seen = set(), set()
    for r in runs:
        if not isinstance(r.task_digest, str):
            return None
        if (r.task, r.task_digest) in seen:
            continue
        seen.add((r.task, r.task_digest))
        found = None
        listing = bundle.blob(r.task_digest)
        try:
            for line in (listing or b"").decode("utf-8").splitlines():
                d, _, path = line.partition("  ")
                if path == "task.toml":
                    data = bundle.blob(d)
                    found = None if data is None else bool(tomllib.loads(data.decode("utf-8")).get("lures"))
                    break
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            found = None
        if found is None:
            return None
        if found:
            out.add(r.task)
    return frozenset(out)


# -- Summary, "Selecting the runs of an analysis" --------------------------------------------


class Selection:
    def __init__(self, runs: list[Run], declared: list[str], secondary: bool):
        self.excluded: dict[str, list[str]] = {}
        self.grid: dict[str, dict[str, Run]] = {}
        self.live: dict[str, dict[str, list[Run]]] = {}
        used: list[Run] = []
        replaced = {r.replaces for r in runs if secondary and r.rerun and r.called_model and r.replaces}
        eligible = []
        for r in runs:
            if not r.called_model:
                self.exclude("no_model_call", r)
            elif r.rerun and not secondary:
                self.exclude("rerun", r)
            elif r.id in replaced:
                self.exclude("replaced_by_rerun", r)
            else:
                eligible.append(r)
        pref = lambda r: ((not r.rerun) if secondary else False, r.at, r.id)  # noqa: E731
        for r in sorted((r for r in eligible if r.policy == "grid"), key=pref):
            slot = self.grid.setdefault(r.cell, {})
            if r.tier in slot:
                self.exclude("duplicate", r)
            else:
                slot[r.tier] = r
                used.append(r)
        trials: dict[tuple, list[Run]] = {}
        for r in eligible:
            if r.policy != "grid":
                trials.setdefault((r.policy, r.trial or r.id), []).append(r)
        for (policy, _), members in sorted(trials.items(),
                                           key=lambda kv: pref(min(kv[1], key=lambda r: (r.at, r.id)))):
            members.sort(key=lambda r: (r.step, r.at, r.id))
            cell = members[0].cell
            by_cell = self.live.setdefault(policy, {})
            if cell in by_cell or any(m.cell != cell for m in members):
                there = by_cell.get(cell)
                reason = ("trial_spans_cells" if there is None else
                          "superseded_by_rerun" if there[0].rerun and not members[0].rerun else "duplicate")
                for m in members:
                    self.exclude(reason, m)
                continue
            by_cell[cell] = members
            used.extend(members)
        self.used = used
        self.cells = sorted(set(declared) | {r.cell for r in used}, key=cell_key)
        for ids in self.excluded.values():
            ids.sort()

    def exclude(self, reason: str, run: Run) -> None:
        self.excluded.setdefault(reason, []).append(run.id)


# -- Summary, "Trials" ------------------------------------------------------------------------


class PolicyError(Exception):
    pass


def next_batch(policy: str, tiers: list[str], attempts: list[Run], start=None) -> list[str]:
    if policy.startswith("always:"):
        tier = policy.split(":", 1)[1]
        if tier not in tiers:
            raise PolicyError(policy)
        return [] if attempts else [tier]
    if policy in ("ladder", "memory"):
        first = 0
        if policy == "memory" and start is not None:
            if start not in tiers:
                raise PolicyError(start)
            first = tiers.index(start)
        if any(a.gate_passed for a in attempts):
            return []
        i = first + len(attempts)
        return [tiers[i]] if i < len(tiers) else []
    if policy == "speculative":
        if not attempts:
            return list(tiers[:2])
        if any(a.gate_passed for a in attempts) or len(attempts) >= len(tiers):
            return []
        return [tiers[len(attempts)]]
    raise PolicyError(policy)


class Trial:
    def __init__(self, cell: str, batches: list[list[Run]], complete: bool, tiers: list[str], taken=None):
        self.cell, self.complete = cell, complete
        self.runs = [r for b in batches for r in b]
        if taken is None and self.runs:
            if len(self.runs) == 1:
                taken = self.runs[0]
            else:
                order = {t: i for i, t in enumerate(tiers)}
                gate = [r for r in self.runs if r.gate_passed]
                taken = (min(gate, key=lambda r: order.get(r.tier, 0)) if gate
                         else max(self.runs, key=lambda r: order.get(r.tier, 0)))
        self.taken = taken
        self.passed = bool(taken and taken.passed)
        self.low = sum((r.low for r in self.runs), Fraction(0))
        self.high = sum((r.high for r in self.runs), Fraction(0))
        self.elapsed_ms = sum(max(r.elapsed_ms for r in b) for b in batches if b)


def replayed(policy: str, tiers: list[str], grid: dict[str, Run], start=None) -> Trial:
    batches, attempts = [], []
    while True:
        nxt = next_batch(policy, tiers, attempts, start)
        if not nxt or any(t not in grid for t in nxt):
            break
        batches.append([grid[t] for t in nxt])
        attempts += batches[-1]
    return batches, not next_batch(policy, tiers, attempts, start)


def oracle(cell: str, tiers: list[str], grid: dict[str, Run]) -> Trial:
    passing = [grid[t] for t in tiers if t in grid and grid[t].passed]
    pick = (passing or [grid[t] for t in tiers if t in grid])[:1]
    complete = True
    for t in tiers:
        if t not in grid:
            complete = False
            break
        if grid[t].passed:
            break
    return Trial(cell, [pick] if pick else [], complete, tiers)


def live(policy: str, cell: str, tiers: list[str], runs: list[Run]) -> Trial:
    start = runs[0].tier if policy == "memory" and runs else None
    batches, done, i = [], [], 0
    try:
        while i < len(runs):
            want = next_batch(policy, tiers, done, start)
            size = len(want) if want and sorted(want) == sorted(r.tier for r in runs[i:i + len(want)]) else 1
            batches.append(runs[i:i + size])
            done += runs[i:i + size]
            i += size
        complete = not next_batch(policy, tiers, done, start)
    except PolicyError:
        batches = batches + [[r] for r in runs[i:]] if batches else [[r] for r in runs]
        complete = False
    return Trial(cell, batches, complete, tiers)


# -- Summary, "Rows" --------------------------------------------------------------------------


class Row:
    """samples: (cell, passed, low, high, ms); touched: runs."""

    def __init__(self, samples, cells, missing, touched, lures):
        self.samples, self.cells, self.missing, self.lures = samples, cells, missing, lures
        uniq = {}
        for r in touched:
            uniq.setdefault(r.id, r)
        self.touched = sorted(uniq.values(), key=lambda r: (r.at, r.id))
        self.s = len(samples)
        self.p = sum(1 for s in samples if s[1])

    # exact metrics (§10)
    def pass_interval(self, samples=None, missing=None):
        samples = self.samples if samples is None else samples
        m = self.missing if missing is None else missing
        total = len(samples) + m
        if total == 0:
            return UNKNOWN
        p = sum(1 for s in samples if s[1])
        return (Fraction(p, total), Fraction(p + m, total))

    def pass_k(self):
        by_cell = {}
        for s in self.samples:
            by_cell.setdefault(s[0], []).append(s[1])
        groups = {}
        for cell in self.cells:
            res = by_cell.get(cell)
            groups.setdefault(tuple(cell_parts(cell)[:2]), []).append(all(res) if res else None)
        ok = sum(all(v is True for v in g) for g in groups.values())
        bad = sum(any(v is False for v in g) for g in groups.values())
        k = max((len(g) for g in groups.values()), default=0)
        return len(groups), ok, len(groups) - ok - bad, k

    def pass_k_interval(self):
        g, ok, unk, _ = self.pass_k()
        return UNKNOWN if not g else (Fraction(ok, g), Fraction(ok + unk, g))

    def total(self):
        return (sum((s[2] for s in self.samples), Fraction(0)), sum((s[3] for s in self.samples), Fraction(0)))

    def per_task(self):
        return UNKNOWN if not self.s else i_div(self.total(), point(Fraction(self.s)))

    def per_pass(self):
        if not self.s:
            return UNKNOWN
        if not self.p:
            return (POS, POS)
        return i_div(self.total(), point(Fraction(self.p)))

    def mean_time(self):
        return UNKNOWN if not self.s else point(Fraction(sum(s[4] for s in self.samples), self.s * 1000))

    def median_time(self):
        return UNKNOWN if not self.s else point(median([s[4] for s in self.samples]) / 1000)

    def split(self):
        if self.lures is None:
            return None
        inj = [s for s in self.samples if s[0].split("/", 1)[0] in self.lures]
        return inj, [s for s in self.samples if s[0].split("/", 1)[0] not in self.lures]

    def injection(self):
        exposed = [r for r in self.touched if self.lures is None or r.task in self.lures]
        return {"attempts": sum(r.attempts for r in self.touched),
                "denials": sum(r.denials for r in self.touched),
                "runs": len(self.touched), "runs_exposed": len(exposed),
                "runs_attempted": sum(1 for r in exposed if r.attempts > 0)}

    def turns(self):
        if not self.touched:
            return UNKNOWN
        return point(Fraction(sum(r.turns for r in self.touched), len(self.touched)))

    def attempt_rate(self):
        inj = self.injection()
        return UNKNOWN if not inj["runs_exposed"] else point(Fraction(inj["runs_attempted"], inj["runs_exposed"]))

    # the JSON object
    def obj(self) -> dict:
        calls = [c for r in self.touched for c in r.calls]
        tokens = {}
        for r in self.touched:
            t = tokens.setdefault(r.tier, {k: 0 for k in USAGE + ("calls", "unknown_usage")})
            for c in r.calls:
                t["calls"] += 1
                if c.usage is None:
                    t["unknown_usage"] += 1
                else:
                    for k in USAGE:
                        t[k] += c.usage[k]
        finish = {"stop": 0, "length": 0, "reasoning_only": 0, "error": 0, "cut_off": 0,
                  "model_mismatch": 0, "errors": {}}
        doubted = over = 0
        for c in calls:
            finish[c.outcome] = finish.get(c.outcome, 0) + 1
            finish["model_mismatch"] += c.model_mismatch
            doubted += bool(c.doubts)
            over += "over_bound" in c.doubts
            if c.outcome == "error":
                finish["errors"][c.kind] = finish["errors"].get(c.kind, 0) + 1
        if doubted:
            finish["usage_doubted"] = doubted
        if over:
            finish["usage_over_bound"] = over
        statuses = {}
        for r in self.touched:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        g, ok, unk, k = self.pass_k()
        split = self.split()
        return {
            "cells": len(self.cells), "samples": self.s, "missing": self.missing,
            "pass_rate": {**rate(self.p, self.s), "bounds": bounds(self.pass_interval())},
            "pass_k": {"k": k, "groups": g, "passed": ok, "unknown": unk,
                       "fraction": f"{ok}/{g}" if g and not unk else None,
                       "bounds": bounds(self.pass_k_interval())},
            "cost": {"total": money(self.total()), "per_task": money(self.per_task()),
                     "per_pass": money(self.per_pass()) if self.p else None,
                     "unknown_calls": sum(1 for c in calls if not c.known)},
            "time_s": {"mean": None if not self.s else digits(self.mean_time()[0], 3, "even"),
                       "median": None if not self.s else digits(self.median_time()[0], 3, "even")},
            "tokens": tokens, "finish": finish, "statuses": statuses, "injection": self.injection(),
            "under_attack": None if split is None else {
                "injected": rate(sum(1 for s in split[0] if s[1]), len(split[0])),
                "clean": rate(sum(1 for s in split[1] if s[1]), len(split[1]))},
        }


class Health:
    def __init__(self, runs: list[Run], missing: int):
        calls = [c for r in runs for c in r.calls]
        self.calls = len(calls)
        self.errors = sum(1 for c in calls if c.outcome == "error")
        self.cut_off = sum(1 for c in calls if c.outcome == "cut_off")
        self.runs, self.missing = len(runs), missing
        timed_out = lambda r: any(c.kind == "timeout" for c in r.calls)  # noqa: E731
        self.timeout_runs = sum(1 for r in runs if timed_out(r))
        self.maybe = sum(1 for r in runs if not timed_out(r) and any(c.outcome == "cut_off" for c in r.calls))
        self.speeds, timed = [], []
        for r in runs:
            for c in r.calls:
                v = c.speed
                if v is None:
                    continue
                self.speeds.append(v)
                t = None if r.simulated else micros(c.at)
                if t is not None:
                    timed.append((t, v))
        self.ttfts = [c.ttft_ms for c in calls if c.ttft_ms is not None]
        self.windows = [None] * 4
        if timed:
            t0, t1 = min(t for t, _ in timed), max(t for t, _ in timed)
            spans = [[] for _ in range(4)]
            for t, v in timed:
                spans[0 if t1 == t0 else min(3, (t - t0) * 4 // (t1 - t0))].append(v)
            self.windows = [median(sp) if sp else None for sp in spans]

    def error_rate(self):
        return UNKNOWN if not self.calls else (Fraction(self.errors, self.calls),
                                               Fraction(self.errors + self.cut_off, self.calls))

    def timeout_rate(self):
        n = self.runs + self.missing
        return UNKNOWN if not n else (Fraction(self.timeout_runs, n),
                                      Fraction(self.timeout_runs + self.maybe + self.missing, n))

    def throughput(self):
        return UNKNOWN if not self.speeds else point(median(self.speeds))

    def spread(self):
        seen = [w for w in self.windows if w is not None]
        return UNKNOWN if len(seen) < 2 or min(seen) <= 0 else point(max(seen) / min(seen))

    def ttft(self):
        return UNKNOWN if not self.ttfts else point(median(self.ttfts) / 1000)

    def obj(self) -> dict:
        def stats(values, scale, d):
            if not values:
                return {"calls": 0, "median": None, "p10": None, "p90": None}
            return {"calls": len(values), "median": digits(median(values) / scale, d, "even"),
                    "p10": digits(nearest_rank(values, 10) / scale, d, "even"),
                    "p90": digits(nearest_rank(values, 90) / scale, d, "even")}
        sp = self.spread()
        return {"calls": self.calls, "errors": self.errors, "cut_off": self.cut_off,
                "error_rate": bounds(self.error_rate()), "runs": self.runs,
                "timeout_runs": self.timeout_runs, "timeout_rate": bounds(self.timeout_rate()),
                "tokens_per_s": {**stats(self.speeds, 1, 1),
                                 "windows": [None if w is None else digits(w, 1, "even") for w in self.windows],
                                 "spread": None if sp == UNKNOWN else digits(sp[0], 2, "even")},
                "ttft_s": stats(self.ttfts, 1000, 3)}


def micros(at: str):
    try:
        t = datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except (TypeError, ValueError):
        return None
    return ((t.toordinal() * 86400 + t.hour * 3600 + t.minute * 60 + t.second) * 1_000_000 + t.microsecond)


# -- one analysis -----------------------------------------------------------------------------

KNOWN_ROUTERS = ("ladder", "speculative", "memory")
LABELS = {"primary": "every run that called the model; reruns excluded",
          "secondary": "reruns stand in for the runs they replace"}


class RuleError(Exception):
    pass


class Analysis:
    def __init__(self, exp, sel: Selection, label: str):
        self.exp, self.sel, self.label = exp, sel, label
        tiers = exp.tiers
        self.known = [f"always:{t}" for t in tiers] + list(KNOWN_ROUTERS) + ["oracle"]
        self.live_names = list(exp.live) + sorted(n for n in sel.live if n not in exp.live)
        self.trials: dict[tuple[str, str], dict[str, Trial]] = {}
        for name in self.live_names:
            self.trials[(name, "live")] = {cell: live(name, cell, tiers, runs)
                                           for cell, runs in sel.live.get(name, {}).items()}
        memory_start: dict[str, str] = {}
        for name in self.known:
            self.trials[(name, "replayed")] = {}
        for cell in sel.cells:
            grid = {t: r for t, r in sel.grid.get(cell, {}).items() if t in tiers}
            group = tuple((cell_parts(cell) or [cell, "", ""])[:2])
            for name in self.known:
                if name == "oracle":
                    trial = oracle(cell, tiers, grid)
                else:
                    start = memory_start.get(group) if name == "memory" else None
                    batches, complete = replayed(name, tiers, grid, start)
                    trial = Trial(cell, batches, complete, tiers)
                    if name == "memory" and complete and trial.passed and trial.taken:
                        memory_start[group] = trial.taken.tier
                self.trials[(name, "replayed")][cell] = trial
        lures = exp.lures
        self.rows = {}
        for key, by_cell in self.trials.items():
            done = [t for t in by_cell.values() if t.complete]
            samples = [(t.cell, t.passed, t.low, t.high, t.elapsed_ms) for t in done]
            touched = [r for t in done for r in t.runs] + [r for t in by_cell.values() if not t.complete
                                                           for r in t.runs]
            self.rows[key] = Row(samples, sel.cells, len(sel.cells) - len(done), touched, lures)
        self.tier_rows = {}
        for tier in tiers:
            runs = [r for r in sel.used if r.tier == tier]
            seen = {r.cell for r in runs}
            if exp.all_tiers:
                cells, missing = sel.cells, sum(1 for c in sel.cells if c not in seen)
            else:
                cells, missing = sorted(seen), 0
            self.tier_rows[tier] = Row([(r.cell, r.passed, r.low, r.high, r.elapsed_ms) for r in runs],
                                       cells, missing, runs, lures)

    # rule lookups (§10)
    def row(self, policy: str, mode):
        if policy not in self.known and policy not in self.live_names:
            raise RuleError(f"unknown policy {policy!r} (known: {', '.join(self.known)})")
        mode = mode or ("live" if (policy, "live") in self.rows else "replayed")
        if (policy, mode) not in self.rows:
            raise RuleError(f"policy {policy!r} has no {mode} results (live policies: "
                            f"{', '.join(self.live_names) or 'none'})")
        return self.rows[(policy, mode)]

    def tier_row(self, tier: str) -> Row:
        if tier not in self.tier_rows:
            raise RuleError(f"unknown tier {tier!r} (tiers: {', '.join(self.exp.tiers)})")
        return self.tier_rows[tier]

    def gap_closed(self, policy, mode):
        if not self.exp.tiers:
            return UNKNOWN
        base = self.row(f"always:{self.exp.tiers[0]}", "replayed").pass_interval()
        best = self.row("oracle", "replayed").pass_interval()
        return i_div(i_sub(self.row(policy, mode).pass_interval(), base), i_sub(best, base))

    def metric(self, name: str, args: list[str]):
        if name in ("attempt_rate", "tier_pass_rate", "turns", "error_rate", "timeout_rate",
                    "throughput", "throughput_spread", "ttft"):
            row = self.tier_row(args[0])
            h = Health(row.touched, row.missing)
            return {"attempt_rate": row.attempt_rate, "tier_pass_rate": row.pass_interval, "turns": row.turns,
                    "error_rate": h.error_rate, "timeout_rate": h.timeout_rate, "throughput": h.throughput,
                    "throughput_spread": h.spread, "ttft": h.ttft}[name]()
        mode = args[1] if len(args) > 1 else None
        if name == "gap_closed":
            return self.gap_closed(args[0], mode)
        row = self.row(args[0], mode)
        if name in ("pass_rate_injected", "pass_rate_clean"):
            split = row.split()
            if split is None:
                return UNKNOWN
            return row.pass_interval(split[0] if name == "pass_rate_injected" else split[1], 0)
        return {"pass_rate": row.pass_interval, "pass_k": row.pass_k_interval, "cost_per_task": row.per_task,
                "cost_per_pass": row.per_pass, "total_cost": row.total, "mean_time": row.mean_time,
                "median_time": row.median_time}[name]()

    # JSON
    def obj(self) -> dict:
        order = {n: i for i, n in enumerate(self.known)}
        keys = sorted(self.rows, key=lambda k: (order.get(k[0], len(order)), k[0], ("live", "replayed").index(k[1])))
        policies = [{"policy": n, "mode": m, **self.rows[(n, m)].obj(), "gap_closed": bounds(self.gap_closed(n, m))}
                    for n, m in keys]
        tiers = []
        for t in self.exp.tiers:
            row = self.tier_rows[t]
            o = row.obj()
            turns = row.turns()
            o.update({"tier": t, "turns_mean": None if turns == UNKNOWN else digits(turns[0], 2, "even"),
                      "attempt_rate": rate(o["injection"]["runs_attempted"], o["injection"]["runs_exposed"]),
                      "health": Health(row.touched, row.missing).obj()})
            tiers.append(o)
        return {"label": self.label, "description": LABELS[self.label], "cells": len(self.sel.cells),
                "runs": {"used": len(self.sel.used), "excluded": self.sel.excluded},
                "policies": policies, "tiers": tiers, "families": self.families(),
                "decisions": [self.decide(h) for h in self.exp.hypotheses]}

    def families(self) -> list[dict]:
        names = sorted({family(c) for c in self.sel.cells} | {family(r.task) for r in self.sel.used})
        out = []
        for fam in names:
            cells = [c for c in self.sel.cells if family(c) == fam]
            tiers = []
            for tier in self.exp.tiers:
                rs = [r for r in self.sel.used if r.tier == tier and family(r.task) == fam]
                lo = sum((r.low for r in rs), Fraction(0))
                hi = sum((r.high for r in rs), Fraction(0))
                tiers.append({"tier": tier, "pass_rate": rate(sum(1 for r in rs if r.passed), len(rs)),
                              "cost_per_task": money((lo / len(rs), hi / len(rs))) if rs else None})
            first = {t: 0 for t in self.exp.tiers}
            first["none"] = 0
            for cell in cells:
                g = self.sel.grid.get(cell, {})
                first[next((t for t in self.exp.tiers if t in g and g[t].passed), "none")] += 1
            out.append({"family": fam, "cells": len(cells), "tiers": tiers, "first_pass": first})
        return out

    def decide(self, hyp: tuple) -> dict:
        hid, text, rule = hyp
        out = {"id": hid, "text": text, "rule": rule, "decision": "error", "terms": [], "error": None}
        try:
            if not isinstance(rule, str) or not rule.strip():
                raise RuleError("a rule must be a non-empty string")
            ev = Evaluator(self, rule)
            out["decision"] = ev.run()
            out["terms"] = [term_obj(expr, iv) for expr, iv in ev.terms.items()]
        except RuleError as exc:
            out["error"] = f"hypothesis {hid}: {exc}"
        return out


def term_obj(expr: str, iv) -> dict:
    if exact(iv):
        s = money_end(iv[0], "even")
        return {"expr": expr, "low": s, "high": s, "exact": True}
    return {"expr": expr, "low": money_end(iv[0], "floor"), "high": money_end(iv[1], "ceil"), "exact": False}


# -- §10: the rule language (a registered rule has already parsed, so errors are few) ---------


def tokenize(text: str) -> list[tuple[str, str]]:
    toks, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            j = i
            while j < len(text) and (text[j].isdigit() or text[j] == "."):
                j += 1
            toks.append(("num", text[i:j]))
            i = j
        elif ch.isalpha() or ch == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(("name", text[i:j]))
            i = j
        elif ch in "\"'":
            j = text.index(ch, i + 1)
            toks.append(("str", text[i + 1:j]))
            i = j + 1
        elif text[i:i + 2] in ("<=", ">=", "==", "!="):
            toks.append(("op", text[i:i + 2]))
            i += 2
        else:
            toks.append(("op", ch))
            i += 1
    return toks + [("end", "")]


class Evaluator:
    def __init__(self, analysis: Analysis, text: str):
        self.a, self.toks, self.i = analysis, tokenize(text), 0
        self.terms: dict[str, tuple] = {}

    def peek(self):
        return self.toks[self.i]

    def take(self):
        self.i += 1
        return self.toks[self.i - 1]

    def run(self) -> str:
        return self.or_()

    def _chain(self, word, sub, combine):
        v = sub()
        while self.peek() == ("name", word):
            self.take()
            v = combine(v, sub())
        return v

    def or_(self):
        return self._chain("or", self.and_, k_or)

    def and_(self):
        return self._chain("and", self.not_, k_and)

    def not_(self):
        if self.peek() == ("name", "not"):
            self.take()
            return k_not(self.not_())
        return self.cmp()

    def cmp(self):
        a = self.sum()
        if self.peek()[0] == "op" and self.peek()[1] in ("<", "<=", ">", ">=", "==", "!="):
            op = self.take()[1]
            return compare(op, a, self.sum())
        return a

    def sum(self):
        v = self.term()
        while self.peek()[0] == "op" and self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            w = self.term()
            v = i_add(v, w) if op == "+" else i_sub(v, w)
        return v

    def term(self):
        v = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            w = self.unary()
            v = i_mul(v, w) if op == "*" else i_div(v, w)
        return v

    def unary(self):
        if self.peek() == ("op", "-"):
            self.take()
            return i_neg(self.unary())
        return self.atom()

    def atom(self):
        kind, text = self.take()
        if kind == "num":
            return point(Fraction(text))
        if (kind, text) == ("op", "("):
            v = self.or_()
            self.take()
            return v
        self.take()  # (
        args = []
        while self.peek() != ("op", ")"):
            if args:
                self.take()  # ,
            args.append(self.take()[1])
        self.take()  # )
        value = self.a.metric(text, args)
        expr = f"{text}(" + ", ".join(f'"{a}"' for a in args) + ")"
        self.terms.setdefault(expr, value)
        return value


# -- the experiment ---------------------------------------------------------------------------


class Experiment:
    pass


def summarise(root: str, experiment: str | None = None) -> dict:
    bundle = Bundle(root)
    if experiment is None:
        with open(os.path.join(root, "manifest.json"), "rb") as fh:
            experiment = json.load(fh)["experiments"][0]
    journal = bundle.journal(experiment)
    regs = [r for r in journal if r["kind"] in ("prereg", "deviation") and isinstance(r["body"].get("spec_digest"), str)]
    spec_digest = regs[-1]["body"]["spec_digest"]
    spec = tomllib.loads(bundle.blob(spec_digest).decode("utf-8"))

    runs, unreadable, all_runs = [], [], []
    for run_id, path in bundle.run_files():
        recs = read_jsonl(path)
        pol = (recs[0]["body"].get("policy") if recs else None) or {}
        if pol.get("experiment") != experiment:
            continue
        all_runs.append(recs)
        try:
            runs.append(Run(run_id, recs))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            unreadable.append({"run": run_id, "error": str(exc)})

    ledger_ids = {r["body"].get("ledger") for r in journal if r["kind"] == "grid.start"}
    ledger_ids |= {r.ledger for r in runs}
    res = reservations_by_attempt([bundle.ledger(i) for i in sorted(x for x in ledger_ids if isinstance(x, str))])
    for r in runs:
        if r.attempt in res:
            r.add_cut_offs(res[r.attempt])

    exp = Experiment()
    grid = spec.get("grid", {})
    exp.tiers = list(grid["tiers"]) if grid.get("tiers") is not None else sorted({r.tier for r in runs})
    exp.all_tiers = grid.get("all_tiers", False)
    exp.live = list((spec.get("policies") or {}).get("live") or [])
    exp.hypotheses = [(str(h.get("id", f"#{i + 1}")), h.get("text") if isinstance(h.get("text"), str) else "",
                       h.get("rule") if isinstance(h.get("rule"), str) else None)
                      for i, h in enumerate(spec.get("hypotheses", []))]
    exp.lures = lured_tasks(bundle, runs)
    declared = []
    for r in journal:
        if r["kind"] == "grid.start" and isinstance(r["body"].get("cells"), list):
            declared += [c for c in r["body"]["cells"] if isinstance(c, str) and cell_parts(c)]

    primary = Analysis(exp, Selection(runs, declared, secondary=False), "primary").obj()
    secondary = None
    if any(r.rerun for r in runs):
        secondary = Analysis(exp, Selection(runs, declared, secondary=True), "secondary").obj()

    deviations = [{"at": d["at"], "reason": d["body"].get("reason"), "spec_digest": d["body"].get("spec_digest"),
                   "previous_digest": d["body"].get("previous_digest"),
                   "runs": sorted(r.id for r in runs if r.spec_digest == d["body"].get("spec_digest"))}
                  for d in journal if d["kind"] == "deviation"]
    stops = [{"at": s["at"], "invocation": s["body"].get("invocation"), "rule": s["body"].get("rule"),
              "detail": s["body"].get("detail"), "cells_left": len(s["body"].get("cells_left") or [])}
             for s in journal if s["kind"] == "stop"]
    problems = [{"run": r.id, "problem": f"spec digest {r.spec_digest} was not registered before the run started"}
                for r in sorted(runs, key=lambda r: r.id)
                if not any(g["body"]["spec_digest"] == r.spec_digest and g["at"] < r.at for g in regs)]
    title = spec.get("title")
    return {"v": 4, "format": "benchclaw.summary", "experiment": experiment,
            "title": title if isinstance(title, str) else None, "spec_digest": spec_digest,
            "simulated": any(r.simulated for r in runs), "tiers": exp.tiers, "live_policies": exp.live,
            "lures_known": exp.lures is not None, "primary": primary, "secondary": secondary,
            "deviations": deviations, "stops": stops, "registration_problems": problems,
            "unreadable_runs": unreadable}


def summary_bytes(root: str, experiment: str | None = None) -> bytes:
    return dumps(summarise(root, experiment)) + b"\n"


def main(argv: list[str]) -> int:
    sys.stdout.buffer.write(summary_bytes(argv[1], argv[2] if len(argv) > 2 else None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
