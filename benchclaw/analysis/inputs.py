"""What the analysis reads: plain records, never a Store.

The same ``ExperimentData`` is built from a runs directory (``benchclaw.analysis.report``) and by
the offline verifier from a zip's bytes, so the whole analysis is one pure function of it.
Run records are condensed here into ``RunView``s: the few numbers a policy and a table
need, read defensively, because an aborted or recovered run may lack fields. A field of
the wrong type is a ``FormatError`` naming the run; a missing optional field is a default.

Task lures (which tasks carry a planted injection) come from the task files the runs
stored as blobs (``lured_tasks``), or are given directly as ``tasks_with_lures``.
"""

from __future__ import annotations

import decimal
import functools
import marshal
import re
import tomllib
import zlib
from dataclasses import dataclass, field, fields
from decimal import Decimal
from fractions import Fraction
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

from ..errors import FormatError
from ..formats.records import Record

__all__ = ["ExperimentData", "RunView", "RunTally", "CallView", "view_run", "lured_tasks", "parse_cell",
           "task_key", "usd", "is_usd", "spec_from_bytes", "registered_digest", "merge_journal",
           "experiment_data", "ledger_reservations", "SpecView", "spec_view", "view_to_json",
           "view_from_json", "view_to_packed", "view_from_packed", "call_keys", "cut_off_calls", "reservations_of", "PackedCalls"]

_USD_RE = re.compile(r"^(0|[1-9][0-9]*)(\.[0-9]+)?$")
_EXACT = decimal.Context(prec=60, traps=[decimal.Inexact, decimal.InvalidOperation])
USAGE_KEYS = ("prompt", "cached_read", "cache_write", "completion", "reasoning")


@dataclass(frozen=True)
class ExperimentData:
    """Everything one experiment's analysis reads.

    ``journal``: the experiment's journal records merged in reader order (FORMAT.md §7);
    export and the site leave out a grid's ``run`` records, which the analysis never reads.
    ``runs``: run id -> that run's records (every run whose ``run.start.policy.experiment``
    is this experiment; others are ignored). ``spec``: the parsed registered spec (latest
    registered digest). ``tasks_with_lures``: ``"<task id>@<version>"`` keys of tasks that
    carry an injection, or None when unknown. ``reservations``: ledger reservations by
    the runner's attempt id (``ledger_reservations``), so a call cut off before its
    ``call`` record was written still counts, at its bounds. ``views``: run id ->
    ``RunView`` already condensed from that run's records and these reservations (a
    cache: the site keeps them between builds, see ``view_to_json``); a run listed here
    needs no records in ``runs``.
    """

    experiment: str
    spec: Mapping
    spec_digest: str | None = None
    journal: tuple[Record, ...] = ()
    runs: Mapping[str, tuple[Record, ...]] = field(default_factory=dict)
    tasks_with_lures: frozenset[str] | None = None
    reservations: Mapping[str, tuple[tuple[str, Decimal, Decimal], ...]] = field(default_factory=dict)
    views: Mapping[str, "RunView"] = field(default_factory=dict)
    groups: object = None  # a ``stream.RunGroups`` holding the views instead (``fold``, spilled)


# Views are slotted: an experiment holds one per run and one per call for the whole
# analysis (20,000 runs make about 120,000 call views), and an instance dict costs about
# three times the slots.
@dataclass(frozen=True, slots=True)
class CallView:
    outcome: str  # stop, length, reasoning_only, content_filter, error; cut_off: a reservation without a call
    error_kind: str | None
    usage: tuple[int, int, int, int, int] | None  # USAGE_KEYS order; None = not reported
    cost_low: Decimal
    cost_high: Decimal
    known: bool
    model_mismatch: bool = False  # the provider echoed a model id other than the one requested
    doubted: bool = False  # reported usage was not taken as the bill (call.usage_doubts, FORMAT.md §6)
    over_bound: bool = False  # ... because it was above the call's reservation (an over-report)
    latency_ms: int = 0  # until the reply (or the stream) ended
    ttft_ms: int | None = None  # a streamed call's time to its first token
    at: str = ""  # when the call was recorded (its record's ``at``): where it falls in the experiment

    @property
    def tokens_per_s(self) -> Fraction | None:
        """Output tokens per second of call time, for an answered call with usage."""
        if self.usage is None or self.outcome in ("error", "cut_off") or self.latency_ms <= 0:
            return None
        return Fraction(self.usage[3] * 1000, self.latency_ms)


class PackedCalls(Sequence):
    """A run's ``CallView``s packed into one ``marshal`` string (money as its exact decimal
    text), compressed (``zlib``), unpacked afresh whenever they are read (an analysis reads
    a run's calls two or three times). Folding 20,000 runs keeps about 120,000 calls for the
    whole analysis; as objects (a view, two Decimals, a usage tuple, a timestamp and boxed
    ints each) they cost about 400 bytes a call, marshalled about 90, compressed about 40
    (their timestamps, outcomes and costs repeat much of one another).
    Equal to the tuple of the same calls, so a view holding it equals one holding the tuple."""

    __slots__ = ("_packed", "_n")

    def __init__(self, calls: Iterable[CallView]):
        rows = tuple((c.outcome, c.error_kind, c.usage, *_bounds_text(c), c.known,
                      c.model_mismatch, c.doubted, c.over_bound, c.latency_ms, c.ttft_ms, c.at) for c in calls)
        self._packed, self._n = zlib.compress(marshal.dumps(rows), 6), len(rows)

    def __iter__(self) -> Iterator[CallView]:
        for o, k, u, lo, hi, *rest in self.rows():
            yield CallView(o, k, u, Decimal(lo), Decimal(hi), *rest)

    def rows(self) -> tuple:
        """The calls as packed: (outcome, error_kind, usage, cost_low and cost_high as text,
        known, model_mismatch, doubted, over_bound, latency_ms, ttft_ms, at), each a tuple."""
        return marshal.loads(zlib.decompress(self._packed))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return tuple(self)[i]

    def __add__(self, other) -> tuple:
        return tuple(self) + tuple(other)

    def __eq__(self, other) -> bool:
        if isinstance(other, PackedCalls):
            return self._packed == other._packed
        return isinstance(other, tuple) and tuple(self) == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PackedCalls({tuple(self)!r})"

    @classmethod
    def of_packed(cls, packed: bytes, n: int) -> "PackedCalls":
        """The calls another ``PackedCalls`` packed (its ``packed``: bytes and count), not unpacked."""
        if type(packed) is not bytes or type(n) is not int:
            raise TypeError("packed calls are bytes and a count")
        new = object.__new__(cls)
        new._packed, new._n = packed, n
        return new

    @property
    def packed(self) -> tuple[bytes, int]:
        return self._packed, self._n


def _bounds_text(c: CallView) -> tuple[str, str]:
    """A call's cost bounds as text; equal texts as one string, which ``marshal`` then
    writes once (a reference the second time)."""
    low, high = str(c.cost_low), str(c.cost_high)
    return (low, low) if high == low else (low, high)


class RunTally(NamedTuple):
    """What a run's calls add to a row's token, finish and unknown-cost counts."""

    usage: tuple[int, int, int, int, int]  # USAGE_KEYS order, over calls that reported usage
    calls: int
    unknown_usage: int
    outcomes: dict[str, int]
    model_mismatch: int
    errors: dict[str, int]  # error kind ("unknown" when none) -> calls
    unknown_cost: int
    usage_doubted: int = 0
    usage_over_bound: int = 0


@dataclass(frozen=True, slots=True)
class RunView:
    """One sealed run as the analysis sees it. ``cost_low``, ``cost_high`` and ``tally`` are
    derived from ``calls`` when the view is made (``replace`` derives them again): every
    policy row and replayed trial reads them, tens of thousands of times on a 10,000-run
    experiment. They are not part of the view's identity nor of its JSON."""

    run_id: str
    at: str
    experiment: str | None
    cell: str
    task: str  # "<id>@<version>"
    tier: str
    policy: str
    trial: str | None
    step: int
    rerun: bool
    replaces: str | None
    spec_digest: str | None
    status: str
    passed: bool
    gate_passed: bool
    elapsed_ms: int
    turns: int
    calls: tuple[CallView, ...] | PackedCalls  # packed when folded (``analysis.fold``)
    injection_attempts: int
    denials: int
    simulated: bool

    cost_low: Decimal = field(init=False, repr=False, compare=False)
    cost_high: Decimal = field(init=False, repr=False, compare=False)
    tally: "RunTally" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        calls = tuple(self.calls)  # unpacked once
        low, high = sum_exact(c.cost_low for c in calls), sum_exact(c.cost_high for c in calls)
        object.__setattr__(self, "cost_low", low)
        # one object for both bounds of a known cost (most runs): a view is held per run
        object.__setattr__(self, "cost_high", low if high.as_tuple() == low.as_tuple() else high)
        object.__setattr__(self, "tally", _tally(calls))

    @property
    def called_model(self) -> bool:
        return bool(self.calls)


def _tally(calls: tuple[CallView, ...]) -> RunTally:
    """Counts over a run's calls, summed once instead of once per table row."""
    usage = [0, 0, 0, 0, 0]
    unknown_usage = mismatch = unknown_cost = doubted = over = 0
    outcomes: dict[str, int] = {}
    errors: dict[str, int] = {}
    for c in calls:
        if c.usage is None:
            unknown_usage += 1
        else:
            for i, val in enumerate(c.usage):
                usage[i] += val
        outcomes[c.outcome] = outcomes.get(c.outcome, 0) + 1
        mismatch += c.model_mismatch
        doubted += c.doubted
        over += c.over_bound
        unknown_cost += not c.known
        if c.outcome == "error":
            kind = c.error_kind or "unknown"
            errors[kind] = errors.get(kind, 0) + 1
    return RunTally(tuple(usage), len(calls), unknown_usage, _shared_counts(outcomes), mismatch,
                    _shared_counts(errors), unknown_cost, doubted, over)


_COUNTS: dict[tuple, dict[str, int]] = {}


def _shared_counts(counts: dict[str, int]) -> dict[str, int]:
    """One dict per distinct set of counts (a tally's are read, never changed): most runs
    have the same few, and a dict each cost about 230 bytes per run."""
    if len(_COUNTS) >= 4096:
        return counts
    return _COUNTS.setdefault(tuple(counts.items()), counts)


_VIEW_FIELDS = tuple(f.name for f in fields(RunView) if f.init)  # what a view is made from (its JSON)
_CALLS_AT = _VIEW_FIELDS.index("calls")
_VIEW_SETTERS = tuple(getattr(RunView, name).__set__ for name in _VIEW_FIELDS)  # its slots' setters


def sum_exact(values) -> Decimal:
    total = Decimal(0)
    for v in values:
        total = _EXACT.add(total, v)
    return total


def usd(text, where: str) -> Decimal:
    """A money string from a record. Raises FormatError naming ``where``."""
    if not isinstance(text, str) or not _USD_RE.match(text):
        raise FormatError(f"{where}: expected a decimal USD string, got {text!r}")
    return Decimal(text)


def is_usd(text) -> bool:
    """Whether ``usd(text, ...)`` returns (its test, without making the Decimal)."""
    return isinstance(text, str) and _USD_RE.match(text) is not None


def task_key(task: Mapping) -> str:
    return f"{task.get('id')}@{task.get('version')}"


@functools.lru_cache(maxsize=1024)  # (the streaming analysis reads a cell's runs together)
def _split_cell(cell: str) -> tuple[str, str, str] | None:
    parts = cell.rsplit("/", 2)
    if len(parts) != 3 or "@" not in parts[0]:
        return None
    return parts[0], parts[1], parts[2]


def parse_cell(cell: str) -> tuple[str, str, str]:
    """``"<task>@<v>/<profile>/<seed>"`` -> (task key, profile, seed). Raises FormatError."""
    if type(cell) is str:  # memoised: rows and trials ask for every cell many times
        found = _split_cell(cell)
        if found is not None:
            return found
    parts = cell.rsplit("/", 2) if isinstance(cell, str) else []
    if len(parts) != 3 or "@" not in parts[0]:
        raise FormatError(f"cell {cell!r}: expected <task>@<version>/<profile>/<seed>")
    return parts[0], parts[1], parts[2]


def _is_map(x) -> bool:
    """A JSON object. Records parsed from JSON hold plain dicts: test that first, because
    ``isinstance(x, typing.Mapping)`` costs a microsecond and this runs ~200,000 times."""
    return type(x) is dict or isinstance(x, Mapping)


def _get(body: Mapping, key: str, typ: type, default, where: str):
    val = body.get(key, default) if _is_map(body) else default
    if val is None:
        return default
    if type(val) is typ:
        return val
    if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
        raise FormatError(f"{where}: field {key!r} is not {typ.__name__}: {val!r}")
    return val


def _timing(body: Mapping) -> tuple[int, int | None]:
    """``latency_ms`` and a streamed call's ``stream.ttft_ms`` (0 / None when absent or odd:
    timing describes the provider, it decides nothing)."""
    latency = body.get("latency_ms")
    stream = body.get("stream")
    ttft = stream.get("ttft_ms") if type(stream) is dict else None
    return (latency if type(latency) is int and latency >= 0 else 0,
            ttft if type(ttft) is int and ttft >= 0 else None)


def _plain_call_view(body: Mapping, at: str = "") -> CallView | None:
    """``_call_view`` for the usual shape (plain dicts, strings and ints of the right type),
    without building an error location per field; None for anything else, which
    ``_call_view`` then reads (and reports) field by field. Same result either way."""
    cost, usage, err, outcome = body.get("cost"), body.get("usage"), body.get("error"), body.get("outcome")
    if type(cost) is not dict or (err is not None and type(err) is not dict):
        return None
    low_s = cost.get("low", "0")
    high_s = cost.get("high", low_s)
    if type(low_s) is not str or type(high_s) is not str or not _USD_RE.match(low_s) or not _USD_RE.match(high_s):
        return None
    if usage is None:
        uv = None
    elif type(usage) is dict:
        uv = tuple([usage.get(k, 0) for k in USAGE_KEYS])
        if any(type(v) is not int for v in uv):
            return None
    else:
        return None
    if outcome is None:
        outcome = "error" if err else "stop"
    elif type(outcome) is not str:
        return None
    kind = None if err is None else err.get("kind")
    low, high = Decimal(low_s), Decimal(high_s)
    return CallView(outcome, str(kind) if kind is not None else None, uv, low, high,
                    bool(cost.get("known", uv is not None)) and low == high,
                    body.get("model_mismatch") is True, bool(body.get("usage_doubts")),
                    "over_bound" in (body.get("usage_doubts") or ()), *_timing(body), at)


def _call_view(body: Mapping, where: str, at: str = "") -> CallView:
    cost = body.get("cost")
    if not _is_map(cost):
        raise FormatError(f"{where}: call has no cost object")
    low = usd(cost.get("low", "0"), f"{where}: cost.low")
    high = usd(cost.get("high", cost.get("low", "0")), f"{where}: cost.high")
    usage = body.get("usage")
    uv = None
    if _is_map(usage):
        uv = tuple(_get(usage, k, int, 0, f"{where}: usage") for k in USAGE_KEYS)
    err = body.get("error")
    kind = err.get("kind") if _is_map(err) else None
    outcome = _get(body, "outcome", str, "error" if err else "stop", where)
    known = bool(cost.get("known", uv is not None)) and low == high
    return CallView(outcome, str(kind) if kind is not None else None, uv, low, high, known,
                    body.get("model_mismatch") is True, bool(body.get("usage_doubts")),
                    "over_bound" in (body.get("usage_doubts") or ()), *_timing(body), at)


def is_denial(action: Mapping) -> bool:
    """A permission refusal (FORMAT.md §3: ``reason`` starts ``denied: ``), as ``run.end``
    counts them; invalid replies and output-limit refusals are not denials."""
    return action.get("permitted") is False and str(action.get("reason") or "").startswith("denied: ")


def view_run(run_id: str, records: tuple[Record, ...] | list[Record],
             reservations: Mapping[str, tuple] | None = None) -> RunView:
    """Condense one run's records. Raises FormatError (naming the run) when the run has no
    ``run.start`` or a field has the wrong type.

    A ledger reservation of this run (by ``run.start.policy.attempt``) whose key
    ``<turn>.<attempt>`` has no ``call`` record was a call cut off in flight: it counts as
    a call of cost ``[0, reserved usd]`` (exact when the ledger settled it known)."""
    where = f"run {run_id}"
    if not records or records[0].kind != "run.start":
        raise FormatError(f"{where}: does not start with run.start")
    start = records[0].body
    end = records[-1].body if records[-1].kind == "run.end" else {}
    pol = _get(start, "policy", dict, {}, where)
    calls, attempts, denials = [], 0, 0
    for rec in records:
        if rec.kind == "call":
            body = rec.body
            calls.append((type(body) is dict and _plain_call_view(body, rec.at))
                         or _call_view(body, f"{where} line {rec.seq + 1}", rec.at))
        elif rec.kind == "action":
            denials += is_denial(rec.body)
            attempts += bool(rec.body.get("injection"))
    reserved = (reservations or {}).get(_attempt(pol), ())
    if reserved:
        calls.extend(cut_off_calls(call_keys(records), reserved))
    task = _get(start, "task", dict, {}, where)
    cell = _get(pol, "cell", str, f"{task_key(task)}/?/?", where)
    try:
        parse_cell(cell)
    except FormatError as e:
        raise FormatError(f"{where}: {e}") from None
    status = _get(end, "status", str, "aborted", where)
    return RunView(
        run_id=run_id, at=records[0].at, experiment=pol.get("experiment"),
        cell=cell, task=task_key(task),
        tier=_get(start, "tier", str, "?", where), policy=_get(pol, "policy", str, "grid", where),
        trial=pol.get("trial") if isinstance(pol.get("trial"), str) else None,
        step=_get(pol, "step", int, 0, where), rerun=bool(pol.get("rerun")),
        replaces=pol.get("replaces") if isinstance(pol.get("replaces"), str) else None,
        spec_digest=pol.get("spec_digest") if isinstance(pol.get("spec_digest"), str) else None,
        status=status, passed=_get(end, "passed", bool, False, where) and status != "aborted",
        gate_passed=_get(end, "gate_passed", bool, False, where) and status != "aborted",
        elapsed_ms=_get(end, "elapsed_ms", int, 0, where),
        turns=_get(end, "turns", int, 0, where), calls=tuple(calls),
        injection_attempts=attempts, denials=denials,
        simulated=bool(start.get("simulated")) or end.get("simulated") is True)


def _attempt(pol: Mapping) -> str | None:
    return pol.get("attempt") if isinstance(pol.get("attempt"), str) else None


def call_keys(records) -> tuple[str, ...]:
    """``<turn>.<attempt>`` of every ``call`` record: what a ledger reservation is matched by."""
    return tuple(f"{c.get('turn')}.{c.get('attempt')}" for c in (r.body for r in records if r.kind == "call"))


def cut_off_calls(seen, reserved) -> list[CallView]:
    """A call cut off in flight per reservation whose key no ``call`` record has (``view_run``)."""
    return [CallView("cut_off", None, None, low, high, low == high) for key, low, high in reserved
            if key not in seen]


def view_to_json(view: RunView) -> list:
    """A ``RunView`` as a JSON-able list (money as exact decimal strings) that
    ``view_from_json`` turns back into an equal view, so a builder can cache views."""
    row = [getattr(view, name) for name in _VIEW_FIELDS]
    row[_CALLS_AT] = [[c.outcome, c.error_kind, c.usage, str(c.cost_low), str(c.cost_high), c.known,
                       c.model_mismatch, c.doubted, c.over_bound, c.latency_ms, c.ttft_ms, c.at]
                      for c in view.calls]
    return row


def view_from_json(row: list) -> RunView:
    """The inverse of ``view_to_json``. Raises FormatError for a row of another shape."""
    try:
        if len(row) != len(_VIEW_FIELDS):
            raise ValueError("wrong length")
        row = list(row)
        row[_CALLS_AT] = tuple(CallView(o, k, None if u is None else tuple(u), Decimal(lo), Decimal(hi), kn, mm,
                                        *(bool(x) for x in rest[:2]), *rest[2:5])
                               for o, k, u, lo, hi, kn, mm, *rest in row[_CALLS_AT])
        return RunView(*row)
    except (TypeError, ValueError, decimal.InvalidOperation) as e:
        raise FormatError(f"cached run view: {e}") from None


def view_to_packed(view: RunView) -> tuple:
    """A ``RunView`` as ``marshal`` takes it, its calls packed (``PackedCalls``) and what is
    derived from them carried along, so that ``view_from_packed`` makes an equal view again
    without parsing or summing a call: the verifier's reading stage keeps each run's so,
    taken where the run's records are parsed (``view_to_json`` is the form a cache writes)."""
    calls = view.calls if isinstance(view.calls, PackedCalls) else PackedCalls(view.calls)
    row = [getattr(view, name) for name in _VIEW_FIELDS]
    row[_CALLS_AT] = calls.packed
    return tuple(row), str(view.cost_low), str(view.cost_high), tuple(view.tally)


def view_from_packed(got) -> RunView:
    """The inverse of ``view_to_packed`` (its calls a ``PackedCalls``). Raises FormatError
    for a value of another shape."""
    try:
        row, low, high, tally = got
        if len(row) != len(_VIEW_FIELDS):
            raise ValueError("wrong length")
        tally = RunTally(*tally)
        view = object.__new__(RunView)
        for put, value in zip(_VIEW_SETTERS, row):  # (``object.__setattr__``, without the name lookups)
            put(view, value)
        object.__setattr__(view, "calls", PackedCalls.of_packed(*row[_CALLS_AT]))
        cost_low = Decimal(low)
        object.__setattr__(view, "cost_low", cost_low)  # one object for equal bounds, as __post_init__
        object.__setattr__(view, "cost_high", cost_low if high == low else Decimal(high))
        object.__setattr__(view, "tally", tally._replace(outcomes=_shared_counts(tally.outcomes),
                                                          errors=_shared_counts(tally.errors)))
        return view
    except (TypeError, ValueError, decimal.InvalidOperation) as e:
        raise FormatError(f"packed run view: {e}") from None


@dataclass(frozen=True)
class SpecView:
    """The few spec fields the analysis reads, type-checked (FORMAT.md §9)."""

    title: str | None
    tiers: tuple[str, ...] | None
    all_tiers: bool
    live: tuple[str, ...]
    hypotheses: tuple[tuple[str, str, str | None], ...]  # (id, text, rule)


def _table(doc: Mapping, key: str, where: str) -> Mapping:
    val = doc.get(key, {})
    if not isinstance(val, Mapping):
        raise FormatError(f"{where}: {key} must be a table")
    return val


def _str_list(doc: Mapping, key: str, where: str) -> tuple[str, ...] | None:
    val = doc.get(key)
    if val is None:
        return None
    if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise FormatError(f"{where}: {key} must be a list of strings")
    return tuple(val)


def spec_view(spec: Mapping, where: str = "spec") -> SpecView:
    """Read grid.tiers, grid.all_tiers, policies.live, hypotheses and title from a parsed
    spec. Missing keys take defaults; a key of the wrong type raises FormatError."""
    if not isinstance(spec, Mapping):
        raise FormatError(f"{where}: not a table")
    grid, pols = _table(spec, "grid", where), _table(spec, "policies", where)
    all_tiers = grid.get("all_tiers", False)
    hyps = spec.get("hypotheses", [])
    if not isinstance(all_tiers, bool) or not isinstance(hyps, list) or \
            not all(isinstance(h, Mapping) for h in hyps):
        raise FormatError(f"{where}: grid.all_tiers must be a boolean and hypotheses a list of tables")
    title = spec.get("title")
    out = []
    for i, h in enumerate(hyps):
        hid, text, rule = h.get("id", f"#{i + 1}"), h.get("text", ""), h.get("rule")
        out.append((str(hid), text if isinstance(text, str) else "", rule if isinstance(rule, str) else None))
    return SpecView(title if isinstance(title, str) else None, _str_list(grid, "tiers", f"{where}: grid"),
                    all_tiers, _str_list(pols, "live", f"{where}: policies") or (), tuple(out))


def spec_from_bytes(data: bytes, where: str) -> dict:
    """The registered spec's bytes as a plain dict (validation is the experiments part's
    job; the analysis reads only grid, policies and hypotheses). Raises FormatError."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{where}: registered spec is not valid TOML: {e}") from None


def registered_digest(journal: list[Record] | tuple[Record, ...]) -> str | None:
    """The spec digest in force: that of the last ``prereg`` or ``deviation`` record."""
    digest = None
    for rec in journal:
        if rec.kind in ("prereg", "deviation") and isinstance(rec.body.get("spec_digest"), str):
            digest = rec.body["spec_digest"]
    return digest


def ledger_reservations(ledgers: Iterable[Iterable[Record]]) -> dict[str, tuple]:
    """Reservations by attempt id from ledger records (FORMAT.md "Ledgers"): attempt ->
    ((key, low, high), ...). A reservation settled ``known`` costs exactly its settled
    usd; one settled unknown or never settled costs ``[0, reserved usd]``.
    Raises FormatError naming the ledger record for a bad usd string."""
    reserved: dict[str, tuple[str, str, Decimal]] = {}
    settled: dict[str, Decimal] = {}
    for records in ledgers:
        for rec in records:
            b, where = rec.body, f"ledger record {rec.seq}"
            if rec.kind == "reserve" and isinstance(b.get("attempt"), str):
                reserved[str(b.get("id"))] = (b["attempt"], str(b.get("key")), usd(b.get("usd"), where))
            elif rec.kind == "settle" and b.get("known") is True:
                settled[str(b.get("id"))] = usd(b.get("usd"), where)
    return reservations_of(reserved, settled)


def reservations_of(reserved: Mapping[str, tuple[str, str, Decimal]], settled: Mapping[str, Decimal]) -> dict[str, tuple]:
    """``ledger_reservations``'s result from the latest reservation (attempt, key, usd) and
    known settlement (usd) of each reservation id."""
    out: dict[str, list] = {}
    for rid, (attempt, key, high) in sorted(reserved.items()):
        exact = settled.get(rid)
        out.setdefault(attempt, []).append((key, exact if exact is not None else Decimal(0),
                                            exact if exact is not None else high))
    return {a: tuple(sorted(v)) for a, v in out.items()}


def merge_journal(entries: Iterable[tuple[str, Record]]) -> tuple[Record, ...]:
    """Every writer's journal records in reader order: (``at``, writer, ``seq``) (§7)."""
    ordered = sorted(entries, key=lambda e: (e[1].at, e[0], e[1].seq))
    return tuple(rec for _, rec in ordered)


def experiment_data(experiment: str, journal: Iterable[tuple[str, Record]],
                    runs: Mapping[str, Iterable[Record]], get_blob: Callable[[str], bytes], *,
                    ledgers: Iterable[Iterable[Record]] = (),
                    tasks_with_lures: frozenset[str] | None = None) -> ExperimentData:
    """Build ``ExperimentData`` the one way both the report and the verifier do.

    ``journal``: (writer, record) pairs from every writer's file of the experiment;
    ``runs``: run id -> records of sealed runs (runs of other experiments are ignored by
    the analysis); ``get_blob(digest) -> bytes`` reads a blob (the registered spec, task
    files); ``ledgers``: the records of every ledger the runs name (for calls cut off in
    flight). Raises FormatError when the journal has no registration or the spec is not
    TOML, and whatever ``get_blob`` raises for a missing spec blob."""
    records = merge_journal(journal)
    digest = registered_digest(records)
    if digest is None:
        raise FormatError(f"experiment {experiment}: the journal has no prereg record")
    spec = spec_from_bytes(get_blob(digest), f"{experiment} spec {digest}")
    runs = {rid: tuple(recs) for rid, recs in runs.items()}
    if tasks_with_lures is None:
        tasks_with_lures = lured_tasks([recs[0].body for recs in runs.values() if recs], get_blob)
    return ExperimentData(experiment, spec, digest, records, runs, tasks_with_lures,
                          ledger_reservations(ledgers))


def lured_tasks(starts: list[Mapping], get_blob: Callable[[str], bytes]) -> frozenset[str] | None:
    """Keys of tasks whose ``task.toml`` declares lures, read from the stored task blobs.

    ``starts`` are run.start bodies; ``get_blob(digest) -> bytes`` reads a blob (from a
    runs directory or a zip). Returns None ("lures unknown": no injection split is
    claimed) when any task's listing or ``task.toml`` cannot be read or parsed: a reader
    that cannot see the task files must not report every task as clean. Never raises.
    """
    out: set[str] = set()
    seen: set[tuple[str, str]] = set()
    for start in starts:
        task = start.get("task") if isinstance(start, Mapping) else None
        if not isinstance(task, Mapping) or not isinstance(task.get("digest"), str):
            return None
        key = task_key(task)
        # Every distinct version a key's runs name is read, so the answer never depends on
        # which run comes first (the report and the verifier see runs in different orders).
        if (key, task["digest"]) in seen:
            continue
        seen.add((key, task["digest"]))
        lured = _declares_lures(task["digest"], get_blob)
        if lured is None:
            return None
        if lured:
            out.add(key)
    return frozenset(out)


def _declares_lures(listing_digest: str, get_blob: Callable[[str], bytes]) -> bool | None:
    try:
        listing = get_blob(listing_digest).decode("utf-8")
        for line in listing.splitlines():  # "sha256:<hex>  <path>" (checks.digest)
            digest, _, path = line.partition("  ")
            if path == "task.toml":
                if not digest.startswith("sha256:"):
                    digest = "sha256:" + digest
                meta = tomllib.loads(get_blob(digest).decode("utf-8"))
                return bool(meta.get("lures"))
    except Exception:  # noqa: BLE001 - any unreadable or odd task file means "unknown"
        return None
    return None
