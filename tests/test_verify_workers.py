"""The reading stage's forked worker (half the objects on a second core), and the steps
after it: whatever goes wrong in the child is a clean answer (exit 2), never a hang or a
traceback; whatever goes wrong in a step fails its section only.
"""

import os
import time

import pytest

from benchclaw.bundle import export_bundle
from benchclaw.verify import Limits, verify_bundle

from tests.test_bundle_support import EXP, honest_runs

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the worker forks")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("workers")
    honest_runs(root / "runs")
    export_bundle(root / "runs", EXP, root / "b.zip")
    return (root / "b.zip").read_bytes()


def test_every_step_runs_in_its_numbered_order_on_the_reading_stage_index(bundle, monkeypatch):
    from benchclaw.verify import _summary, _journal, _ledgers

    order = []
    for mod, name in ((_ledgers, "verify_ledgers"), (_summary, "verify_summary"),
                      (_journal, "verify_prereg"), (_journal, "verify_completeness")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _real=real, _n=name: (order.append(_n), _real(*a))[1])
    rep = verify_bundle(bundle)
    assert rep.exit_code == 0, rep.to_dict()
    assert order == ["verify_ledgers", "verify_summary", "verify_prereg", "verify_completeness"]
    for name in ("summary", "prereg", "complete"):
        assert rep.section(name).ran and rep.section(name).counts, name


def test_a_reading_worker_that_dies_is_a_clean_exit_2(bundle, monkeypatch):
    from benchclaw.verify import _reading

    monkeypatch.setattr(_reading, "_objects_in_worker", lambda *a: os._exit(9))
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2
    assert "worker crashed" in rep.fatal.message and "exit status 9" in rep.fatal.message
    assert not rep.section("container").ran  # nothing was verified on a half-read bundle
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left behind


def test_a_reading_worker_that_hangs_is_stopped_at_the_limit(bundle, monkeypatch):
    from benchclaw.verify import _reading

    monkeypatch.setattr(_reading, "_objects_in_worker", lambda *a: time.sleep(60))
    t0 = time.monotonic()
    rep = verify_bundle(bundle, limits=Limits(worker_seconds=1))
    assert time.monotonic() - t0 < 30
    assert rep.exit_code == 2
    assert "took longer than 1 s" in rep.fatal.message
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # the child was reaped, no zombie left


@pytest.mark.parametrize("cut", [1, 9, 200])
def test_an_object_worker_result_cut_short_is_a_clean_exit_2(bundle, monkeypatch, cut):
    from benchclaw.verify import _reading

    real = _reading._objects_in_worker

    def short(*a):
        got = real(*a)
        del got.data[-cut:]  # lengths that no longer add up to what follows them
        return got
    monkeypatch.setattr(_reading, "_objects_in_worker", short)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2 and "malformed result" in rep.fatal.message


def test_a_reading_worker_that_raises_is_a_clean_exit_2(bundle, monkeypatch):
    from benchclaw.verify import _reading

    def broken(*a):
        raise KeyError("boom")
    monkeypatch.setattr(_reading, "_objects_in_worker", broken)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2 and "worker failed: KeyError" in rep.fatal.message


def test_a_step_that_raises_fails_its_section_only(bundle, monkeypatch):
    from benchclaw.verify import _summary

    def broken(ix, runs, sec):
        raise KeyError("boom")
    monkeypatch.setattr(_summary, "verify_summary", broken)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 1
    assert [f.message for f in rep.section("summary").failures] == ["recomputation failed: KeyError: 'boom'"]
    assert rep.section("prereg").ok and rep.section("complete").ok


def test_an_unreadable_verdict_in_a_step_stops_the_verification(bundle, monkeypatch):
    from benchclaw.verify import UnreadableBundle, _summary

    def unreadable(ix, runs, sec):
        raise UnreadableBundle("summary.json", "not a readable bundle: crafted")
    monkeypatch.setattr(_summary, "verify_summary", unreadable)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2
    assert (rep.fatal.path, rep.fatal.message) == ("summary.json", "not a readable bundle: crafted")


def test_the_index_is_read_only(bundle):
    from benchclaw.verify._reading import reading

    with reading(bundle, Limits()) as ix:
        with pytest.raises(TypeError):
            ix.digests["manifest.json"] = "sha256:" + "0" * 64
        with pytest.raises(AttributeError):
            ix.names = ()
        assert ix.run_logs and all(n in ix.digests for n in ix.run_logs)


@pytest.mark.parametrize("which", [0, -1], ids=["worker's half", "parent's half"])
def test_a_corrupt_object_is_reported_by_the_container_step_from_either_half(bundle, which):
    import io
    import zipfile
    src = zipfile.ZipFile(io.BytesIO(bundle))
    name = [n for n in src.namelist() if n.startswith("objects/")][which]
    info = src.getinfo(name)
    data = bytearray(bundle)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF  # corrupt the member's bytes, not its headers
    rep = verify_bundle(bytes(data))
    assert rep.exit_code == 1
    assert any(f.path == name for f in rep.section("container").failures), rep.to_dict()


def test_the_reading_stage_derives_only_what_step_4_would_accept_itself():
    from benchclaw.verify._costs import derive

    req = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":64}'
    kind, max_tokens, estimate, sim_prompt, conversation, sent, facts = derive(req)
    assert sent == 2  # the messages' UTF-8 content bytes, for a stream's lower bound
    assert facts is None  # the simulator's facts only for a request of a simulated run
    sim_req = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":64,"model":"m","seed":3}'
    prompt, prefix, z, family = derive(sim_req, sim=True)[6]
    assert (prompt, prefix, family) == (8, 0, None) and isinstance(float.fromhex(z), float)
    assert derive(req, sim=True)[6] is None  # no model: the step reads the blob and says so
    assert (kind, max_tokens) == ("r", 64) and estimate > 0
    assert sim_prompt == 3 + 4 + 1 and conversation[0] == 1  # one message: no task message yet
    assert derive(b'{"prompt_tokens":3,"completion_tokens":2}')[1]["completion"] == 2
    assert derive(b'{"prompt_tokens":-1}')[:2] == ["u", None]  # costed as unknown, as step 4 does
    # a reply's length in characters, for the simulator's token rule
    assert derive('{"action": "finish", "summary": "é"}'.encode()) == ["u", None, 36, []]
    assert derive("plain words é".encode()) == ["t", None, 13]
    # what could change the bill but is not read (a doubt, FORMAT.md §6) is derived too
    assert derive(b'{"prompt_tokens":3,"completion_tokens":2,"cost":0.5}')[3] == ["unread:cost"]
    # anything step 4 would reject or treat specially is left for it to read itself
    assert derive(b'{"messages":[{"role":"user"}],"max_tokens":true}') is None
    assert derive(b'{"messages":["x"],"max_tokens":64}') is None
    assert derive(b"\xff not utf-8") is None


_ODD_MESSAGES = [
    [{"role": "system", "content": "x"}, {"role": "user", "content": "task"}],
    [{"role": "user", "content": "héllo ☃"}, {"role": "assistänt", "content": ""}, {"role": "user"}],
    [{"content": None}, {"role": None, "content": 12}, {"role": "user", "content": 1.5}],
    [{"role": "user", "content": "a", "name": "n"}, {"role": "user", "content": "b", "n": 2.0},
     {"role": "tool", "content": ["x"]}, {"role": "user", "content": "c" * 1000}],
    [{"role": "user", "content": "x", "extra": "y"}] * 5,
]


@pytest.mark.parametrize("messages", _ODD_MESSAGES)
def test_the_reading_stage_counts_and_hashes_a_request_as_the_plain_functions_do(messages):
    """``request_counts`` walks the messages once for what three functions count; the
    conversation hashes and the simulator's noise hash its canonical bytes: each the same
    as the plain, canonical way, whatever the messages hold."""
    from benchclaw.formats.money import estimate_prompt_tokens, message_bytes
    from benchclaw.formats.sim_rules import turn_noise
    from benchclaw.verify._costs import canon_list, conversation_hashes, message_tokens, request_counts
    from benchclaw.verify._simusage import _noise

    tokens, estimate, sent, strings = request_counts(messages)
    assert (tokens, estimate, sent) == (message_tokens(messages), estimate_prompt_tokens(messages),
                                        message_bytes(messages))
    assert strings == all(type(v) is str for m in messages for v in m.values())
    whole = canon_list(messages)
    assert conversation_hashes(messages, whole) == conversation_hashes(messages)
    assert _noise(7, "m", messages, whole, strings).gauss(0.0, 1.0) == turn_noise(7, "m", messages).gauss(0.0, 1.0)


def test_steps_3_4_and_6_take_each_honest_run_from_the_reading_stage_facts(bundle, monkeypatch):
    from benchclaw.verify import _index, _reading
    from benchclaw.verify._reading import reading

    with reading(bundle, Limits()) as ix:
        facts = [ix.facts_of(n) for n in ix.run_logs]
        assert facts and all(f.checks is not None and f.costs is not None and f.condensed is not None
                             for f in facts)
    with_facts = verify_bundle(bundle).to_dict()
    parsed = []
    real = _index.RunLog.records
    monkeypatch.setattr(_index.RunLog, "records", lambda self: (parsed.append(1), real(self))[1])
    monkeypatch.setattr(_reading, "_facts", lambda ix, out, meanwhile=None: out)  # no facts: every step reads every run
    without = verify_bundle(bundle).to_dict()
    assert without == with_facts and with_facts["exit_code"] == 0
    runs = with_facts["sections"][1]["counts"]["runs"]
    assert len(parsed) >= 3 * runs  # steps 3, 4 and 6 each parsed every run, which the facts spare


def test_a_run_that_does_not_hold_has_no_facts_and_its_step_reports_it_as_without_any(bundle, monkeypatch, tmp_path):
    """Facts are only "this run holds": a forged run has none for the step it fails, and
    the report (every message, count and section) is the one the steps give reading every
    run themselves."""
    from benchclaw.verify import _reading
    from benchclaw.verify._reading import reading
    from tests.forgery_kit import of

    f = of(bundle)
    run_id = f.run_ids()[0]

    def cheaper(objs):
        call = next(o for o in objs if o["kind"] == "call")
        call["body"]["cost"] = {**call["body"]["cost"], "low": "0", "high": "0"}
        return objs
    new = f.edit_run(run_id, cheaper)
    forged = f.pack(tmp_path)
    with reading(forged, Limits()) as ix:
        facts = ix.facts_of(f"runs/{new[:2]}/{new}.jsonl")
        assert facts.costs is None and facts.checks is not None
    rep = verify_bundle(forged)
    assert rep.exit_code == 1 and rep.section("costs").failures, rep.to_dict()
    monkeypatch.setattr(_reading, "_facts", lambda ix, out, meanwhile=None: out)
    assert verify_bundle(forged).to_dict() == rep.to_dict()


def test_the_facts_a_worker_returns_must_tile_its_frames_exactly():
    import io

    from benchclaw.verify._reading import _read_frames, _facts_in_worker  # noqa: F401 - the writer of these frames

    good = b"\x02\x00\x00\x00ab" + b"\xff\xff\xff\xff"
    assert list(_read_frames(io.BytesIO(good), len(good), 2)) == [b"ab", None]
    for bad, count in ((good, 3), (good + b"x", 2), (good[:5], 2), (b"\x05\x00\x00\x00ab", 1)):
        with pytest.raises(ValueError):
            list(_read_frames(io.BytesIO(bad), len(bad), count))


def test_a_worker_whose_facts_are_cut_short_is_a_clean_exit_2(bundle, monkeypatch):
    from benchclaw.verify import _reading
    from benchclaw.verify._workers import Raw

    real = _reading._facts_in_worker
    monkeypatch.setattr(_reading, "_facts_in_worker", lambda *a: Raw(real(*a).data[:-1]))
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2 and "malformed result" in rep.fatal.message


_HEAD = b'{"v":1,"seq":0,"prev":"' + b"0" * 64 + b'",'
# first records that are not one: each test below adds its own
_BAD_FIRST_LINES = [
    _HEAD + b'"at":"x","kind":"k","bodx":{}}',   # six keys, one not body
    _HEAD + b'"at":"x","kind":"k","body":{},"x":1}',
    b'{"v":2,"seq":0,"prev":"' + b"0" * 64 + b'","at":"x","kind":"k","body":{}}',
    b'{"v":1,"seq":true,"prev":"' + b"0" * 64 + b'","at":"x","kind":"k","body":{}}',
    b'{"v":1,"seq":0,"prev":"' + b"1" * 64 + b'","at":"x","kind":"k","body":{}}',
    b'[1]', b'{', b'',
]


@pytest.mark.parametrize("line", _BAD_FIRST_LINES + [
    b'{"v":1,"seq":1,"prev":"' + b"0" * 64 + b'","at":"x","kind":"k","body":{}}',
    _HEAD + b'"at":"x","kind":"k","body":[]}',
])
def test_the_fast_chain_check_leaves_every_defect_to_verify_chain(line):
    from benchclaw.errors import BenchClawError
    from benchclaw.formats.records import verify_chain
    from benchclaw.verify._reading import _linked

    assert _linked([line]) is None
    with pytest.raises(BenchClawError):
        verify_chain([line], "x")


def test_the_fast_chain_check_reads_an_honest_chain_as_verify_chain_does(bundle):
    import io
    import zipfile

    from benchclaw.formats.records import split_lines, verify_chain
    from benchclaw.verify._reading import _linked

    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        name = next(n for n in zf.namelist() if n.startswith("runs/"))
        lines, _ = split_lines(zf.read(name))
    want = verify_chain(lines, name)
    got = _linked(lines)
    assert [(r.seq, r.at, r.kind, r.body, r.line) for r in got] == [(r.seq, r.at, r.kind, r.body, r.line) for r in want]


def test_shares_give_every_item_to_one_side_or_both_where_they_meet():
    from benchclaw.verify._workers import Shares, start

    for n in (0, 1, 2, 50, 3000):
        shares = Shares(n)
        pending = start(lambda: list(shares.front()), timeout=60)
        back = list(shares.back())
        front = pending.result()
        shares.close()
        assert front == list(range(len(front)))  # a prefix from the worker, a suffix from here
        assert back == list(range(n - 1, n - 1 - len(back), -1))
        assert set(front) | set(back) == set(range(n)) and len(set(front) & set(back)) <= 1


@pytest.mark.parametrize("slow", ["worker", "parent"])
def test_the_report_is_the_same_whichever_side_takes_the_items(bundle, monkeypatch, slow):
    from benchclaw.verify import _reading, _workers

    want = verify_bundle(bundle).to_dict()
    if slow == "worker":  # it starts late: this process takes every item of every phase
        for name in ("_run_logs_in_worker", "_objects_in_worker", "_facts_in_worker"):
            real = getattr(_reading, name)
            monkeypatch.setattr(_reading, name, lambda *a, _real=real: (time.sleep(2), _real(*a))[1])
    else:  # this process starts late: the worker takes every item
        real_back = _workers.Shares.back
        monkeypatch.setattr(_workers.Shares, "back", lambda self: (time.sleep(2), real_back(self))[1])
    assert verify_bundle(bundle).to_dict() == want


@pytest.mark.parametrize("line", _BAD_FIRST_LINES + [
    _HEAD + b'"at":1,"kind":"k","body":{}}',
    _HEAD + b'"at":"x","kind":"k","body":{}},{}',  # two values on a line
    b' ',
])
def test_the_streamed_ledger_check_leaves_every_defect_to_chain_records(line):
    from benchclaw.verify.experiment import chain_records
    from benchclaw.verify._errors import VerificationError
    from benchclaw.verify._reading import _Broken, _chain_stream

    with pytest.raises(_Broken):
        _chain_stream("ledgers/x.jsonl", line + b"\n")
    with pytest.raises(VerificationError):
        chain_records({"ledgers/x.jsonl": line + b"\n"}, "ledgers/x.jsonl")


def test_the_streamed_ledger_check_reads_an_honest_chain_as_chain_records_does(bundle):
    import io
    import zipfile

    from benchclaw.verify.experiment import chain_records
    from benchclaw.verify._reading import _chain_stream

    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        name = next(n for n in zf.namelist() if n.startswith("journals/"))  # chained as a ledger is
        data = zf.read(name)
    records = chain_records({name: data}, name)
    count, first, last, earliest = _chain_stream(name, data)
    assert count == len(records) > 1 and earliest == min(r.at for r in records)
    assert (first.seq, first.kind, first.body) == (records[0].seq, records[0].kind, records[0].body)
    assert (last.seq, last.kind, last.body) == (records[-1].seq, records[-1].kind, records[-1].body)


def _realigned_chain() -> list[bytes]:
    """Three lines that are not three JSON records but parse as three when joined into one
    array: line 1 opens an array that line 2 closes (one value across two lines), line 3
    holds two values. Every value is a well-formed envelope, linked by its position to the
    hash of the line at that position before it, so only a line-by-line parse sees it."""
    import hashlib

    def env(seq: int, prev: str) -> bytes:
        return b'"at":"x","kind":"k","prev":"' + prev.encode() + b'","seq":' + str(seq).encode() + b',"v":1'

    line1 = b'{"body":{"a":[{}'
    line2 = b'{}]},' + env(0, "0" * 64) + b"}"
    h1 = hashlib.sha256(line1).hexdigest()
    h2 = hashlib.sha256(line2).hexdigest()
    line3 = b'{"body":{},' + env(1, h1) + b'},{"body":{},' + env(2, h2) + b"}"
    return [line1, line2, line3]


def test_lines_that_only_parse_as_records_together_are_refused():
    from benchclaw.formats.records import verify_chain
    from benchclaw.verify.experiment import chain_records
    from benchclaw.verify._errors import VerificationError
    from benchclaw.verify._reading import _Broken, _chain_stream, _linked

    lines = _realigned_chain()
    data = b"\n".join(lines) + b"\n"
    with pytest.raises(Exception):
        verify_chain(lines, "runs/x.jsonl")  # the reference: line 1 is not a JSON object
    assert _linked(lines) is None  # so the run log's fast path leaves it to verify_chain
    with pytest.raises(_Broken):
        _chain_stream("ledgers/x.jsonl", data)
    with pytest.raises(VerificationError, match=r"ledgers/x\.jsonl"):
        chain_records({"ledgers/x.jsonl": data}, "ledgers/x.jsonl")


@pytest.fixture(scope="module")
def grid_bundle(tmp_path_factory) -> bytes:
    from tests.test_bundle_support import grid_runs

    root = tmp_path_factory.mktemp("grid")
    export_bundle(grid_runs(root / "runs"), EXP, root / "b.zip")
    return (root / "b.zip").read_bytes()


def test_steps_5_and_6_take_an_honest_ledger_from_the_reading_stage_facts(grid_bundle, monkeypatch):
    """Each honest ledger's replay (step 5) and reserved keys (step 6) are taken once by
    the reading stage; the report is the one the steps give reading the ledgers themselves."""
    from benchclaw.verify import _reading
    from benchclaw.verify._ledgers import Replaying
    from benchclaw.verify._reading import reading

    bundle = grid_bundle
    with reading(bundle, Limits()) as ix:
        names = [n for n in ix.ledgers if n.startswith("ledgers/")]
        assert names
        for name in names:
            facts = ix.ledger_facts_of(name)
            assert facts.replay is not None and facts.reserved is not None
            fold = Replaying(name, name[len("ledgers/"):-len(".jsonl")])
            for rec in ix.ledgers[name]:
                assert fold.add(rec)
            mine = fold.result(ix.ledgers[name])
            assert facts.replay.state.summary() == mine.state.summary()
            assert [facts.replay.book.find(a, k) for _, a, k in mine.book.keyed()] == \
                [n for n, _, _ in mine.book.keyed()]
    with_facts = verify_bundle(bundle).to_dict()
    monkeypatch.setattr(_reading, "_ledger_facts", lambda ledgers, spill: {})
    assert verify_bundle(bundle).to_dict() == with_facts and with_facts["exit_code"] == 0


def test_a_ledger_that_does_not_hold_has_no_replay_and_step_5_reports_it_as_without_any(grid_bundle, monkeypatch,
                                                                                      tmp_path):
    from benchclaw.verify import _reading
    from benchclaw.verify._reading import reading
    from tests.forgery_kit import of

    f = of(grid_bundle)
    name = f.ledger_names()[0]

    def understated(objs):
        close = next(o for o in objs if o["kind"] == "ledger.close")
        close["body"]["settled"]["usd"] = "0"
        return objs
    f.edit_chain(name, understated)
    forged = f.pack(tmp_path)
    with reading(forged, Limits()) as ix:
        facts = ix.ledger_facts_of(name)
        assert facts.replay is None and facts.reserved is not None
    rep = verify_bundle(forged)
    assert rep.exit_code == 1 and rep.section("ledgers").failures, rep.to_dict()
    monkeypatch.setattr(_reading, "_ledger_facts", lambda ledgers, spill: {})
    assert verify_bundle(forged).to_dict() == rep.to_dict()
