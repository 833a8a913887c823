"""The verifier's report sections: a check taken early (``outcome_of``) and reported later
(``raised``) lands in its section exactly as ``Section.attempt`` of the check would have."""

import pytest

from benchclaw.verify._errors import UnreadableBundle, VerificationError
from benchclaw.verify._report import Section, outcome_of, raised


def _holds():
    return None


def _fails(path):
    raise VerificationError(path, "does not hold", 3)


def _breaks():
    raise TypeError("crafted")


def _unreadable():
    raise UnreadableBundle("", "changed")


def test_a_deferred_check_reports_as_attempt_would():
    now, later = Section(7, "prereg", "t"), Section(7, "prereg", "t")
    got = [outcome_of(_holds), outcome_of(_fails, "runs/a"), outcome_of(_fails, "runs/b")]
    assert [now.attempt(_holds), now.attempt(_fails, "runs/a"), now.attempt(_fails, "runs/b")] == \
        [later.attempt(raised, g) for g in got] == [True, False, False]
    assert [str(e) for e in later.failures] == [str(e) for e in now.failures]
    assert later.failure_count == now.failure_count == 2


def test_a_deferred_exception_is_raised_where_the_check_would_be():
    got = outcome_of(_breaks)
    assert isinstance(got, TypeError) and got.__traceback__ is None
    with pytest.raises(TypeError, match="crafted"):
        Section(5, "ledgers", "t").attempt(raised, got)


def test_an_unreadable_bundle_stops_at_once():
    with pytest.raises(UnreadableBundle):
        outcome_of(_unreadable)
