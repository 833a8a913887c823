"""The index's compact forms (issue 17 item 2) read exactly as what they replace.

A ledger kept deflated reads as its chained records, a manifest's rows as its
``FileEntry`` rows, a run's first and last records as parsed (values shared between runs
only when their JSON is the same), and an object's reading as its fields.
"""

import zlib

import pytest

from benchclaw.formats.records import GENESIS, Record, encode, line_hash
from benchclaw.verify import _index, verify_bundle
from benchclaw.verify._errors import UnreadableBundle
from benchclaw.verify._index import Archive, LedgerLog, Span, ManifestRows, ObjectReading, Rec, holds_bytes, kept, unkept
from benchclaw.verify._reading import _chain_stream, _ledger, _shared
from benchclaw.verify.experiment import chain_records
from benchclaw.verify.manifest import FileEntry, Manifest, build_manifest

from tests.test_bundle_support import EXP, RawEntry, manifest_for, raw_zip


def ledger_bytes(n: int) -> bytes:
    lines, prev = [], GENESIS
    for i in range(n):
        body = {"attempt": f"a{i % 7}", "id": f"r{i}", "key": f"{i}.0", "tokens": i, "usd": f"0.{i:04d}"}
        line = encode(Record(seq=i, at=f"2026-01-01T00:00:{i % 60:02d}.000000Z", kind="reserve", body=body, prev=prev))
        lines.append(line)
        prev = line_hash(line)
    return b"\n".join(lines) + b"\n"


def deflated(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def span(raw: bytes, archive: bytearray | None = None) -> Span:
    """``raw`` as the reading stage keeps it: where it lies in an archive (``archive``, a
    copy of it by default) and its seal."""
    held = bytearray(raw) if archive is None else archive
    return Archive(lambda offset, n: bytes(held[offset:offset + n])).span(0, raw)


@pytest.mark.parametrize("stored", [True, False])
def test_a_ledger_kept_deflated_reads_as_its_chained_records(monkeypatch, stored):
    monkeypatch.setattr(_index, "_CHUNK", 512)  # many chunks, lines cut at every boundary
    data = ledger_bytes(300)
    want = [Rec(r.seq, r.at, r.kind, r.body) for r in chain_records({"l": data}, "l")]
    log = _ledger("ledgers/x.jsonl", data, (span(data if stored else deflated(data)), stored))
    assert isinstance(log, LedgerLog)
    assert list(log) == want and list(log) == want  # iterated twice: parsed again each time
    assert len(log) == 300 and bool(log)
    assert log.earliest == min(r.at for r in want)  # what step 7 compares with the registration
    assert (log[0], log[-1], log[150], log[-2]) == (want[0], want[-1], want[150], want[-2])
    with pytest.raises(IndexError):
        log[300]


def test_a_broken_ledger_chain_gives_the_error_the_whole_parse_gives():
    data = ledger_bytes(20)
    lines = data.split(b"\n")
    lines[5], lines[6] = lines[6], lines[5]  # reordered
    bad = b"\n".join(lines)
    got = _ledger("ledgers/x.jsonl", bad, (span(bad), True))
    with pytest.raises(Exception) as want:
        chain_records({"ledgers/x.jsonl": bad}, "ledgers/x.jsonl")
    assert str(got) == str(want.value) and got.record == want.value.record
    torn = _ledger("ledgers/x.jsonl", data[:-1], (span(data[:-1]), True))
    assert "torn last line" in str(torn)
    assert _chain_stream("e", b"") == (0, None, None, None)


def _names(paths):
    """The ``_zip.Names`` of a zip holding ``paths``, in that order."""
    from benchclaw.verify._zip import Names, object_digest

    names = Names(len(paths))
    for path in paths:
        names.add(path, object_digest(path))
    return names


def test_manifest_rows_read_as_the_parsed_rows():
    import hashlib

    named = hashlib.sha256(b"obj").hexdigest()
    files = {"b/x": b"12345", "a": b"", "objects/zz": b"z" * 70000, f"objects/{named[:2]}/{named}": b"obj",
             f"objects/{named[:2]}/{named[:-1]}0": b"not its hash"}
    rows = build_manifest([EXP], files).files
    for names in (_names(list(files)), _names(["b/x", "objects/zz"])):  # the zip has all of them, or two
        kept_rows = ManifestRows.of(rows, names)
        assert list(kept_rows) == list(rows) and len(kept_rows) == 5
        assert kept_rows[-1] == rows[-1] and kept_rows[-5] == rows[0]
        with pytest.raises(IndexError):
            kept_rows[5]
        with pytest.raises(OverflowError):
            ManifestRows.of((FileEntry("a", rows[0].digest, 1 << 64),), names)


def test_names_keep_object_entries_as_their_digests_and_find_every_name():
    from benchclaw.verify._zip import object_digest

    hexd = "ab" + "3" * 62
    paths = ["manifest.json", f"objects/ab/{hexd}", "objects/ab/" + "3" * 64, f"objects/AB/{hexd}",
             f"objects/ab/{hexd.upper()}", "objects/zz", f"runs/ab/{hexd}.jsonl"]
    names = _names(paths)
    assert list(names) == paths and len(names) == 7 and names[-1] == paths[-1] and names[1:3] == paths[1:3]
    assert [object_digest(p) is not None for p in paths] == [False, True, False, False, False, False, False]
    for i, path in enumerate(paths):
        assert names.index(path) == names.find(path) == i and path in names
    assert names.digest_at(1) == bytes.fromhex(hexd) and names.digest_at(0) is None
    assert names.find_digest(bytes.fromhex(hexd)) == 1 and names.find_digest(bytes(32)) == -1
    assert names.find("objects/ab/" + "4" * 64) == -1 and "nope" not in names and 7 not in names
    assert names.add(paths[1], bytes.fromhex(hexd)) == 1 and names.add("objects/zz", None) == 5
    assert [n for _, n in names.under("objects/")] == paths[1:6] and list(names.positions_under("objects/")) == [1, 2, 3, 4, 5]
    assert [n for _, n in names.under("runs/")] == paths[-1:]
    with pytest.raises(KeyError):
        names.index("objects/ab/" + "4" * 64)
    with pytest.raises(IndexError):
        names[7]


def test_a_manifest_size_past_64_bits_is_refused_by_step_one_not_a_traceback(monkeypatch):
    """A size no array holds (the stdlib JSON parser reads any integer) keeps the rows as
    parsed, and step 1 refuses it like any wrong size."""
    from benchclaw.verify import _reading

    files = {b"VERSION": b"benchclaw-runs 1\n", b"summary.json": b"{}"}
    real = _reading.parse_manifest

    def huge(data):
        m = real(data)
        rows = (FileEntry(m.files[0].path, m.files[0].digest, 1 << 64),) + m.files[1:]
        return Manifest(m.experiments, rows, m.digest, m.exploratory)

    monkeypatch.setattr(_reading, "parse_manifest", huge)
    manifest = manifest_for(files).replace(b'"files":[', b'"files": [')  # not canonical: parsed whole
    rep = verify_bundle(raw_zip([RawEntry(b"manifest.json", manifest)] + [RawEntry(k, v) for k, v in files.items()]))
    assert rep.fatal is None and rep.exit_code == 1
    assert any(f"the manifest says {1 << 64}" in str(f) for f in rep.section("container").failures)


def test_a_canonical_manifest_read_row_by_row_is_the_manifest_parsed_whole():
    """The rows of a manifest as export writes it are read one at a time; any other form
    (spaces, escapes, another key order) is parsed whole: both read the same."""
    from benchclaw.verify._reading import _canonical_manifest
    from benchclaw.verify.manifest import parse_manifest
    from benchclaw.formats import jsonio

    files = {"VERSION": b"x", "a/bé.txt": b"yy", "objects/zz": b"z" * 70}
    for exploratory in (False, True):
        data = build_manifest([EXP, "E2"], files, exploratory=exploratory).to_bytes()
        whole = parse_manifest(data)
        got = _canonical_manifest(data, _names([]))
        assert got is not None and list(got.files) == list(whole.files)
        assert (got.experiments, got.digest, got.exploratory) == (whole.experiments, whole.digest, whole.exploratory)
    data = build_manifest([EXP], files).to_bytes()
    for other in (data.replace(b'"files":[', b'"files": ['), data.replace(b"\xc3\xa9", b"\\u00e9"),
                  data.replace(b",{", b", {", 1), jsonio.dumps_pretty(jsonio.loads(data)).encode()):
        assert _canonical_manifest(other, _names([])) is None
    for bad in (data.replace(b"}]", b"},]"), data.replace(b'[{"digest"', b'[,{"digest"'), data[:-30]):
        try:
            assert _canonical_manifest(bad, _names([])) is None
        except UnreadableBundle:
            pass  # the rest of it is not JSON: parse_manifest says so, as for the whole


def test_shared_run_record_values_are_equal_and_never_conflate_json_types():
    shared: dict = {}
    a = _shared({"task": {"id": "x", "n": 1}, "p": {"v": True}, "q": [1.0]}, shared)
    b = _shared({"task": {"id": "x", "n": 1}, "p": {"v": 1}, "q": [1]}, shared)
    assert a["task"] is b["task"]  # the same JSON: held once
    assert b == {"task": {"id": "x", "n": 1}, "p": {"v": 1}, "q": [1]}
    assert b["p"]["v"] is not True and type(b["q"][0]) is int  # 1, true and 1.0 stay apart
    assert a["p"]["v"] is True and type(a["q"][0]) is float


def test_an_object_reading_kept_marshalled_reads_back_as_its_fields():
    fields = (("r", 4096, 10, 11, [6, "ab"], 12, None), "a reply \udcff", b"\x00bytes")
    assert unkept(kept(*fields)) == ObjectReading(*fields)


@pytest.mark.parametrize("data", [None, b"", b"N", b"\x00N", b"x" * 300])
def test_a_kept_reading_says_whether_it_holds_the_object_bytes(data):
    for derived, text in ((None, None), (("u", 1, 2), None), (None, "N")):
        got = kept(derived, text, data)
        assert holds_bytes(got) is (data is not None)
        assert unkept(got) == ObjectReading(derived, text, data)


@pytest.mark.parametrize("piece", [1 << 20, 64])  # one seal, or a seal every 64 bytes read a piece at a time
@pytest.mark.parametrize("at", [40, -40])
def test_bytes_read_again_that_differ_from_those_hashed_stop_the_verifier(monkeypatch, piece, at):
    monkeypatch.setattr(_index, "_PIECE", piece)
    data = ledger_bytes(5)
    held = bytearray(data)
    log = _ledger("ledgers/x.jsonl", data, (span(data, held), True))
    assert len(list(log)) == 5 and log[2].seq == 2
    assert len(log.packed.seal) == 16 * -(-len(data) // piece)
    held[at] = ord("X") if held[at] != ord("X") else ord("Y")  # the file changed under the verifier
    with pytest.raises(UnreadableBundle, match="changed while it was being verified"):
        list(log)
    del held[-3:]  # and truncated
    with pytest.raises(UnreadableBundle, match="changed while it was being verified"):
        list(log)


def test_a_ledger_book_keeps_the_fields_the_tie_reads_as_the_bodies_read():
    from benchclaw.verify._ledgers import Book

    book = Book()
    book.reserve({"attempt": "a", "id": "r1", "key": "0.0", "tokens": 7, "usd": "0.5"}, 2)
    book.reserve({"attempt": "a", "id": "r2", "key": "1.0", "tokens": 10 ** 30, "usd": "1"}, 3)
    book.reserve({"attempt": None, "id": "r3", "key": "0.0", "tokens": 1, "usd": "2"}, 4)
    book.settle({"id": "r1", "known": False, "tokens": 7, "usd": "0.5", "reason": {"why": [1.0]}}, 5)
    book.reserve({"attempt": "a", "id": "r4", "key": "0.0", "tokens": 8, "usd": "0.6"}, 6)  # 0.0 again: this one
    assert list(book.open) == ["r2", "r3", "r4"]
    assert book.find("a", "1.0") == 1 and book.find(None, "0.0") == 2 and book.find("a", "0.0") == 3
    assert book.find("a", "2.0") is None and book.find("b", "0.0") is None
    assert book.reservation(1) == (3, 10 ** 30, "1") and book.reservation(3).usd == "0.6"
    assert book.settlement(0) == (5, False, 7, "0.5", {"why": [1.0]}) and book.settlement(3) is None
    assert list(book.keyed()) == [(1, "a", "1.0"), (2, None, "0.0"), (3, "a", "0.0")]
    assert book.first_reused([]) is None


def test_a_ledger_book_finds_an_id_reused_after_its_settlement_by_reading_the_ids_again():
    from benchclaw.verify._index import Rec
    from benchclaw.verify._ledgers import Book

    bodies = [("reserve", {"attempt": "a", "id": "x", "key": "0.0", "tokens": 1, "usd": "1"}),
              ("settle", {"id": "x", "known": True, "tokens": 1, "usd": "1"}),
              ("reserve", {"attempt": "a", "id": "y", "key": "1.0", "tokens": 1, "usd": "1"}),
              ("reserve", {"attempt": "a", "id": "x", "key": "2.0", "tokens": 1, "usd": "1"})]
    records = [Rec(i, "", kind, body) for i, (kind, body) in enumerate(bodies)]
    book = Book()
    for line, rec in enumerate(records, 2):
        (book.reserve if rec.kind == "reserve" else book.settle)(rec.body, line)
    assert book.first_reused(records) == (5, "x")
    book._id_hash[1] = book._id_hash[0]  # two ids hashed alike but not equal: read again, no reuse
    book._id_hash[2] = 7
    assert book.first_reused(records) is None


def test_digests_of_objects_named_by_their_hash_read_as_the_strings():
    from benchclaw.verify._index import NAMED, Digests

    h, g, u = "ab" + "0" * 62, "cd" + "1" * 62, "ef" + "2" * 62
    sizes = {f"objects/ab/{h}": 1, f"objects/cd/{g}": 2, f"objects/ef/{u}": 3, "runs/x": 4, "objects/zz": 5}
    unread = {f"objects/ef/{u}": "could not inflate"}
    odd = {"runs/x": "sha256:" + "1" * 64, "objects/zz": "sha256:" + "3" * 64, f"objects/cd/{g}": NAMED}
    got = Digests(odd, sizes, unread)  # objects/ab: read, not in the dict, so named; objects/ef: unread
    for name, want in ((f"objects/ab/{h}", h), (f"objects/cd/{g}", g)):
        assert got[name] == got.get(name) == "sha256:" + want and name in got
    assert got.get("runs/x") == "sha256:" + "1" * 64 and got["objects/zz"] == "sha256:" + "3" * 64
    assert got.get("nope") is None and got.get("nope", 3) == 3 and got.get(f"objects/ef/{u}") is None
    assert "nope" not in got and f"objects/ef/{u}" not in got and "objects/ab/" + "0" * 64 not in got
    assert dict(got) == {"runs/x": "sha256:" + "1" * 64, "objects/zz": "sha256:" + "3" * 64,
                         f"objects/cd/{g}": "sha256:" + g, f"objects/ab/{h}": "sha256:" + h}
    assert len(got) == 4
    for missing in ("nope", f"objects/ef/{u}", 7):
        with pytest.raises(KeyError):
            got[missing]


@pytest.mark.parametrize("method", [0, 8])
def test_a_ledger_streamed_from_the_zip_reads_as_the_ledger_inflated_whole(monkeypatch, method):
    """A ledger is inflated, hashed and chain-checked a piece at a time; what the index keeps
    is what reading it whole gives. A corrupt entry or a broken chain is read whole
    instead, which says what is wrong as it always did."""
    import hashlib

    from benchclaw.verify import _reading
    from benchclaw.verify._zip import Limits, ZipView

    monkeypatch.setattr(_reading, "_PIECE", 700)  # many pieces, lines cut across them
    data = ledger_bytes(200)
    name = "ledgers/x.jsonl"
    bad = data.replace(b'"tokens":7', b'"tokens":8', 1)
    zipped = raw_zip([RawEntry(name.encode(), data, method=method), RawEntry(b"b", bad, method=method),
                      RawEntry(b"c", data, method=method, crc=1)])
    view = ZipView(zipped, Limits())
    archive = Archive(lambda offset, n: zipped[offset:offset + n])
    got, digest = _reading._streamed_ledger(_reading._Pages(zipped), view, archive, name)
    whole = _ledger(name, data, (got.packed, got.stored))
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert (got.count, got.first, got.last, got.earliest) == (whole.count, whole.first, whole.last, whole.earliest)
    assert list(got) == list(whole)
    for other in ("b", "c"):  # a broken chain, a wrong CRC: read whole
        assert _reading._streamed_ledger(_reading._Pages(zipped), view, archive, other) is None


def test_a_journal_with_its_runs_spilled_reads_as_its_records():
    from benchclaw.verify._index import Journal, Spill

    items = [("journals/E/a.jsonl", 1, Rec(0, "2026-01-01T00:00:00.000000Z", "grid.start", {"ledger": "L1"})),
             ("journals/E/a.jsonl", 2, Rec(1, "2026-01-01T00:00:01.000000Z", "run",
                                           {"run_id": "r1", "cost": {"low": "0.1", "known": True}, "trial": None})),
             ("journals/E/a.jsonl", 3, Rec(2, "2026-01-01T00:00:02.000000Z", "run", {"x": object()})),  # not marshalled
             ("journals/E/a.jsonl", 4, Rec(3, "2026-01-01T00:00:03.000000Z", "grid.end", {"runs": 1}))]
    spill = Spill()
    try:
        journal = Journal(spill, iter(items))
        assert list(journal) == items and len(journal) == 4 and journal[-1] == items[-1]
        assert journal[1:3] == items[1:3] and journal[1] is not journal[1]  # a run's record, read again
        assert journal[0] is items[0] and journal[2] is items[2]  # held as it is: the same object
        with pytest.raises(IndexError):
            journal[4]
    finally:
        spill.close()


def test_a_canonical_manifest_read_a_piece_at_a_time_is_the_manifest_parsed_whole(monkeypatch):
    """The reading stage inflates the manifest a piece at a time and reads its rows as they
    come, rows cut across pieces; a row longer than it looks ahead is parsed whole."""
    from benchclaw.verify import _reading
    from benchclaw.verify.manifest import parse_manifest

    monkeypatch.setattr(_reading, "_ROW_BYTES", 300)
    files = {f"tasks/t{i}/file-{i}.txt": b"x" * i for i in range(40)}
    files["VERSION"] = b"1"
    data = build_manifest([EXP], files).to_bytes()
    whole = parse_manifest(data)
    for size in (1, 7, 100, 1000, len(data)):
        got = _reading._canonical_manifest((data[i:i + size] for i in range(0, len(data), size)), _names([]))
        assert got is not None and list(got.files) == list(whole.files) and got.digest == whole.digest
    long = build_manifest([EXP], {"a/" + "b" * 400: b"1"}).to_bytes()
    assert _reading._canonical_manifest((long[i:i + 100] for i in range(0, len(long), 100)), _names([])) is None
    assert list(_reading._canonical_manifest(iter([long]), _names([])).files) == list(parse_manifest(long).files)


@pytest.mark.parametrize("stored", [True, False])
def test_an_entry_inflated_from_pieces_is_the_entry_inflated_whole(monkeypatch, stored):
    import zlib

    from benchclaw.verify import _reading

    monkeypatch.setattr(_reading, "_PIECE", 500)
    data = ledger_bytes(50)
    packed = data if stored else _deflate(data)
    for size in (1, 333, len(packed)):
        pieces = [packed[i:i + size] for i in range(0, len(packed), size)]
        assert b"".join(_reading._inflated(iter(pieces), stored, len(data))) == data
    with pytest.raises(_reading._Broken):
        list(_reading._inflated(iter([packed]), stored, len(data) - 1))  # past its size
    if not stored:
        for bad in (packed[:-5], packed + b"x"):  # truncated, extra bytes
            with pytest.raises(_reading._Broken):
                list(_reading._inflated(iter([bad]), stored, len(data)))


def _deflate(data: bytes) -> bytes:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()
