"""Building the analysis input one run at a time (``analysis.fold``, what export and the site
do to stay in bounded memory) gives the very summary ``experiment_data`` gives from every
run's records at once: with reruns, live trials, calls cut off in flight (a ledger
reservation without a call record), a run the analysis cannot read and a run of another
experiment; and a condensed run survives the site's JSON cache unchanged."""

from __future__ import annotations

import random
from dataclasses import replace

from benchclaw.formats import jsonio
from benchclaw.analysis import experiment_data, summarise
from benchclaw.analysis.fold import (ExperimentFold, condense_run, condensed_from_json,
                                     condensed_from_packed, condensed_to_json, condensed_to_packed)
from benchclaw.formats.records import Record

from tests.test_analysis_golden import random_data, random_experiment

SPEC = b'title = "fold"\n[grid]\ntiers = ["lightning", "standard", "ultra"]\n'


def _ledger(runs: dict, seed: int) -> list[Record]:
    """Reservations for every seventh run's attempt with a key no call record has (a call
    cut off in flight), a third of them settled known."""
    ledger, n = [], 0
    rng = random.Random(seed)
    for rid in sorted(runs)[::7]:
        att = runs[rid][0].body["policy"].get("attempt")
        if att:
            ledger.append(Record(n, "0" * 64, "t", "reserve", {"id": f"r{n}", "attempt": att, "key": "9.0",
                                                                "usd": "0.02"}))
            if rng.random() < 0.3:
                ledger.append(Record(n + 1, "0" * 64, "t", "settle", {"id": f"r{n}", "known": True, "usd": "0.0071"}))
            n += 2
    return ledger


def _odd_runs(runs: dict) -> dict:
    """A run the analysis rejects (a call without a cost) and a run of another experiment."""
    start = next(iter(runs.values()))[0]
    bad_call = Record(1, "0" * 64, "2026-01-01T00:00:00Z", "call", {"turn": 0, "attempt": 0})
    other = replace(start, body={**start.body, "policy": {**start.body["policy"], "experiment": "E02"}})
    return {"f" * 64: (start, bad_call), "e" * 64: (other,)}


def _both(seed: int, *, spill: bool = False) -> tuple[bytes, bytes]:
    data = random_data(30, seed) if spill else random_experiment(30, seed).data()  # (random_data: reruns too)
    runs = {**data.runs, **_odd_runs(data.runs)}
    ledger = _ledger(runs, seed)
    journal = [("w", rec) for rec in data.journal]
    blobs = {"sha256:" + "0" * 64: SPEC}
    # the journal names the spec digest of its prereg; serve the same spec under any digest
    get_blob = lambda d: blobs.get(d, SPEC)  # noqa: E731
    whole = experiment_data("E01", journal, runs, get_blob, ledgers=[ledger],
                            tasks_with_lures=data.tasks_with_lures)
    fold = ExperimentFold("E01", spill=spill)
    for rid in sorted(runs):
        fold.add(rid, runs[rid])
    folded = fold.data(journal, get_blob, ledgers=lambda: [ledger], tasks_with_lures=data.tasks_with_lures)
    return jsonio.dumps(summarise(whole)), jsonio.dumps(summarise(folded))


def test_a_folded_experiment_summarises_exactly_as_the_whole_records():
    for seed in (1, 2, 3):
        whole, folded = _both(seed)
        assert b'"cut_off":' in whole and b'"run":"' + b"f" * 64 + b'"' in whole  # what the test is about
        assert folded == whole


def test_a_spilled_fold_summarises_exactly_as_the_whole_records():
    """Export's and the site's fold: views written (marshalled) to a temporary file and read back cell by
    cell, the ledgers matched against hashed attempt ids (``fold._Seen``)."""
    for seed in (1, 2, 3, 4):
        whole, folded = _both(seed, spill=True)
        assert b'"cut_off":' in whole and b'"secondary":{' in whole and b'"mode":"live"' in whole
        assert folded == whole


def test_a_condensed_run_survives_the_json_cache():
    data = random_experiment(10, 4).data()
    for rid, records in data.runs.items():
        c = condense_run(rid, records)
        if c.view is None:  # unreadable: not cached (its records are read again)
            assert condensed_to_json(c) is None and c.records
            continue
        again = condensed_from_json(jsonio.loads(jsonio.dumps(condensed_to_json(c))))
        assert again == c


def test_a_packed_condensed_run_is_the_same_run_and_folds_the_same():
    """The verifier's form (``condensed_to_packed``, marshalled by its reading stage): an
    equal run, whose view carries the same sums and tally, and a fold of these summarises
    as a fold of the records."""
    import marshal

    data = random_experiment(30, 5).data()
    fold, again = ExperimentFold("E01"), ExperimentFold("E01")
    for rid in sorted(data.runs):
        c = condense_run(rid, data.runs[rid])
        fold.add_condensed(rid, c)
        if c.view is None:
            assert condensed_to_packed(c) is None
            again.add_condensed(rid, c)
            continue
        back = condensed_from_packed(marshal.loads(marshal.dumps(condensed_to_packed(c))))
        assert back == c
        assert (back.view.cost_low, back.view.cost_high, back.view.tally) == (
            c.view.cost_low, c.view.cost_high, c.view.tally)
        again.add_condensed(rid, back)
    journal = [("w", rec) for rec in data.journal]
    get_blob = lambda d: SPEC  # noqa: E731
    assert jsonio.dumps(summarise(again.data(journal, get_blob, tasks_with_lures=data.tasks_with_lures))) == \
        jsonio.dumps(summarise(fold.data(journal, get_blob, tasks_with_lures=data.tasks_with_lures)))


def test_every_version_of_a_task_key_is_read_for_lures():
    """Two runs name one task key with different listings, only the second declaring lures:
    the fold hands ``lured_tasks`` both versions, as ``experiment_data`` does (it used to
    keep the first run's only, so the key was called clean)."""
    from benchclaw.analysis.fold import CondensedRun

    blobs = {"sha256:" + "c" * 64: b"", "sha256:" + "d" * 64: b'lures = [{id = "x"}]\n'}
    blobs["sha256:" + "a" * 64] = f"{'sha256:' + 'c' * 64}  task.toml\n".encode()
    blobs["sha256:" + "b" * 64] = f"{'sha256:' + 'd' * 64}  task.toml\n".encode()
    fold = ExperimentFold("E")
    for n, listing in (("1", "a"), ("2", "b")):
        task = {"id": "t", "version": 1, "digest": "sha256:" + listing * 64}
        fold.add_condensed(n * 64, CondensedRun(None, None, (), task, None))
    data = fold.data([], blobs.__getitem__, spec={})
    assert data.tasks_with_lures == frozenset({"t@1"})


def test_a_kept_view_carries_what_its_calls_derive():
    """``_shared`` packs a view's calls without deriving its sums and tally again: what it
    carries over must be what deriving them from the packed calls gives."""
    from benchclaw.analysis.fold import _shared
    from benchclaw.analysis.inputs import PackedCalls

    data = random_experiment(10, 5).data()
    seen = 0
    for rid, records in data.runs.items():
        view = condense_run(rid, records).view
        if view is None:
            continue
        kept = _shared(view)
        fresh = replace(kept)  # __post_init__ derives them afresh, from the packed calls
        assert isinstance(kept.calls, PackedCalls) and kept == view
        assert (kept.cost_low, kept.cost_high, kept.tally) == (fresh.cost_low, fresh.cost_high, fresh.tally)
        seen += bool(view.calls)
    assert seen


def test_the_ledgers_are_read_once_when_no_reservation_matters_and_a_bad_settlement_still_fails():
    """No reservation a view needs (a grid's every call has its record): the settlements are
    not read a second time, yet a known settlement with a malformed amount fails as the
    second reading would have failed it, after any malformed reservation before it."""
    import pytest

    from benchclaw.errors import FormatError

    fold = ExperimentFold("E01")
    reads = []

    def ledgers(records):
        def read():
            reads.append(1)
            return [records]
        return read
    honest = [Record(0, "0" * 64, "t", "reserve", {"id": "r0", "attempt": "a", "key": "0.0", "usd": "0.02"}),
              Record(1, "0" * 64, "t", "settle", {"id": "r0", "known": True, "usd": "0.01"})]
    assert fold._reservations(ledgers(honest)) == {} and len(reads) == 1
    bad = honest + [Record(2, "0" * 64, "t", "settle", {"id": "r9", "known": True, "usd": "1e3"}),
                    Record(3, "0" * 64, "t", "settle", {"id": "r8", "known": True, "usd": "x"})]
    with pytest.raises(FormatError, match=r"ledger record 2: expected a decimal USD string, got '1e3'"):
        fold._reservations(ledgers(bad))
    worse = bad + [Record(4, "0" * 64, "t", "reserve", {"id": "r1", "attempt": "a", "key": "1.0", "usd": "?"})]
    with pytest.raises(FormatError, match=r"ledger record 4: "):  # every reservation is read first
        fold._reservations(ledgers(worse))
    unknown = honest + [Record(2, "0" * 64, "t", "settle", {"id": "r9", "known": False, "usd": "x"})]
    assert fold._reservations(ledgers(unknown)) == {}  # an unknown settlement's amount is not read


def test_reserved_keys_taken_beforehand_give_what_reading_the_ledgers_gives():
    """``ReservedKeys`` (what the verifier's reading stage takes of a ledger): the ledgers
    are not read when no reservation can change a view, and the answer (or the error) is
    the one reading them gives whenever one can, or an amount would not parse."""
    import pytest

    from benchclaw.analysis.fold import ReservedKeys
    from benchclaw.errors import FormatError

    def taken(records):
        keys = ReservedKeys()
        for rec in records:
            keys.add(rec)
        return keys.result()

    data = random_data(30, 7)
    runs = {**data.runs, **_odd_runs(data.runs)}
    cut_off = _ledger(runs, 7)
    honest = [Record(0, "0" * 64, "t", "reserve", {"id": "r0", "attempt": "a", "key": "0.0", "usd": "0.02"}),
              Record(1, "0" * 64, "t", "settle", {"id": "r0", "known": True, "usd": "0.01"})]
    bad = honest + [Record(2, "0" * 64, "t", "settle", {"id": "r9", "known": True, "usd": "1e3"})]
    assert taken(bad) is None and taken(honest) == {("0.0",): ["a"]}
    for spill in (False, True):
        fold = ExperimentFold("E01", spill=spill)
        for rid in sorted(runs):
            fold.add(rid, runs[rid])
        for ledger in (cut_off, honest, bad, []):
            reads = []

            def read(ledger=ledger):
                reads.append(1)
                return [ledger]
            try:
                want = fold._reservations(read)
            except FormatError as e:
                with pytest.raises(FormatError, match=str(e)):
                    fold._reservations(read, [taken(ledger)])
                continue
            reads.clear()
            assert fold._reservations(read, [taken(ledger)]) == want
            assert bool(reads) == bool(want)  # read only when some reservation is kept


def test_a_spilled_view_reads_back_equal_whether_marshal_takes_it_or_not():
    """``RunGroups(spill=True)`` writes a view as ``view_to_packed`` packs it, marshalled;
    a view holding a value marshal does not take is pickled instead. Either reads back as
    an equal view with the same sums and tally."""
    from fractions import Fraction

    from benchclaw.analysis.stream import RunGroups

    data = random_experiment(10, 6).data()
    views = [c.view for c in (condense_run(rid, recs) for rid, recs in sorted(data.runs.items()))
             if c.view is not None and c.view.policy == "grid"]
    odd = replace(views[0], elapsed_ms=Fraction(1, 3))  # (not marshal's)
    groups = RunGroups(spill=True)
    for v in [*views, odd]:
        groups.add(v, None, ())
    back = [v for cell in groups.grid_cells() for v in groups.grid(cell)]
    assert sorted(back, key=lambda v: (v.run_id, str(v.elapsed_ms))) == \
        sorted([*views, odd], key=lambda v: (v.run_id, str(v.elapsed_ms)))
    for v in back:
        twin = next(w for w in [*views, odd] if w.run_id == v.run_id and w.elapsed_ms == v.elapsed_ms)
        assert (v.cost_low, v.cost_high, v.tally) == (twin.cost_low, twin.cost_high, twin.tally)
    groups.close()
