"""Parsing model replies: every malformed shape gets a reason the model can act on."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from benchclaw.agent.protocol import Action, Invalid, parse_reply

ALL = ("read", "write", "check", "finish")
DIRECT = ("read", "write", "finish")


@pytest.mark.parametrize("reply, action", [
    ('{"action": "read", "path": "a.md"}', Action("read", {"path": "a.md"})),
    ('  {"action":"write","path":"o.json","content":"{}"}\n', Action("write", {"path": "o.json", "content": "{}"})),
    ('{"action": "check"}', Action("check", {})),
    ('{"action": "finish", "summary": "done", "reason": "extra keys are ignored"}', Action("finish", {"summary": "done"})),
])
def test_well_formed_replies_become_actions(reply, action):
    assert parse_reply(reply, ALL) == action


@pytest.mark.parametrize("reply, says", [
    (None, "empty reply"),
    ("   ", "empty reply"),
    ("read a.md please", "not valid JSON"),
    ('{"action": "read", "path": "a.md"', "not valid JSON"),
    ('Sure! {"action": "read", "path": "a.md"}', "prose or code fences"),
    ('```json\n{"action": "read", "path": "a.md"}\n```', "prose or code fences"),
    ('{"action": "read", "path": "a.md"} and then I will write', "prose or code fences"),
    ('[{"action": "read", "path": "a.md"}]', "expected one JSON object"),
    ('"read"', "expected one JSON object"),
    ('{"path": "a.md"}', "missing field 'action'"),
    ('{"action": 3}', "field 'action' must be a string"),
    ('{"action": "read"}', "needs the field 'path'"),
    ('{"action": "write", "path": "o.json"}', "needs the field 'content'"),
    ('{"action": "finish"}', "needs the field 'summary'"),
    ('{"action": "read", "path": ["a.md"]}', "field 'path' of action 'read' must be a string"),
    ('{"action": "write", "path": "o.json", "content": {"a": 1}}', "must be a string"),
    ('{"action": "shell", "cmd": "cat /etc/passwd"}', "unknown action 'shell'"),
    ('{"action": "read", "path": "a.md", "path": "../x"}', "duplicate key 'path'"),
    ('{"action": "read", "path": "\\ud800"}', "lone surrogate"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ('{"action": "read", "path": "\ud800"}', "lone surrogate"),  # the character itself, not an escape
    ('{"action": "read", "path": "a.md", "x": ' + "[" * 40 + "]" * 40 + "}", "nested too deeply"),
])
def test_malformed_replies_say_what_was_wrong(reply, says):
    got = parse_reply(reply, ALL)
    assert isinstance(got, Invalid)
    assert says in got.reason


def test_an_action_the_profile_does_not_offer_is_invalid_and_lists_the_offer():
    got = parse_reply('{"action": "check"}', DIRECT)
    assert isinstance(got, Invalid)
    assert "not offered" in got.reason and "read, write, finish" in got.reason
    assert got.action == "check"


def test_the_named_action_is_kept_for_lure_matching():
    assert parse_reply('{"action": "shell"}', ALL).action == "shell"
    assert parse_reply('{"action": "read"}', ALL).action == "read"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.none(),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                              lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                              max_leaves=8).map(lambda v: __import__("json").dumps(v))))
def test_parse_reply_is_total(reply):
    got = parse_reply(reply, DIRECT)
    assert isinstance(got, (Action, Invalid))
    if isinstance(got, Action):
        assert got.name in DIRECT


def test_brackets_and_escapes_inside_strings_are_only_text():
    """The nesting and surrogate checks look at the parsed value; the text's brackets and
    ``\\u`` escapes only decide whether they must look."""
    content = "{[" * 40 + " \\u00e9 \\ud83d\\ude00 \u00e9"
    got = parse_reply('{"action": "write", "path": "o.md", "content": ' + json.dumps(content) + "}", ALL)
    assert got == Action("write", {"path": "o.md", "content": content})
