"""The key vault: a key planted anywhere a provider speaks never comes out."""

import copy
import logging
import pickle

import pytest

from benchclaw.errors import ProviderConfigError
from benchclaw.providers.vault import (KEY_MARK, REDACTED, Secret, contains_secret, install_log_redaction, is_secret,
                                      load_key, mark_secrets, redact)

KEY = "sk-planted-Zq8fT3xKp0LmV9wRb2Yc"


def test_secret_never_prints_its_value():
    s = Secret(KEY, label="NEBIUS_API_KEY")
    for text in (repr(s), str(s), f"{s}", f"{s!r:>80}", "%s" % s, str([s]), str({"k": s})):
        assert KEY not in text and "NEBIUS_API_KEY" in text
    assert s.reveal() == KEY
    assert KEY.encode() not in s._masked
    for op in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError):
            op(s)


def test_redact_whole_keys_and_long_echoes_only():
    s = Secret(KEY)
    text = (f"Incorrect API key provided: {KEY}. Header was 'Bearer {KEY}'. "
            f"Your key starts with {KEY[:20]}… and ends {KEY[-9:]}")
    out = redact(text)
    assert KEY not in out and KEY[:20] not in out
    assert redact(text, keys=[KEY]).count(REDACTED) == 3
    # a short piece of the key is ordinary text (it may be a task's answer): kept
    assert KEY[-9:] in out
    assert redact("nothing secret here, sk-") == "nothing secret here, sk-"
    del s


@pytest.mark.parametrize("value", ["EMPTY", "sk-no-key-required", "no-key-needed", "ollama", "sk-1234",
                                   "shortKey1", "all-lower-case-words-only"])
def test_placeholders_are_not_secrets_and_are_never_redacted(value):
    s = Secret(value)
    assert not s.is_secret and not is_secret(value)
    for text in (f"the field was {value}", "this is required", "EMPTY result"):
        assert redact(text) == text and not contains_secret(text)
    del s


def test_a_key_overlapping_an_answer_leaves_the_answer_alone():
    key = "sk-bc7Qm2x123456789Zt4K9pL0aR3vW8yN6cJ5hE1fD"
    s = Secret(key)
    assert s.is_secret
    answer = '{"total_cents": 123456789, "vendor": "ACME"}'
    assert redact(answer) == answer and not contains_secret(answer)
    assert mark_secrets(f"x {key} y") == f"x {KEY_MARK} y" and contains_secret(f"x {key} y")
    del s


def test_env_and_file_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHCLAW_TEST_KEY", raising=False)
    with pytest.raises(ProviderConfigError, match="BENCHCLAW_TEST_KEY is not set"):
        load_key("BENCHCLAW_TEST_KEY")
    monkeypatch.setenv("BENCHCLAW_TEST_KEY", KEY + "\n")
    assert load_key("BENCHCLAW_TEST_KEY").reveal() == KEY
    f = tmp_path / "key.txt"
    f.write_text(KEY + "\n")
    assert load_key("UNUSED", str(f)).reveal() == KEY
    assert load_key(None) is None
    with pytest.raises(ProviderConfigError, match="cannot read"):
        load_key(None, str(tmp_path / "missing"))


def test_log_lines_of_the_sdk_are_redacted(caplog):
    s = Secret(KEY)
    install_log_redaction()
    with caplog.at_level(logging.DEBUG, logger="openai"):
        logging.getLogger("openai").debug("Request options: %s", {"headers": {"Authorization": f"Bearer {KEY}"}})
    assert caplog.records and all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY not in caplog.text
    del s
