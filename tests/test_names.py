"""``benchclaw.formats.names``: file-name-safe ids and terminal-safe text."""

from __future__ import annotations

import json

import pytest

from benchclaw.formats.names import json_terminal_safe, terminal_safe


@pytest.mark.parametrize("raw, shown", [
    ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    ("\x1b[2J\r status: passed", "\\x1b[2J\\x0d status: passed"),
    ("8-bit CSI \x9b31m and DEL \x7f", "8-bit CSI \\x9b31m and DEL \\x7f"),
    ("\u202egnp.exe", "\\u202egnp.exe"),
    ("plain: é, 日本, tab\tand\nnewline", "plain: é, 日本, tab\tand\nnewline"),
])
def test_terminal_safe_escapes_what_a_terminal_would_obey(raw, shown):
    assert terminal_safe(raw) == shown


def test_one_line_fields_escape_newlines_too():
    assert terminal_safe("ok\nstatus: passed", keep_newlines=False) == "ok\\x0astatus: passed"


def test_json_output_stays_valid_json_with_the_same_meaning():
    value = {"reply": "a\x9bb\u202ec\x1b"}
    text = json_terminal_safe(json.dumps(value, ensure_ascii=False))
    assert "\x9b" not in text and "\u202e" not in text and json.loads(text) == value
