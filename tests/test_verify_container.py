"""Step 1 and the zip reader: every container attack is refused with a precise message.

Each case names the attack, the exit code an auditor gets (2: not a readable bundle;
1: readable, but the evidence does not match its manifest) and the words that say why.
"""

import io
import struct
import zipfile

import pytest

from benchclaw.verify import Limits, verify_bundle
from benchclaw.verify._zip import ZipView

from tests.test_bundle_support import RawEntry, manifest_for, raw_zip

GOOD = {b"VERSION": b"benchclaw-runs 1\n", b"summary.json": b"{}"}


def good_entries(**over) -> list[RawEntry]:
    files = dict(GOOD)
    items = [RawEntry(b"manifest.json", manifest_for(files))]
    items += [RawEntry(k, v) for k, v in files.items()]
    return items


def fatal(data: bytes, **kw) -> str:
    rep = verify_bundle(data, **kw)
    assert rep.exit_code == 2, rep.to_dict()
    return str(rep.fatal)


def container_failures(data: bytes) -> list[str]:
    rep = verify_bundle(data)
    assert rep.fatal is None, rep.fatal
    return [str(f) for f in rep.section("container").failures]


def test_a_well_formed_container_passes_step_one():
    rep = verify_bundle(raw_zip(good_entries()))
    assert rep.fatal is None
    sec = rep.section("container")
    assert sec.ok and sec.counts["entries"] == 3
    assert rep.exit_code == 1  # no runs: later steps fail closed
    assert "holds no runs" in str(rep.section("runs").failures[0])


@pytest.mark.parametrize("attack, make, words", [
    ("not a zip", lambda: b"hello, auditor" * 10, "no end-of-central-directory"),
    ("empty file", lambda: b"", "too short"),
    ("truncated tail", lambda: raw_zip(good_entries())[:-7], "end-of-central-directory"),
    ("truncated middle", lambda: (lambda z: z[:40] + z[-22:])(raw_zip(good_entries())), "central directory"),
    ("path traversal", lambda: raw_zip([RawEntry(b"../evil", b"x")]), "path traversal"),
    ("nested traversal", lambda: raw_zip([RawEntry(b"runs/../../evil", b"x")]), "path traversal"),
    ("absolute name", lambda: raw_zip([RawEntry(b"/etc/passwd", b"x")]), "absolute"),
    ("windows drive", lambda: raw_zip([RawEntry(b"C:/x", b"x")]), "colon"),
    ("backslash", lambda: raw_zip([RawEntry(b"runs\\x", b"x")]), "backslash"),
    ("symlink", lambda: raw_zip([RawEntry(b"link", b"/etc/passwd", external_attr=0o120777 << 16)]),
     "symbolic link"),
    ("device file", lambda: raw_zip([RawEntry(b"dev", b"", external_attr=0o020644 << 16)]), "not a regular file"),
    ("directory entry", lambda: raw_zip([RawEntry(b"runs/", b"")]), "directory entry"),
    ("encrypted", lambda: raw_zip([RawEntry(b"a", b"secret", flags=1)]), "encrypted"),
    ("data descriptor", lambda: raw_zip([RawEntry(b"a", b"x", flags=8)]), "data descriptor"),
    ("bzip2 method", lambda: raw_zip([RawEntry(b"a", b"x", method=12)]), "compression method 12"),
    ("duplicate names", lambda: raw_zip([RawEntry(b"a", b"1"), RawEntry(b"a", b"2")]), "duplicate entry"),
    ("names differ by case", lambda: raw_zip([RawEntry(b"Summary.json", b"1"), RawEntry(b"summary.json", b"2")]),
     "differs only by case"),
    ("names differ by normalisation", lambda: raw_zip([
        RawEntry("caf\u00e9".encode(), b"1", flags=0x800),
        RawEntry("cafe\u0301".encode(), b"2", flags=0x800)]), "Unicode normalisation"),
    ("non-UTF-8 name", lambda: raw_zip([RawEntry(b"\xff\xfe", b"1")]), "not UTF-8"),
    ("non-ASCII without UTF-8 flag", lambda: raw_zip([RawEntry("é".encode(), b"1")]), "UTF-8 flag"),
    ("control character", lambda: raw_zip([RawEntry(b"a\nb", b"1")]), "control character"),
    ("local name disagrees", lambda: raw_zip([RawEntry(b"a.json", b"1", local_name=b"b.json")]), "disagree"),
    ("local crc disagrees", lambda: raw_zip([RawEntry(b"a", b"1", local_crc=123)]), "disagree"),
    ("prepended bytes", lambda: raw_zip(good_entries(), prefix=b"MZ" + b"\0" * 30), "unlisted bytes"),
    ("trailing bytes", lambda: raw_zip(good_entries(), suffix=b"junk"), "end-of-central-directory"),
    ("entry count lies", lambda: raw_zip(good_entries(), count=5), "central directory"),
    ("two entries share data", lambda: raw_zip([RawEntry(b"a", b"1"), RawEntry(b"b", b"1", offset=0)]),
     "disagree"),
])
def test_container_attack_is_refused_as_unreadable(attack, make, words):
    assert words in fatal(make()), attack


def test_overlapping_entries_are_refused():
    inner = raw_zip([RawEntry(b"b", b"hidden", method=0)])
    local_b = inner[:inner.index(b"PK\x01\x02")]
    outer = RawEntry(b"a", b"pad" + local_b, method=0)
    data = raw_zip([outer, RawEntry(b"b", b"hidden", method=0, offset=30 + 1 + 3)])
    # the second central entry points inside the first entry's data, at a genuine local header
    assert "entry 'b' overlaps the entry before it" in fatal(data)


def test_zip_bomb_ratio_and_size_limits():
    bomb = raw_zip([RawEntry(b"a", b"\0" * (3 << 20))])
    assert "compression ratio" in fatal(bomb)
    assert "above the limit" in fatal(raw_zip([RawEntry(b"a", b"x" * 5000)]), limits=Limits(entry_bytes=4096))
    many = raw_zip([RawEntry(f"f{i}".encode(), b"x") for i in range(20)])
    assert "20 entries, above the limit" in fatal(many, limits=Limits(entries=10))
    assert "inflate to more than" in fatal(many, limits=Limits(total_bytes=10))
    assert "above the limit" in fatal(many, limits=Limits(archive_bytes=100))
    long = raw_zip([RawEntry(b"a" * 600, b"x")])
    assert "longer than 512" in fatal(long)


def test_a_lying_size_never_inflates_past_its_header():
    # both headers say 10 bytes; the deflate stream holds a megabyte of zeros
    lie = RawEntry(b"summary.json", b"\0" * (1 << 20), usize=10)
    files = {**GOOD, b"summary.json": b"\0" * 10}
    data = raw_zip([RawEntry(b"manifest.json", manifest_for(files)), RawEntry(b"VERSION", GOOD[b"VERSION"]), lie])
    fails = container_failures(data)
    assert any("summary.json: inflates beyond the 10 bytes its header declares" in f for f in fails), fails


def test_corrupt_member_is_a_mismatch_not_a_crash():
    data = bytearray(raw_zip(good_entries()))
    pos = data.index(b"summary.json") + len(b"summary.json")  # first byte of its data
    data[pos] ^= 0xFF
    rep = verify_bundle(bytes(data))
    assert rep.exit_code in (1, 2)
    text = " ".join(str(f) for _, f in rep.failures())
    assert "summary.json" in text and ("CRC" in text or "deflate" in text or "disagree" in text)


def test_missing_or_bad_manifest_is_unreadable():
    assert "no manifest.json" in fatal(raw_zip([RawEntry(b"VERSION", b"x")]))
    assert "not JSON" in fatal(raw_zip([RawEntry(b"manifest.json", b"{nope")]))
    wrong = b'{"v": 9, "format": "benchclaw-bundle", "experiments": ["E01"], "files": []}'
    assert "version 9" in fatal(raw_zip([RawEntry(b"manifest.json", wrong)]))
    deep = b'{"v":1,"format":"benchclaw-bundle","experiments":["E01"],"files":' + b"[" * 100 + b"]" * 100 + b"}"
    assert "manifest.json" in fatal(raw_zip([RawEntry(b"manifest.json", deep)]))
    row = b'{"v":1,"format":"benchclaw-bundle","experiments":["E01"],"files":[{"path":"a","digest":"md5:x","size":1}]}'
    assert "files[0].digest" in fatal(raw_zip([RawEntry(b"manifest.json", row)]))


@pytest.mark.parametrize("edit, words", [
    ("unlisted", "VERSION: in the bundle but not listed in the manifest"),
    ("missing", "ghost.txt: listed in the manifest but missing"),
    ("size", "summary.json: size is 2 bytes, the manifest says 3"),
    ("digest", "summary.json: SHA-256 is sha256:"),
    ("duplicate", "summary.json is listed twice"),
])
def test_manifest_mismatch_is_exit_one_and_names_the_entry(edit, words):
    files = dict(GOOD)
    listed = dict(files)
    if edit == "unlisted":
        del listed[b"VERSION"]
    elif edit == "missing":
        listed[b"ghost.txt"] = b"boo"
    elif edit == "size":
        listed[b"summary.json"] = b"{ }"
    elif edit == "digest":
        listed[b"summary.json"] = b"[]"
    manifest = manifest_for(listed)
    if edit == "duplicate":
        import json

        m = json.loads(manifest)
        m["files"].append(m["files"][-1])
        manifest = json.dumps(m).encode()
    data = raw_zip([RawEntry(b"manifest.json", manifest)] + [RawEntry(k, v) for k, v in files.items()])
    rep = verify_bundle(data)
    assert rep.exit_code == 1
    assert any(words in str(f) for f in rep.section("container").failures), rep.section("container").failures


def test_zip64_end_records_are_understood():
    # more than 65535 entries makes zipfile write zip64 end records
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for i in range(65537):
            zf.writestr(f"f{i}", b"")
    view = ZipView(buf.getvalue())
    assert len(view.entries) == 65537 and view.read("f65536") == b""


def test_reading_from_a_path_and_refusing_a_directory(tmp_path):
    p = tmp_path / "b.zip"
    p.write_bytes(raw_zip(good_entries()))
    assert verify_bundle(p).fatal is None
    assert "is a directory" in str(verify_bundle(tmp_path).fatal)
    assert "cannot read" in str(verify_bundle(tmp_path / "nope.zip").fatal)


def test_struct_sizes_match_the_zip_spec():
    from benchclaw.verify import _zip

    assert (_zip._CENTRAL.size, _zip._LOCAL.size, _zip._EOCD.size) == (46, 30, 22)
    assert (_zip._Z64_LOC.size, _zip._Z64_EOCD.size) == (20, 56)
    assert struct.calcsize("<4s4H2LH") == 22


@pytest.mark.parametrize("name", ["objects/ab/" + "c" * 64, "a", "A/B", ".a", "..a", "a/...", "a.b/c..d", ".", "..",
                                  "a/./b", "a/../b", "a//b", "/a", "a/", "a/..", "a/.", "a\\b", "a:b", "a\nb",
                                  "a\x00", "\ufb01", "K", "\u212a", "a b"])
def test_the_plain_name_shortcut_accepts_only_what_the_full_rules_accept_and_folds_alike(name):
    from benchclaw.formats.names import entry_name_fold, entry_name_problem
    from benchclaw.verify._zip import _PLAIN_NAME

    if _PLAIN_NAME.match(name):
        assert entry_name_problem(name) is None and entry_name_fold(name) == name.lower()
    else:
        assert entry_name_problem(name) is not None or not name.isascii() or " " in name


def test_names_equal_but_for_case_collide_on_the_plain_name_shortcut_too():
    from benchclaw.verify._errors import UnreadableBundle

    with pytest.raises(UnreadableBundle, match="differs only by case"):
        ZipView(raw_zip([RawEntry(b"tasks/a/x", b"1"), RawEntry(b"tasks/A/x", b"2")]))


@pytest.mark.parametrize("second", ["objects/AB/ab" + "c" * 62, "objects/ab/AB" + "C" * 62, "objects/ab/ab" + "c" * 62])
@pytest.mark.parametrize("object_first", [True, False])
def test_an_object_entry_name_kept_as_its_digest_still_collides_with_a_name_equal_but_for_case(second, object_first):
    from benchclaw.verify._errors import UnreadableBundle

    first = b"objects/ab/ab" + b"c" * 62
    pair = [RawEntry(first, b"1"), RawEntry(second.encode(), b"2")]
    words = "duplicate entry" if second.encode() == first else "differs only by case"
    with pytest.raises(UnreadableBundle, match=words):
        ZipView(raw_zip(pair if object_first else pair[::-1]))


def _object(data: bytes) -> tuple[bytes, str]:
    import hashlib

    hexd = hashlib.sha256(data).hexdigest()
    return f"objects/{hexd[:2]}/{hexd}".encode(), "sha256:" + hexd


@pytest.mark.parametrize("edit, step, words", [
    # steps 1 and 2 compare object entries by their position in the zip, no name made: each
    # way an object entry or its row can be wrong is still found, and said as before
    ("bytes", "container", "SHA-256 is sha256:"),
    ("bytes", "runs", "object bytes hash to sha256:"),
    ("row digest", "container", "the manifest says sha256:"),
    ("row size", "container", "size is 3 bytes, the manifest says 4"),
    ("listed twice", "container", "is listed twice"),
    ("unlisted", "container", "in the bundle but not listed in the manifest"),
    ("missing", "container", "listed in the manifest but missing from the bundle"),
    ("odd name", "runs", "objects/odd: not an object name"),
])
def test_object_entries_are_checked_by_position_as_by_name(edit, step, words):
    import json

    name, digest = _object(b"obj")
    files = {**GOOD, name: b"obj"}
    manifest = json.loads(manifest_for(files))
    rows = {r["path"]: r for r in manifest["files"]}
    if edit == "bytes":
        files[name] = b"jbo"
    elif edit == "row digest":
        rows[name.decode()]["digest"] = _object(b"other")[1]
    elif edit == "row size":
        rows[name.decode()]["size"] = 4
    elif edit == "listed twice":
        manifest["files"].append(rows[name.decode()])
    elif edit == "unlisted":
        manifest["files"].remove(rows[name.decode()])
    elif edit == "missing":
        del files[name]
    elif edit == "odd name":
        files[b"objects/odd"] = b"x"
        manifest = json.loads(manifest_for(files))
    data = raw_zip([RawEntry(b"manifest.json", json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())]
                   + [RawEntry(k, v) for k, v in files.items()])
    rep = verify_bundle(data)
    assert rep.fatal is None, rep.fatal
    failures = [str(f) for f in rep.section(step).failures]
    assert any(words in f for f in failures), failures
