"""The path rules an agent meets: what is folded, what is refused, and what each task allows."""

import re

import pytest
from hypothesis import given, settings, strategies as st

from benchclaw.agent.paths import PathDenied, decide, normalise

PERMS = dict(readable=["docs/*.md"], writable=["out/*.json"], inputs={"docs/a.md", "secrets/k.txt"})


@pytest.mark.parametrize("raw, canonical", [
    ("docs/a.md", "docs/a.md"),
    ("./docs/a.md", "docs/a.md"),
    ("docs//a.md", "docs/a.md"),
    ("docs/./a.md", "docs/a.md"),
    ("my notes.md", "my notes.md"),
])
def test_harmless_spellings_fold_to_one_path(raw, canonical):
    assert normalise(raw) == canonical


@pytest.mark.parametrize("raw, why", [
    ("../secrets/k.txt", "'..'"),
    ("docs/../../etc/passwd", "'..'"),
    ("docs/..", "'..'"),
    ("/etc/passwd", "absolute"),
    ("docs\\a.md", "backslash"),
    ("..\\..\\x", "backslash"),
    ("docs/a.md\x00.json", "NUL"),
    ("docs/\uff41.md", "NFKC"),                # fullwidth a
    ("docs\u2215a.md", "non-ASCII"),           # division slash looks like '/'
    ("docs/\u0430.md", "non-ASCII"),           # Cyrillic a: NFKC keeps it, still refused
    ("docs/a\u200b.md", "non-ASCII"),          # zero-width space
    ("docs/a.md\n", "control"),
    ("C:/docs/a.md", "':'"),
    ("file:docs/a.md", "':'"),
    ("", "empty"),
    ("   ", "empty"),
    (" docs/a.md", "white space"),
    ("docs/", "folder"),
    (".", "workspace itself"),
    ("x" * 300, "longer"),
    ("/".join(["d"] * 20), "deeper"),
    (None, "string"),
    (7, "string"),
])
def test_ambiguous_or_escaping_paths_are_refused_with_a_reason(raw, why):
    with pytest.raises(PathDenied, match=re.escape(why)):
        normalise(raw)


def test_reads_follow_the_readable_globs_and_may_read_back_writable_paths():
    assert decide("read", "docs/a.md", **PERMS).permitted
    assert decide("read", "out/answer.json", **PERMS).permitted
    d = decide("read", "secrets/k.txt", **PERMS)
    assert not d.permitted and "not readable" in d.reason
    assert not decide("read", "docs/sub/a.md", **PERMS).permitted  # '*' stays in one folder


def test_writes_follow_the_writable_globs_and_never_overwrite_inputs_unless_allowed():
    assert decide("write", "out/answer.json", **PERMS).permitted
    assert "not writable" in decide("write", "notes.txt", **PERMS).reason
    perms = dict(PERMS, writable=["**"])
    d = decide("write", "docs/a.md", **perms)
    assert not d.permitted and "input file" in d.reason
    assert decide("write", "docs/a.md", **perms, overwrite_inputs=True).permitted


def test_a_denied_path_reports_the_normalised_path_or_none():
    assert decide("write", "./notes.txt", **PERMS).path == "notes.txt"
    assert decide("write", "../notes.txt", **PERMS).path is None


def test_unknown_operation_is_a_bug_not_a_denial():
    with pytest.raises(ValueError):
        decide("delete", "docs/a.md", **PERMS)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(alphabet="./\\\x00ab:*~ ", max_size=20)), st.sampled_from(["read", "write"]))
def test_any_string_decides_without_raising_and_permits_only_clean_matching_paths(raw, op):
    d = decide(op, raw, **PERMS)
    if d.permitted:
        assert d.path is not None and d.path.isascii() and ".." not in d.path.split("/")
        assert not d.path.startswith("/") and "\\" not in d.path and "\x00" not in d.path
        if op == "write":
            assert d.path.startswith("out/") and d.path.endswith(".json") and d.path.count("/") == 1
        else:
            assert d.path.count("/") == 1 and d.path.split("/")[0] in ("docs", "out")
