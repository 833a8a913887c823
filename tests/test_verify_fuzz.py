"""Fuzzing the verifier: hostile zip bytes, manifests and record contents never crash it.

"Never crash" is checked strictly: ``verify_bundle`` returns a report (it never raises),
and no failure is the catch-all "recomputation failed" (which would mean a step tripped
over input instead of naming what differs). "Never hang" is the per-example deadline.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchclaw.formats import jsonio
from benchclaw.bundle import export_bundle
from benchclaw.verify import verify_bundle

from tests.test_bundle_support import EXP, Forger, RawEntry, honest_runs, raw_zip

FUZZ = settings(max_examples=60, deadline=3000, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


class Quiet(bytes):
    """Bundle bytes that print short in a falsifying example."""

    def __repr__(self) -> str:
        return f"<bundle of {len(self)} bytes>"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("fuzz")
    honest_runs(root / "runs", cells=((1, "lightning", False), (1, "super", True)))
    export_bundle(root / "runs", EXP, root / "b.zip")
    return Quiet((root / "b.zip").read_bytes())


def sound(rep) -> None:
    texts = [str(f) for _, f in rep.failures()]
    assert not any("recomputation failed" in t for t in texts), texts
    assert rep.exit_code in (0, 1, 2)
    rep.to_dict()  # the report always renders


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_are_unreadable_never_a_crash(data):
    rep = verify_bundle(data)
    sound(rep)
    assert rep.exit_code == 2


@FUZZ
@given(st.data())
def test_mutated_bundle_bytes_fail_or_keep_their_identity(small, data):
    original = verify_bundle(small).manifest_digest
    buf = bytearray(small)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, len(buf) - 1))
        if op == "flip":
            buf[pos] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del buf[pos:pos + data.draw(st.integers(1, 64))]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=64))
        if not buf:
            buf = bytearray(b"x")
    rep = verify_bundle(bytes(buf))
    sound(rep)
    if rep.exit_code == 0:  # only fields nobody interprets changed (versions, attributes)
        assert rep.manifest_digest == original


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=30) |
    st.sampled_from(["sha256:" + "0" * 64, "0", "1.5", "E01", "runs/aa/x.jsonl", "../x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["v", "format", "experiments", "files", "path", "digest", "size", "x"]),
        inner, max_size=5),
    max_leaves=25)


@FUZZ
@given(json_values)
def test_fuzzed_manifest_contents_never_crash(value):
    manifest = jsonio.dumps(value)
    rep = verify_bundle(raw_zip([RawEntry(b"manifest.json", manifest), RawEntry(b"VERSION", b"x")]))
    sound(rep)
    assert rep.exit_code in (1, 2)


@FUZZ
@given(st.data())
def test_fuzzed_manifest_rows_for_real_entries_never_crash(small, data):
    f = Forger.of(small)
    m = jsonio.loads(f.files["manifest.json"])
    row = data.draw(st.sampled_from(m["files"]))
    key = data.draw(st.sampled_from(["path", "digest", "size"]))
    row[key] = data.draw(json_values)
    from tests.test_bundle_support import pack

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        out = pack(f.files, Path(d), manifest=jsonio.dumps(m), fix_manifest=False)
    rep = verify_bundle(out)
    sound(rep)
    assert rep.exit_code in (1, 2)


@FUZZ
@given(st.data())
def test_fuzzed_record_bodies_in_a_consistent_forgery_never_crash(small, data):
    """Any field of any record replaced by any JSON value, every digest redone."""
    f = Forger.of(small)
    run_id = data.draw(st.sampled_from(f.run_ids()))
    n = len(f.records(run_id))
    index = data.draw(st.integers(0, n - 1))
    value = data.draw(json_values)

    def edit(objs):
        body = objs[index]["body"]
        keys = sorted(body) or ["x"]
        key = data.draw(st.sampled_from(keys))
        if isinstance(body.get(key), dict) and body[key] and data.draw(st.booleans()):
            body = body[key]
            key = data.draw(st.sampled_from(sorted(body)))
        body[key] = value
        return objs
    f.edit_run(run_id, edit)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        try:
            out = f.pack(Path(d))
        except Exception:  # the forger's own summary could not be computed: pack the claim as is
            out = f.pack(Path(d), resummarise=False)
    sound(verify_bundle(out))
