"""Build ``ExperimentData`` one run at a time, keeping only what the analysis reads of each.

``experiment_data`` takes every run's records at once; at 20,000 runs that is gigabytes.
Export and the site read runs one by one instead: ``condense_run`` turns a run's records
into a ``CondensedRun`` (the analysis's own ``RunView`` of it, plus the two facts that
are only known once the ledgers are read: the run's attempt id and the keys of its
calls, and the task it ran, for the lures), the records are dropped, and
``ExperimentFold.data`` assembles the same ``ExperimentData`` that ``experiment_data``
builds from the whole records. A run the analysis cannot read keeps its records (they
are few), so the summary lists it with the analysis's own message.

Because a ``CondensedRun`` is the analysis's type, a builder that caches it
(``condensed_to_json``/``condensed_from_json``) cannot drop a field the analysis reads.
"""

from __future__ import annotations

import bisect
import decimal
import hashlib
import sys
from array import array
from decimal import Decimal
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from ..errors import FormatError
from ..formats.records import Record
from .stream import RunGroups
from .inputs import (ExperimentData, is_usd, PackedCalls, RunView, cut_off_calls, call_keys, lured_tasks, reservations_of, usd,
                     merge_journal, registered_digest, spec_from_bytes, task_key, view_from_json, view_from_packed,
                     view_run, view_to_json, view_to_packed)

__all__ = ["CondensedRun", "condense_run", "ExperimentFold", "condensed_to_json", "condensed_from_json",
           "condensed_to_packed", "condensed_from_packed",
           "in_experiment", "ReservedKeys"]


class CondensedRun(NamedTuple):
    """One sealed run as the analysis needs it, before the ledgers are read.

    ``view``: ``view_run`` of the run without reservations (None when the analysis cannot
    read the run: then ``records`` holds them); ``attempt``/``keys``: its attempt id and
    call keys, which place the ledger's reservations cut off in flight; ``task``: its
    ``run.start.task`` (for the lures); ``ledger``: the ledger its ``run.start`` names."""

    view: RunView | None
    attempt: str | None
    keys: tuple[str, ...]
    task: Mapping | None
    ledger: str | None
    records: tuple[Record, ...] = ()


def in_experiment(records, experiment: str) -> bool:
    """Whether a run belongs to ``experiment`` (its first record's ``policy.experiment``),
    the rule by which ``experiment_data``'s callers select runs."""
    policy = records[0].body.get("policy") if records else None
    return isinstance(policy, dict) and policy.get("experiment") == experiment


def condense_run(run_id: str, records: tuple[Record, ...] | list[Record]) -> CondensedRun:
    """Condense one run's records (never raises: an unreadable run keeps its records)."""
    records = tuple(records)
    start = records[0].body if records else {}
    pol = start.get("policy") if isinstance(start, dict) else None
    pol = pol if isinstance(pol, dict) else {}
    attempt = pol.get("attempt") if isinstance(pol.get("attempt"), str) else None
    task = start.get("task") if isinstance(start, dict) else None
    ledger = start.get("ledger") if isinstance(start, dict) else None
    try:
        view = view_run(run_id, records)
    except FormatError:
        return CondensedRun(None, attempt, (), task, ledger, records)
    return CondensedRun(view, attempt, call_keys(records) if attempt is not None else (), task, ledger)


def condensed_to_json(c: CondensedRun) -> list | None:
    """A readable run's ``CondensedRun`` as JSON (None for an unreadable one: read it again)."""
    if c.view is None:
        return None
    return [view_to_json(c.view), c.attempt, list(c.keys), c.task, c.ledger]


def condensed_from_json(row) -> CondensedRun:
    """The inverse of ``condensed_to_json``. Raises FormatError for another shape."""
    try:
        view, attempt, keys, task, ledger = row
        return CondensedRun(view_from_json(view), attempt, tuple(str(k) for k in keys), task, ledger)
    except (TypeError, ValueError, decimal.InvalidOperation) as e:
        raise FormatError(f"cached condensed run: {e}") from None


def condensed_to_packed(c: CondensedRun) -> tuple | None:
    """A readable run's ``CondensedRun`` as ``marshal`` takes it, its view packed
    (``inputs.view_to_packed``: its calls packed, as the fold keeps them, and their sums
    carried), None for an unreadable one. ``condensed_from_packed`` makes it again without
    parsing a call: the verifier's reading stage takes it of each run on two cores."""
    if c.view is None:
        return None
    return view_to_packed(c.view), c.attempt, tuple(c.keys), c.task, c.ledger


def condensed_from_packed(row) -> CondensedRun:
    """The inverse of ``condensed_to_packed``. Raises FormatError for another shape."""
    try:
        view, attempt, keys, task, ledger = row
        return CondensedRun(view_from_packed(view), attempt, tuple(str(k) for k in keys), task, ledger)
    except (TypeError, ValueError) as e:
        raise FormatError(f"packed condensed run: {e}") from None


@dataclass
class ExperimentFold:
    """The runs of one experiment, added one at a time (in run id order), condensed.

    What is kept per run is its condensed view with repeated strings shared (tier, cell,
    status, ...); its task is folded at once into one entry per task version."""

    experiment: str
    runs: dict[str, CondensedRun] = field(default_factory=dict)
    _tasks: dict[tuple[str, str], Mapping] = field(default_factory=dict)  # (task key, digest) -> its first run's task
    _odd_task: Mapping | None = None  # a run.start task without a digest: the lures are unknown
    _odd: bool = False
    # With ``spill``, a readable run's view goes to ``groups`` (a temporary file: what the
    # streaming analysis reads back cell by cell) instead of ``runs``, which then holds only
    # the runs the analysis cannot read; of the rest only what the ledgers are matched
    # against is kept (``_seen``: per list of call keys, the 64-bit hashes of the attempts
    # whose runs have it, 8 bytes a run; see ``_Seen``) and the ledgers they name.
    spill: bool = False
    groups: RunGroups | None = None
    _seen: "_Seen" = field(default_factory=lambda: _Seen())
    _ledger_ids: set = field(default_factory=set)

    def add(self, run_id: str, records) -> CondensedRun | None:
        """Condense and keep the run if it belongs to this experiment (None otherwise)."""
        if not in_experiment(records, self.experiment):
            return None
        return self.add_condensed(run_id, condense_run(run_id, records))

    def add_condensed(self, run_id: str, c: CondensedRun) -> CondensedRun:
        task = c.task
        if not isinstance(task, Mapping) or not isinstance(task.get("digest"), str):
            if not self._odd:
                self._odd, self._odd_task = True, task
        else:  # every distinct version a key's runs name, as ``lured_tasks`` reads them all
            self._tasks.setdefault((task_key(task), task["digest"]), task)
        # (an attempt id is one run's or one trial's own: interned, each would stay in the
        # interpreter's table of interned strings, which never shrinks)
        # (spilled, a view is pickled: interning its strings would only grow the interpreter's
        # table of interned strings, one entry per cell)
        view = _shared(c.view) if not self.spill or c.view is None else _same_calls(c.view, calls=_packed(c.view.calls))
        kept = CondensedRun(view, c.attempt, tuple(_intern(k) for k in c.keys), None,
                            _intern(c.ledger), c.records)
        if not self.spill:
            self.runs[run_id] = kept
            return kept
        if self.groups is None:
            self.groups = RunGroups(spill=True)
        self._ledger_ids.add(kept.ledger)
        if c.attempt is not None:
            self._seen.add(c.attempt, None if c.view is None else kept.keys)
        if kept.view is None:
            self.runs[run_id] = kept
        elif kept.view.experiment == self.experiment:
            self.groups.add(kept.view, c.attempt, kept.keys)
        return kept

    def ledger_ids(self, journal: Iterable[Record]) -> list[str]:
        """The ledgers a ``grid.start`` or a run names, sorted: what ``data`` needs."""
        ids = {rec.body.get("ledger") for rec in journal if rec.kind == "grid.start"}
        ids |= {c.ledger for c in self.runs.values()} | self._ledger_ids
        return sorted(i for i in ids if isinstance(i, str))

    def data(self, journal: Iterable[tuple[str, Record]], get_blob: Callable[[str], bytes], *,
             ledgers: Callable[[], Iterable[Iterable[Record]]] = tuple, spec: Mapping | None = None,
             tasks_with_lures: frozenset[str] | None = None,
             reserved: Sequence | None = None) -> ExperimentData:
        """``ExperimentData`` that summarises exactly as what ``experiment_data`` builds from
        the whole records. ``ledgers()`` gives the records of every ledger the runs or grids
        name, afresh each time it is called (they are read twice, to keep only the
        reservations a view needs). ``reserved``: ``ReservedKeys.result`` of each of those
        ledgers, in the same order, taken as they were read (None where not taken): when
        none of their reservations can change a view, the ledgers are not read at all.
        With ``spec`` given, the registered spec is not read (nor required). Raises as
        ``experiment_data`` otherwise."""
        records = merge_journal(journal)
        digest = registered_digest(records)
        if spec is None:
            if digest is None:
                raise FormatError(f"experiment {self.experiment}: the journal has no prereg record")
            spec = spec_from_bytes(get_blob(digest), f"{self.experiment} spec {digest}")
        reservations = self._reservations(ledgers, reserved)
        views, unread = {}, {}
        for run_id, c in self.runs.items():
            if c.view is None:
                unread[run_id] = c.records
                continue
            reserved = reservations.get(c.attempt, ()) if c.attempt is not None else ()
            extra = cut_off_calls(c.keys, reserved) if reserved else ()
            views[run_id] = replace(c.view, calls=c.view.calls + tuple(extra)) if extra else c.view
        if tasks_with_lures is None:
            tasks_with_lures = lured_tasks(self._starts(), get_blob)
        groups = None
        if self.spill:
            groups = self.groups or RunGroups()
            groups.set_reservations(reservations)
        return ExperimentData(self.experiment, spec, digest, records, unread, tasks_with_lures,
                              reservations, views=views, groups=groups)

    def _reservations(self, ledgers: Callable[[], Iterable[Iterable[Record]]],
                      taken: Sequence | None = None) -> dict[str, tuple]:
        """``ledger_reservations`` restricted to the reservations that can change a view:
        not those whose call has a record in every run of its attempt (nearly all of them),
        all of those of a run held as records. A grid's ledger holds two records per call,
        so keeping them all would cost more than the runs' views. ``taken``: each ledger's
        ``ReservedKeys.result`` (``data``)."""
        # attempt -> call keys every run of it has (None: keep all); a run's own tuple while
        # the attempt has one run (a grid's every attempt), not a set per run
        seen: dict | _Seen = {}
        if self.spill:
            seen = self._seen.frozen()
        else:
            for c in self.runs.values():
                if c.attempt is not None:
                    _see(seen, _attempt_key(c.attempt), None if c.view is None else c.keys)
        if taken is not None and all(t is not None for t in taken) and \
                not any(_keeps_any(seen, t, not self.spill) for t in taken):
            return reservations_of({}, {})  # what 1. and 2. find: nothing kept, nothing raised
        reserved: dict[str, tuple[str, str, Decimal]] = {}
        bad_settle = None  # the first known settlement whose amount 2. would refuse
        for records in ledgers():  # 1. the latest reservation of each id, if it matters
            for rec in records:
                b = rec.body
                if rec.kind == "reserve" and isinstance(b.get("attempt"), str):
                    rid, key, att = str(b.get("id")), str(b.get("key")), b["attempt"]
                    amount = usd(b.get("usd"), f"ledger record {rec.seq}")
                    ak = _attempt_key(att) if not self.spill else att
                    if ak in seen and (seen[ak] is None or key not in seen[ak]):
                        reserved[rid] = (att, key, amount)
                    else:
                        reserved.pop(rid, None)
                elif bad_settle is None and rec.kind == "settle" and b.get("known") is True:
                    try:
                        usd(b.get("usd"), f"ledger record {rec.seq}")
                    except FormatError as e:
                        bad_settle = e
        if not reserved:  # 2. would find nothing to keep (a grid's ledgers, read once, not twice)
            if bad_settle is not None:
                raise bad_settle  # what 2. raises first
            return reservations_of(reserved, {})
        settled: dict[str, Decimal] = {}
        for records in ledgers():  # 2. the latest known settlement of those
            for rec in records:
                b = rec.body
                if rec.kind == "settle" and b.get("known") is True:
                    amount = usd(b.get("usd"), f"ledger record {rec.seq}")
                    if str(b.get("id")) in reserved:
                        settled[str(b.get("id"))] = amount
        return reservations_of(reserved, settled)

    def _starts(self) -> list[dict]:
        """One ``run.start``-like body per task version (the first run's, in run order), or an
        odd one: ``lured_tasks`` gives the same answer over these as over every run's."""
        if self._odd:
            return [{"task": self._odd_task}]
        return [{"task": task} for task in self._tasks.values()]


class ReservedKeys:
    """A ledger's reservations as ``ExperimentFold._reservations`` reads them to find that
    it keeps none, folded one record at a time (as a reader streams the ledger): the keys
    of each attempt's reservations, and whether that reading raises nowhere (every
    ``reserve`` of an attempt and every known ``settle`` carries a USD string ``usd``
    accepts). ``result``: {tuple of keys: the attempts that reserved exactly those}, or
    None when a USD string is not one (the ledger is then read)."""

    __slots__ = ("_keys", "_ok")

    def __init__(self):
        self._keys: dict[str, dict] = {}
        self._ok = True

    def add(self, rec) -> None:
        b = rec.body
        if rec.kind == "reserve" and isinstance(b.get("attempt"), str):
            self._ok = self._ok and is_usd(b.get("usd"))
            got = self._keys.get(b["attempt"])
            if got is None:
                got = self._keys[b["attempt"]] = {}
            got[str(b.get("key"))] = None
        elif rec.kind == "settle" and b.get("known") is True:
            self._ok = self._ok and is_usd(b.get("usd"))

    def result(self) -> dict | None:
        if not self._ok:
            return None
        out: dict[tuple, list] = {}
        for attempt, keys in self._keys.items():
            out.setdefault(tuple(keys), []).append(attempt)
        return out


def _keeps_any(seen, taken: dict, keyed: bool) -> bool:
    """Whether ``_reservations``' first pass keeps any reservation of the ledger that
    ``taken`` (``ReservedKeys.result``) is of; ``keyed``: ``seen`` holds ``_attempt_key``s."""
    for keys, attempts in taken.items():
        for attempt in attempts:
            ak = _attempt_key(attempt) if keyed else attempt
            if ak in seen:
                mine = seen[ak]
                if mine is None or any(k not in mine for k in keys):
                    return True
    return False


class _Seen:
    """attempt -> the call keys every run of it has (None: a run held as records, all of
    whose reservations are kept), as ``_see`` builds it, held as one sorted array of 64-bit
    attempt hashes per distinct tuple of keys (a grid's runs share a few).

    Exact for what it is used for, which is only to leave out reservations that cannot
    change a view: two attempts whose hashes collide are read as one attempt with both
    runs, so the keys of a lookup are an intersection that may be smaller (a reservation
    kept that could have been left out; a view takes only its own attempt's reservations,
    for keys it has no call of) or an attempt with no run may look seen (its reservations
    change no view)."""

    def __init__(self):
        self._groups: dict[tuple | None, array] = {}

    def add(self, attempt: str, keys: tuple | None) -> None:
        got = self._groups.get(keys)
        if got is None:
            got = self._groups[keys] = array("q")
        got.append(_h64(attempt))

    def frozen(self) -> "_Seen":
        for keys, hashes in self._groups.items():
            self._groups[keys] = array("q", sorted(hashes))
        return self

    def _lookup(self, attempt: str):
        h, found = _h64(attempt), []
        for keys, hashes in self._groups.items():
            i = bisect.bisect_left(hashes, h)
            if i < len(hashes) and hashes[i] == h:
                found.append(keys)
        return found

    def __contains__(self, attempt: str) -> bool:
        return bool(self._lookup(attempt))

    def __getitem__(self, attempt: str):
        found = self._lookup(attempt)
        if any(k is None for k in found):
            return None
        if len(found) == 1:
            return found[0]
        return set(found[0]).intersection(*found[1:])


def _h64(attempt: str) -> int:
    return int.from_bytes(hashlib.blake2b(attempt.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big", signed=True)


def _see(seen: dict, attempt, keys) -> None:
    """Note a run of ``attempt`` whose call keys are ``keys`` (None: a run held as records,
    all of whose reservations are kept)."""
    if attempt not in seen:
        seen[attempt] = keys
    else:
        had = seen[attempt]
        seen[attempt] = None if keys is None or had is None else set(had) & set(keys)


def _attempt_key(attempt: str):
    """An attempt id as a ``seen`` key: the runner's are 32 hex digits, kept as their 16 bytes."""
    if len(attempt) == 32:
        try:
            raw = bytes.fromhex(attempt)
        except ValueError:
            return attempt
        if raw.hex() == attempt:  # (not an upper-case spelling: another attempt id)
            return raw
    return attempt


def _intern(s):
    return sys.intern(s) if type(s) is str else s


_VIEW_STRINGS = ("experiment", "cell", "task", "tier", "policy", "spec_digest", "status")


def _shared(view: RunView | None) -> RunView | None:
    """The view as it is kept until the analysis runs: its repeated strings interned
    (thousands of runs share a few tiers, cells, statuses and one spec digest, which each
    parsed run held as its own copy) and its calls packed (``PackedCalls``: most of what a
    view held)."""
    if view is None:
        return None
    return _same_calls(view, calls=_packed(view.calls), **{k: _intern(getattr(view, k)) for k in _VIEW_STRINGS})


def _packed(calls) -> PackedCalls:
    """A view's calls packed (as they are, when they already are: ``condensed_from_packed``)."""
    return calls if isinstance(calls, PackedCalls) else PackedCalls(calls)


_VIEW_SLOTS = RunView.__slots__


def _same_calls(view: RunView, **changes) -> RunView:
    """``replace(view, **changes)`` where ``changes`` leave the view's calls the same calls
    (packed, equal strings interned): what ``__post_init__`` derives from them (the cost
    sums and the tally, unpacking every call again) is carried over, not derived again."""
    new = object.__new__(RunView)
    for name in _VIEW_SLOTS:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(view, name))
    return new
