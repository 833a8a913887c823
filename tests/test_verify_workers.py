"""The forked verification worker: steps 6-8 run on a second core, and whatever goes wrong
in that child is a clean answer (exit 2, or a failed section), never a hang or a traceback.

Each case swaps one of the steps that run in the child for a misbehaving one; the parent
runs steps 1-5 as usual.
"""

import os
import time

import pytest

from benchclaw.bundle import export_bundle
from benchclaw.verify import Limits, verify_bundle, verifier

from tests.test_bundle_support import EXP, honest_runs

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the worker forks")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("workers")
    honest_runs(root / "runs")
    export_bundle(root / "runs", EXP, root / "b.zip")
    return (root / "b.zip").read_bytes()


def _with_summary_step(monkeypatch, step) -> None:
    steps = verifier.STEPS()
    swapped = tuple((name, step if name == "summary" else fn) for name, fn in steps)
    monkeypatch.setattr(verifier, "STEPS", lambda: swapped)


def test_the_sections_computed_in_the_worker_reach_the_report(bundle):
    rep = verify_bundle(bundle)
    assert rep.exit_code == 0, rep.to_dict()
    for name in ("summary", "prereg", "complete"):
        assert rep.section(name).ran and rep.section(name).counts, name


def test_a_worker_that_dies_is_a_clean_exit_2(bundle, monkeypatch):
    _with_summary_step(monkeypatch, lambda b, sec: os._exit(7))
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2
    assert "worker crashed" in rep.fatal.message and "exit status 7" in rep.fatal.message
    assert rep.section("ledgers").ran  # the parent's steps still ran


def test_a_worker_that_hangs_is_stopped_at_the_limit(bundle, monkeypatch):
    _with_summary_step(monkeypatch, lambda b, sec: time.sleep(60))
    t0 = time.monotonic()
    rep = verify_bundle(bundle, limits=Limits(worker_seconds=1))
    assert time.monotonic() - t0 < 30
    assert rep.exit_code == 2
    assert "took longer than 1 s" in rep.fatal.message
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # the child was reaped, no zombie left


def test_a_step_that_raises_in_the_worker_fails_its_section_only(bundle, monkeypatch):
    def broken(b, sec):
        raise KeyError("boom")
    _with_summary_step(monkeypatch, broken)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 1
    assert [f.message for f in rep.section("summary").failures] == ["recomputation failed: KeyError: 'boom'"]
    assert rep.section("prereg").ok and rep.section("complete").ok


def test_an_unreadable_verdict_in_the_worker_stops_the_verification(bundle, monkeypatch):
    from benchclaw.verify import UnreadableBundle

    def unreadable(b, sec):
        raise UnreadableBundle("summary.json", "not a readable bundle: crafted")
    _with_summary_step(monkeypatch, unreadable)
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2
    assert (rep.fatal.path, rep.fatal.message) == ("summary.json", "not a readable bundle: crafted")


def test_an_object_hashing_worker_that_dies_is_a_clean_exit_2(bundle, monkeypatch):
    from benchclaw.verify import _container

    monkeypatch.setattr(_container, "_hash_objects", lambda b, names: os._exit(9))
    rep = verify_bundle(bundle)
    assert rep.exit_code == 2
    assert "worker crashed" in rep.fatal.message and "exit status 9" in rep.fatal.message
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left behind


def test_a_corrupt_object_is_reported_by_the_container_step_from_the_worker(bundle):
    import zipfile, io
    src = zipfile.ZipFile(io.BytesIO(bundle))
    name = next(n for n in src.namelist() if n.startswith("objects/"))
    info = src.getinfo(name)
    data = bytearray(bundle)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF  # corrupt the member's bytes, not its headers
    rep = verify_bundle(bytes(data))
    assert rep.exit_code == 1
    assert any(f.path == name for f in rep.section("container").failures), rep.to_dict()


def test_step_4_reads_from_the_hashing_worker_only_what_it_would_accept_itself():
    from benchclaw.verify._costs import derive

    req = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":64}'
    kind, max_tokens, estimate, sim_prompt, conversation = derive(req)
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
